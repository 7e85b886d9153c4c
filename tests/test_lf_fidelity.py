"""LLaMA-Factory's own numbers for its example files (tests/golden/lf_fidelity.json, made by LLaMA-Factory 0.9.5 with
tools/make_lf_fidelity_golden.py) against ours: optimizer steps, warm-up, gradient checkpointing, do_predict's
generation settings, export's stop tokens, and its v1 configs. Where steadytune differs on purpose, the difference is
recorded (cfg.decide) and printed with numbers; these tests check that too."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from conftest import LF_FIXTURES, needs_shared
from transformers import AutoTokenizer

from steadytune.config import load_config
from steadytune.model.tiny import save_tiny_model
from steadytune.stages.table import STAGES
from steadytune.hardware.backend import HardwareInfo
from steadytune.model.attention import PackingPlan, plan_packing
from steadytune.training.batches import (
    TrainBatches,
    count_steps,
    lf_step_count,
    token_budget,
    uses_token_budget,
    warmup_steps_of,
)

GOLDEN = json.loads((Path(__file__).parent / "golden" / "lf_fidelity.json").read_text(encoding="utf-8"))
TOKENIZER = Path(__file__).parent / "golden" / "tokenizers" / "bytelevel"
EXAMPLES = LF_FIXTURES / "examples"


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(TOKENIZER)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, tokenizer) -> Path:
    """The golden's model: a tiny Qwen2 on the golden tokenizer (its weights change none of the numbers here)."""
    return save_tiny_model(tmp_path_factory.mktemp("lf_fidelity") / "qwen2", "qwen2", tokenizer=tokenizer)


def example_config(relative: str, model: Path, out: Path, **extra):
    """An LF example file as the golden ran it: only the model, dataset_dir and the neutral keys changed."""
    neutral = {k: v for k, v in GOLDEN["neutral_keys"].items() if k != "plot_loss"}
    overrides = {"model_name_or_path": str(model), "dataset_dir": str(LF_FIXTURES / "data"), "output_dir": str(out),
                 **neutral, **extra}
    if "tokenized_path" in yaml.safe_load((EXAMPLES / relative).read_text(encoding="utf-8")):
        # LF's preprocess example caches under a path relative to the working directory: keep it in this test's
        # folder, so no run leaves a cache in the checkout for the next one to trip over (another tokenizer's)
        overrides["tokenized_path"] = str(out / "tokenized")
    return load_config(EXAMPLES / relative, overrides)


# --- 1 and 2: steps and warm-up -------------------------------------------------------------------------------

@needs_shared
@pytest.mark.parametrize("relative", sorted(GOLDEN["train"]))
def test_steps_and_warmup_are_llamafactorys(relative, tiny_model, tokenizer, tmp_path):
    """Packing is on by default on this CPU; the rows, micro-batches, steps and warm-up are LLaMA-Factory's all the
    same (packing lays a micro-batch out, it does not change what it holds)."""
    want = GOLDEN["train"][relative]
    cfg = example_config(relative, tiny_model, tmp_path)
    data = STAGES[cfg.method.stage].prepare_data(cfg, tokenizer)
    assert len(data.train) == want["train_rows"]
    packed = cfg.method.stage != "pt"   # what decide_packing does here for these files (CPU, no class weights)
    lengths = [len(x["input_ids"]) for x in data.train]
    # packed by default on a CPU: the examples per micro-batch are kept (by_tokens only on a CUDA GPU)
    plan = PackingPlan("sdpa", "sdpa") if packed else None
    budget, _ = token_budget(cfg.train, lengths, packing_asked=uses_token_budget(cfg, plan))
    assert budget is None
    batches = TrainBatches(cfg, data, tokenizer, packing_attention="sdpa" if packed else None, max_tokens=budget)
    steps = count_steps(cfg.train, batches.batches_per_epoch())
    assert (steps.micro_batches_per_epoch, steps.steps_per_epoch, steps.total) == \
        (want["micro_batches_per_epoch"], want["steps_per_epoch"], want["max_steps"])
    assert warmup_steps_of(cfg.train, steps.total) == want["warmup_steps"]
    groups = batches.micro_batches(0)
    per_device = cfg.train.per_device_train_batch_size
    assert all(len(g) == per_device for g in groups[:-1]) and 0 < len(groups[-1]) <= per_device
    assert sorted(i for g in groups for i in g) == list(range(len(data.train)))  # every row, once an epoch


def test_step_formula_is_transformers_for_any_shape():
    """lf_step_count (printed beside ours) against the golden rows, and our own count equal to it for one process."""
    for relative, want in GOLDEN["train"].items():
        lf = lf_step_count(want["train_rows"], want["per_device_train_batch_size"], 1,
                           want["gradient_accumulation_steps"], want["num_train_epochs"], -1)
        assert (lf.micro_batches_per_epoch, lf.steps_per_epoch, lf.total) == \
            (want["micro_batches_per_epoch"], want["steps_per_epoch"], want["max_steps"]), relative


def test_warmup_rounds_up_as_transformers():
    class Train:
        warmup_steps = 0
        warmup_ratio = 0.0
    for case in GOLDEN["warmup"]:
        t = Train()
        t.warmup_ratio = case["warmup_ratio"]
        assert warmup_steps_of(t, case["steps"]) == case["warmup_steps"], case
    assert any(case["warmup_steps"] == math.ceil(case["steps"] * case["warmup_ratio"]) != round(
        case["steps"] * case["warmup_ratio"]) for case in GOLDEN["warmup"])  # the cases tell ceil from round


def small_dataset(folder: Path, n: int) -> Path:
    rows = [{"instruction": f"Say {i} " * (1 + i % 5), "input": "", "output": f"{i} " * (1 + i % 3)} for i in range(n)]
    path = folder / "small.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    return path


def run_small(model: Path, out: Path, **extra):
    from steadytune.train import run_training

    overrides = {"model_name_or_path": str(model), "dataset": str(small_dataset(out.parent, 10)), "template": "empty",
                 "cutoff_len": 64, "output_dir": str(out), "per_device_train_batch_size": 4,
                 "gradient_accumulation_steps": 2, "num_train_epochs": 2, "learning_rate": 1e-3, "save_steps": 100,
                 "logging_steps": 1, **extra}
    cfg = load_config(None, overrides)
    return cfg, run_training(cfg, progress=False)


def test_a_short_last_step_per_epoch_as_transformers(tiny_model, tmp_path, capsys):
    """10 rows, 4 a micro-batch, 2 micro-batches a step: micro-batches of 4, 4 and 2 rows, steps of 2 and 1
    micro-batches, 2 steps an epoch, 4 in all (LLaMA-Factory's Trainer does the same), warm-up ceil(0.1 x 4) = 1."""
    cfg, result = run_small(tiny_model, tmp_path / "short", warmup_ratio=0.1)
    assert len(result.losses) == 4 and result.global_step == 4
    assert cfg.decisions["total_steps"]["value"] == 4
    assert "the same as LLaMA-Factory's" in cfg.decisions["total_steps"]["reason"]
    assert cfg.decisions["warmup_steps"]["value"] == 1
    printed = capsys.readouterr().out
    assert "total_steps  4" in printed and "the same as LLaMA-Factory's" in printed


def test_a_token_budget_prints_the_difference_from_llamafactory(tiny_model, tmp_path, capsys):
    cfg, _ = run_small(tiny_model, tmp_path / "budget", max_tokens_per_batch=60, max_steps=-1)
    reason = cfg.decisions["total_steps"]["reason"]
    lf = lf_step_count(10, 4, 1, 2, 2.0, -1)
    assert "differs from LLaMA-Factory" in reason and f"{lf.total} steps there" in reason
    assert "micro-batches of 60 tokens" in reason
    assert "differs from LLaMA-Factory" in capsys.readouterr().out


# --- 3: gradient checkpointing ------------------------------------------------------------------------------------

@needs_shared
@pytest.mark.parametrize("relative", sorted(GOLDEN["train"]))
def test_checkpointing_llamafactory_would_use(relative, tiny_model, tmp_path):
    """The golden: LLaMA-Factory's loaded model checkpoints (re-entrant) for every training example; the note ours
    prints reads LLaMA-Factory's choice off the same keys."""
    from steadytune.config import lf_checkpointing_note

    want = GOLDEN["train"][relative]
    cfg = example_config(relative, tiny_model, tmp_path)
    assert want["gradient_checkpointing"] is True and want["gradient_checkpointing_use_reentrant"] is True
    assert lf_checkpointing_note(cfg.train, True) == "; as LLaMA-Factory"
    assert "differs from LLaMA-Factory" in lf_checkpointing_note(cfg.train, False)
    off = example_config(relative, tiny_model, tmp_path, disable_gradient_checkpointing=True)
    assert lf_checkpointing_note(off.train, False) == "; as LLaMA-Factory"


def test_checkpointing_off_here_is_printed_as_a_difference(tiny_model, tmp_path, capsys):
    cfg, _ = run_small(tiny_model, tmp_path / "gc", max_steps=1)
    decision = cfg.decisions["gradient_checkpointing"]
    assert decision["value"] is False   # a CPU: no memory budget, so no recomputation
    assert "no memory budget known" in decision["reason"] and "differs from LLaMA-Factory" in decision["reason"]
    assert "differs from LLaMA-Factory, which turns it on" in capsys.readouterr().out
    cfg, _ = run_small(tiny_model, tmp_path / "gc_on", max_steps=1, gradient_checkpointing=True)
    assert cfg.decisions["gradient_checkpointing"]["reason"].endswith("; as LLaMA-Factory")


# --- 4: do_predict's decoding -------------------------------------------------------------------------------------

@needs_shared
@pytest.mark.parametrize("relative", sorted(GOLDEN["predict"]))
def test_predict_decoding_is_llamafactorys_with_do_sample_or_the_difference_is_said(relative, tiny_model, tmp_path):
    from steadytune.data.prepare import template_for
    from steadytune.infer.generate import predict_sampling_note, sampling_of

    want = GOLDEN["predict"][relative]["gen_kwargs"]
    cfg = example_config(relative, tiny_model, tmp_path)
    greedy = sampling_of(cfg, sample_by_default=False)
    note = predict_sampling_note(cfg, greedy)
    assert not greedy.do_sample and want["do_sample"] is True
    for key in ("temperature", "top_p", "top_k", "max_new_tokens"):
        assert f"{key} {want[key]}" in note
    # do_sample: true gives LLaMA-Factory's generate() arguments exactly, and the same stop tokens
    sampled = sampling_of(example_config(relative, tiny_model, tmp_path, do_sample=True), sample_by_default=False)
    assert predict_sampling_note(cfg, sampled) is None
    kwargs = sampled.generate_kwargs()
    assert {k: kwargs.get(k, 1.0 if k == "length_penalty" else None) for k in want
            if k not in ("eos_token_id", "pad_token_id")} == {k: v for k, v in want.items()
                                                             if k not in ("eos_token_id", "pad_token_id")}
    from transformers import AutoTokenizer as Auto
    template = template_for(cfg, Auto.from_pretrained(tiny_model))
    assert template.stop_token_ids() == sorted(want["eos_token_id"])


# --- 5: export's stop tokens --------------------------------------------------------------------------------------

class ForceTokens:
    """A logits processor that makes generation emit `tokens` in order (then the last one again)."""

    def __init__(self, prompt_len: int, tokens: list[int]):
        self.prompt_len, self.tokens = prompt_len, tokens

    def __call__(self, input_ids, scores):
        import torch

        step = input_ids.shape[1] - self.prompt_len
        forced = torch.full_like(scores, float("-inf"))
        forced[:, self.tokens[min(step, len(self.tokens) - 1)]] = 0.0
        return forced


@needs_shared
def test_export_stop_tokens_for_llamacpp_vllm_and_generate(tiny_model, tmp_path):
    """merge_lora/qwen3_lora_sft.yaml on a Qwen-style run (template qwen3_nothink). LLaMA-Factory's export: tokenizer
    eos <|im_end|> (5), generation_config eos 1 (the base's <eos>). Ours: the same tokenizer eos (vLLM and llama.cpp's
    converter read it), and generation_config [5, 1]: transformers' generate stops at <|im_end|>, which with
    LLaMA-Factory's 1 it does not."""
    import gguf
    from transformers import AutoModelForCausalLM, GenerationConfig, LogitsProcessorList

    from steadytune.cli import main

    want = GOLDEN["export"]["merge_lora/qwen3_lora_sft.yaml"]
    run_small(tiny_model, tmp_path / "adapter", template="qwen3_nothink", max_steps=1)
    out = tmp_path / "merged"
    assert main(["export", str(EXAMPLES / "merge_lora" / "qwen3_lora_sft.yaml"), f"model_name_or_path={tiny_model}",
                 f"adapter_name_or_path={tmp_path / 'adapter'}", f"export_dir={out}", "export_format=gguf",
                 "export_gguf_type=f32"]) == 0
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert tokenizer_config["eos_token"] == want["tokenizer_eos_token"] == "<|im_end|>"
    exported = AutoTokenizer.from_pretrained(out)
    assert exported.eos_token_id == want["tokenizer_eos_token_id"] == 5
    assert tokenizer_config.get("padding_side") == want["tokenizer_padding_side"] == "left"
    ours = json.loads((out / "generation_config.json").read_text(encoding="utf-8"))["eos_token_id"]
    assert ours == [5, want["generation_config_eos_token_id"]]   # the stop word first, LLaMA-Factory's value kept
    # transformers generate: the model says <|im_end|> at its 2nd token; ours stops there, LF's generation_config not
    model = AutoModelForCausalLM.from_pretrained(out)
    prompt = exported("hello", return_tensors="pt")["input_ids"]
    force = LogitsProcessorList([ForceTokens(prompt.shape[1], [100, 5, 100])])
    for config, new_tokens in ((GenerationConfig.from_pretrained(out), 2),
                               (GenerationConfig(eos_token_id=want["generation_config_eos_token_id"]), 6)):
        config.max_new_tokens, config.do_sample = 6, False
        answer = model.generate(prompt, generation_config=config, logits_processor=force, pad_token_id=0)
        assert answer.shape[1] - prompt.shape[1] == new_tokens
    # llama.cpp: the GGUF's eos is <|im_end|>, what its converter makes of LLaMA-Factory's folder (tokenizer eos)
    reader = gguf.GGUFReader(next(out.glob("*.gguf")))
    field = reader.fields["tokenizer.ggml.eos_token_id"]
    assert int(field.parts[field.data[0]][0]) == 5
    # and the run's own tokenizer folder keeps its eos (only the export says the template's)
    assert AutoTokenizer.from_pretrained(tmp_path / "adapter").eos_token == "<eos>"


# --- LLaMA-Factory's v1 configs -----------------------------------------------------------------------------------

V1 = GOLDEN["v1"]["files"]
# What each v1 example does here: runs (its keys translated), or the one line that refuses it.
V1_REFUSED = {
    "v1/train_full/train_full_qwen3_moe_fsdpturbo_ep_fsdp.yaml": "not supported: kernel_config: auto, flash-linear",
}


@pytest.fixture
def v1_workdir(tmp_path, monkeypatch):
    """Where LLaMA-Factory's users run v1: its data/ (with the v1 dataset YAMLs) and examples/ side by side."""
    data = tmp_path / "data"
    data.mkdir()
    for f in (LF_FIXTURES / "data").iterdir():
        (data / f.name).symlink_to(f)
    for f in (Path(__file__).parent / "golden" / "lf_v1_data").iterdir():
        (data / f.name).write_bytes(f.read_bytes())
    (tmp_path / "examples").symlink_to(EXAMPLES)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@needs_shared
@pytest.mark.parametrize("relative", sorted(V1))
def test_v1_configs_read_as_v1_reads_them(relative, v1_workdir):
    from steadytune.config import ConfigError

    if relative in V1_REFUSED:
        with pytest.raises(ConfigError, match=V1_REFUSED[relative].replace("(", r"\(")):
            load_config(EXAMPLES / relative)
        return
    cfg = load_config(EXAMPLES / relative)
    if relative == "v1/train_full/train_full_ulysses_cp.yaml":   # v0 refuses cp_size (the golden's error); v1 splits
        t = cfg.train                                            # each sequence over 2 processes with Ulysses
        assert (t.cp_size, t.cp_mode, t.fsdp, cfg.model.flash_attn) == (2, "ulysses", "full_shard auto_wrap", "fa2")
        return
    want = V1[relative]["resolved"]
    if relative == "v1/train_freeze/train_freeze_sft.yaml":   # v1's freeze: v0's rule and keys (model/freeze.py)
        peft = want["peft_config"]
        assert (cfg.method.freeze_trainable_layers, cfg.method.freeze_trainable_modules) == \
            (peft["freeze_trainable_layers"], peft["freeze_trainable_modules"])
    t = cfg.train
    assert cfg.model.model_name_or_path == want["model"]
    assert t.per_device_train_batch_size == want["micro_batch_size"]
    assert t.num_train_epochs == want["num_train_epochs"]
    assert t.max_steps == (want["max_steps"] if want["max_steps"] is not None else -1)
    assert t.bf16 is want["bf16"] and t.logging_steps == want["logging_steps"]
    assert t.gradient_checkpointing is want["enable_activation_checkpointing"]
    assert cfg.data.cutoff_len == want["cutoff_len"]
    peft = want["peft_config"]
    assert cfg.method.finetuning_type == (peft["name"] if peft else "full")
    if peft and "r" in peft:
        m = cfg.method
        assert (m.lora_rank, m.lora_alpha, m.lora_dropout, m.lora_target) == \
            (peft["r"], peft["lora_alpha"], peft["lora_dropout"], peft["target_modules"])
    optim = want["optim_config"]
    if optim:   # v1's Muon plugin: its own lr (default 1e-3; learning_rate is not read), wd and AdamW settings
        assert optim["name"] == "muon" and t.use_muon
        assert t.learning_rate == optim.get("lr", 1e-3) != want["learning_rate"]
        assert (t.weight_decay, t.adam_beta1, t.adam_beta2, t.adam_epsilon) == \
            (optim["wd"], *optim["adamw_betas"], optim["adamw_eps"])
        assert t.lr_scheduler_type == "constant"
        return
    assert t.learning_rate == want["learning_rate"]
    # v1's optimizer and schedule: torch's AdamW defaults, a constant learning rate
    assert (t.weight_decay, t.lr_scheduler_type, t.warmup_steps) == (0.01, "constant", 0)
    assert "lf_v1" in cfg.decisions and "lf_v1_differences" in cfg.decisions


@needs_shared
def test_v1_dataset_yaml_draws_v1s_rows(v1_workdir, tokenizer):
    """data/v1_sft_demo.yaml: identity whole, then `size: 500` rows of alpaca_en_demo drawn with replacement after
    set_seed(42): the same 591 rows, in the same order, as v1's DataEngine."""
    from steadytune.data.prepare import prepare_datasets

    want = GOLDEN["v1"]["v1_sft_demo"]
    rows = json.loads((LF_FIXTURES / "data" / "alpaca_en_demo.json").read_text(encoding="utf-8"))
    identity = json.loads((LF_FIXTURES / "data" / "identity.json").read_text(encoding="utf-8"))
    source = {"identity": identity, "alpaca_en_demo": rows}
    cfg = load_config(EXAMPLES / "v1/train_lora/train_lora_sft.yaml", {"template": "qwen3_nothink"})
    data = prepare_datasets(cfg, tokenizer)
    assert len(data.train) == want["rows"] == 591
    # the answers we train on, in v1's order before shuffling: its rows' outputs
    expected = [source[name][row]["output"] for name, row in want["index"]]
    got = [tokenizer.decode([t for t in x["labels"] if t != -100]) for x in data.train]
    assert [g.removesuffix("<|im_end|>\n").strip() for g in got] == [e.replace("{{name}}", "{{name}}").strip()
                                                                     for e in expected]


def test_packing_by_default_on_a_cuda_gpu_cuts_by_tokens_and_says_how_it_differs_from_llamafactory():
    """On a CUDA GPU the default packing keeps a token budget: compiled layers and CUDA graphs need one static shape,
    which micro-batches of a fixed number of examples rarely fit (measured on the GPU-sized demo: 26% would be padding,
    no graphs, over 5x the time). The step count is then printed beside LLaMA-Factory's."""
    cfg = load_config(None, ["per_device_train_batch_size=32"])
    gpu = plan_packing(cfg, HardwareInfo(backend="cuda", torch_version="test"), class_weighted_loss=False)
    cpu = plan_packing(load_config(None, []), HardwareInfo(backend="cpu", torch_version="test"),
                       class_weighted_loss=False)
    assert gpu.by_tokens and uses_token_budget(cfg, gpu) and not cpu.by_tokens
    budget, why = token_budget(cfg.train, [100, 112], packing_asked=True, asked=False)
    assert budget == 32 * 106 and "packed by default on a GPU" in why and "static shape" in why
    asked = load_config(None, ["packing=true"])
    assert plan_packing(asked, HardwareInfo(backend="cpu", torch_version="test"), class_weighted_loss=False).by_tokens
