"""Make tests/golden/lf_fidelity.json with LLaMA-Factory itself (not run in CI): for LLaMA-Factory's own example files,
the numbers its run would use, so that tests/test_lf_fidelity.py checks ours against them without LLaMA-Factory.

    python3 -m venv /tmp/lfvenv
    /tmp/lfvenv/bin/pip install torch==2.13.0 && /tmp/lfvenv/bin/pip install llamafactory==0.9.5
    /tmp/lfvenv/bin/python tools/make_lf_fidelity_golden.py [--examples ../shared/fixtures/llamafactory/examples]

What it records, each from LLaMA-Factory's real code path (its workflows run until the point where the number is
used, then stop):
1. steps: rows of the training set after LLaMA-Factory's preprocessing, micro-batches per epoch, optimizer steps
   per epoch and in all (transformers' Trainer.set_initial_training_values, run on the trainer LLaMA-Factory built);
2. warm-up steps (TrainingArguments.get_warmup_steps of those steps);
3. gradient checkpointing: whether the model LLaMA-Factory loaded for training has it on, and use_reentrant;
4. do_predict: the generation settings LLaMA-Factory's sft workflow hands to `predict` (do_sample, temperature, ...);
5. export: the merged folder's tokenizer eos_token and generation_config.json eos_token_id (a Qwen-style run:
   template qwen3_nothink).
And LLaMA-Factory's v1 configs (examples/v1): each file parsed by v1's own argument parser (the values it resolves,
defaults included), and the training rows v1's DataEngine draws for data/v1_sft_demo.yaml.

Every run uses one small tokenizer (tests/golden/tokenizers/bytelevel, a Qwen-style byte-level BPE that knows the
templates' special tokens) and a tiny random Qwen2 built from it; `bf16` and `deepspeed` are taken out of the files
(this machine has no GPU and one process: neither changes a number recorded here), and `adapter_name_or_path` of
training and predict files is dropped (a random adapter changes no count or setting), while the merge files get a
tiny adapter made here.
"""

from __future__ import annotations

import argparse
import copy
import importlib.machinery
import json
import os
import sys
import tempfile
import types
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
TOKENIZER = GOLDEN / "tokenizers" / "bytelevel"
DEFAULT_EXAMPLES = ROOT.parent / "shared" / "fixtures" / "llamafactory" / "examples"
V1_DATA = GOLDEN / "lf_v1_data"   # LLaMA-Factory's data/v1_*.yaml (its examples/v1 files name them)

# The example files whose numbers are recorded (the ones steadytune runs: docs/lf_examples.md).
TRAIN_FILES = ["train_lora/qwen3_lora_sft.yaml", "train_lora/qwen3_lora_sft_ds3.yaml",
               "train_lora/qwen3_lora_pretrain.yaml", "train_lora/qwen3_preprocess.yaml",
               "train_lora/qwen3_lora_dpo.yaml", "train_lora/qwen3_lora_kto.yaml", "train_lora/qwen3_lora_reward.yaml",
               "train_full/qwen3_full_sft.yaml", "train_qlora/llama3_lora_sft_awq.yaml"]
PREDICT_FILES = ["extras/nlg_eval/llama3_lora_predict.yaml"]
EXPORT_FILES = ["merge_lora/qwen3_lora_sft.yaml", "merge_lora/qwen3_full_sft.yaml"]
# Keys taken out of every file (see the module docstring) and what they are replaced with.
NEUTRAL = {"bf16": False, "deepspeed": None, "report_to": "none", "plot_loss": False}
# Warm-up rounding cases: (steps, warmup_ratio) -> transformers' warm-up steps.
WARMUP_CASES = [(2, 0.1), (321, 0.1), (30, 0.1), (411, 0.1), (375, 0.1), (10, 0.03), (7, 0.5), (1000, 0.0)]
TINY_QWEN2 = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True)


class Captured(Exception):
    """Raised from inside LLaMA-Factory's run once the numbers are known, so nothing is trained."""

    def __init__(self, values: dict):
        super().__init__("captured")
        self.values = values


def stub_torchaudio() -> None:
    # torchaudio's native library may not load against this torch; the text path never uses it.
    try:
        import torchaudio  # noqa: F401
    except Exception:
        stand_in = types.ModuleType("torchaudio")
        stand_in.__spec__ = importlib.machinery.ModuleSpec("torchaudio", None)
        sys.modules["torchaudio"] = stand_in


def tiny_model(folder: Path, sizes: dict = TINY_QWEN2) -> Path:
    """A random Qwen2 of `sizes` on the golden's tokenizer, seeded, saved in `folder`."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER)
    config = Qwen2Config(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id, **sizes)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_adapter(model_folder: Path, folder: Path) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_folder)
    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]))
    peft_model.save_pretrained(folder)
    return folder


def read_example(examples: Path, relative: str, model: Path, output: Path) -> dict:
    args = yaml.safe_load((examples / relative).read_text(encoding="utf-8"))
    args.update(NEUTRAL, model_name_or_path=str(model), dataset_dir=str(examples.parent / "data"),
                output_dir=str(output), overwrite_output_dir=True)
    args.pop("adapter_name_or_path", None)
    args.pop("resume_from_checkpoint", None)
    return args


def capture_training(examples: Path, relative: str, model: Path, work: Path) -> dict:
    """Run LLaMA-Factory's workflow for the file up to the first optimizer step; -> the numbers it would train with."""
    import transformers

    def inner_loop(self, batch_size=None, args=None, resume_from_checkpoint=None, trial=None,
                   ignore_keys_for_eval=None):
        args = args or self.args
        dataloader = self.get_train_dataloader()
        epochs, per_epoch, examples_, samples, total_batch, steps_in_epoch, max_steps = \
            self.set_initial_training_values(args, dataloader)
        model = self.model
        raise Captured({
            "train_rows": len(self.train_dataset),
            "per_device_train_batch_size": args.per_device_train_batch_size,
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
            "num_train_epochs": args.num_train_epochs,
            "micro_batches_per_epoch": len(dataloader),
            "steps_per_epoch": per_epoch,
            "max_steps": max_steps,
            "warmup_steps": args.get_warmup_steps(max_steps),
            "gradient_checkpointing": any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules()),
            "gradient_checkpointing_use_reentrant": _use_reentrant(model),
        })

    return run_until(transformers.Trainer, "_inner_training_loop", inner_loop, "its training loop",
                     examples, relative, model, work)


def run_until(owner, name: str, stand_in, where: str, examples: Path, relative: str, model: Path, work: Path) -> dict:
    """Run LLaMA-Factory on the example with owner.name replaced by `stand_in`, which raises Captured with what it
    saw; -> those values (the method is put back either way)."""
    from llamafactory.train.tuner import run_exp

    original = getattr(owner, name)
    setattr(owner, name, stand_in)
    try:
        run_exp(read_example(examples, relative, model, work / relative.replace("/", "_")))
    except Captured as c:
        return c.values
    finally:
        setattr(owner, name, original)
    raise RuntimeError(f"{relative}: LLaMA-Factory's run never reached {where}")


def _use_reentrant(model) -> bool | None:
    """The use_reentrant LLaMA-Factory's checkpointing function was made with (None: checkpointing off)."""
    for module in model.modules():
        func = getattr(module, "_gradient_checkpointing_func", None)
        if func is None:
            continue
        while hasattr(func, "__wrapped__"):
            func = func.__wrapped__
        keywords = getattr(func, "keywords", None)
        if keywords is not None:
            return bool(keywords.get("use_reentrant", True))
    return None


def capture_predict(examples: Path, relative: str, model: Path, work: Path) -> dict:
    """The generation settings LLaMA-Factory's do_predict passes to Seq2SeqTrainer.predict."""
    import transformers

    def predict(self, test_dataset, ignore_keys=None, metric_key_prefix="test", **gen_kwargs):
        raise Captured({"eval_rows": len(test_dataset),
                        "gen_kwargs": {k: v for k, v in gen_kwargs.items() if _jsonable(v)},
                        "model_generation_config": {k: getattr(self.model.generation_config, k, None)
                                                    for k in ("do_sample", "temperature", "top_p", "top_k")}})

    return run_until(transformers.Seq2SeqTrainer, "predict", predict, "predict", examples, relative, model, work)


def _jsonable(value) -> bool:
    try:
        json.dumps(value)
        return True
    except TypeError:
        return False


def capture_export(examples: Path, relative: str, model: Path, adapter: Path, work: Path) -> dict:
    """Run LLaMA-Factory's export on the tiny model (with a tiny adapter where the file names one); -> the stop-token
    bookkeeping of the folder it writes."""
    from llamafactory.train.tuner import export_model

    args = yaml.safe_load((examples / relative).read_text(encoding="utf-8"))
    out = work / relative.replace("/", "_")
    args.update(model_name_or_path=str(model), export_dir=str(out))
    if args.get("adapter_name_or_path"):
        args["adapter_name_or_path"] = str(adapter)
    export_model(args)
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    generation = json.loads((out / "generation_config.json").read_text(encoding="utf-8"))
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    from transformers import AutoTokenizer

    saved = AutoTokenizer.from_pretrained(out)
    return {"template": args.get("template"),
            "tokenizer_eos_token": tokenizer_config.get("eos_token"),
            "tokenizer_eos_token_id": saved.eos_token_id,
            "tokenizer_pad_token": tokenizer_config.get("pad_token"),
            "tokenizer_padding_side": tokenizer_config.get("padding_side"),
            "generation_config_eos_token_id": generation.get("eos_token_id"),
            "generation_config_pad_token_id": generation.get("pad_token_id"),
            "config_eos_token_id": config.get("eos_token_id"),
            "chat_template_saved": bool(tokenizer_config.get("chat_template") or (out / "chat_template.jinja").exists()),
            "files": sorted(p.name for p in out.iterdir())}


def capture_v1(examples: Path) -> dict:
    """Each examples/v1 file through v1's own argument parser, and v1's DataEngine on data/v1_sft_demo.yaml."""
    out: dict = {"files": {}}
    try:
        from llamafactory.v1.config.arg_parser import get_args
    except ImportError as e:  # pragma: no cover - depends on the installed version
        return {"error": f"llamafactory.v1 does not import: {e}"}
    for path in sorted((examples / "v1").rglob("*.yaml")):
        relative = str(path.relative_to(examples))
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        try:
            parsed = get_args(copy.deepcopy(raw))
        except Exception as e:  # a file v1's parser refuses (or an optional dependency missing here)
            out["files"][relative] = {"error": f"{type(e).__name__}: {e}"}
            continue
        resolved = {}
        for section in parsed:
            for key, value in vars(section).items():
                if key == "output_dir":
                    continue  # a fresh uuid every run
                value = dict(value) if isinstance(value, dict) else getattr(value, "value", value)
                resolved[key] = value if _jsonable(value) else repr(value)
        out["files"][relative] = {"raw_keys": sorted(raw), "resolved": resolved}
    # The rows v1 trains on for data/v1_sft_demo.yaml: (dataset, row) in order, drawn after set_seed(42).
    from llamafactory.v1.core.data_engine import DataEngine
    from llamafactory.v1.utils.helper import set_seed

    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        for f in (examples.parent / "data").iterdir():
            (data / f.name).symlink_to(f.resolve())
        for f in V1_DATA.iterdir():
            (data / f.name).write_bytes(f.read_bytes())
        os.chdir(tmp)
        try:
            set_seed(42)
            engine = DataEngine("data/v1_sft_demo.yaml")
            out["v1_sft_demo"] = {"seed": 42, "rows": len(engine),
                                  "index": [list(entry[:2]) for entry in engine.data_index]}
        finally:
            os.chdir(cwd)
    return out


# --- training methods (issue 56): trainable names, the optimizer's groups and the first steps' losses -------------

# A 4-layer tiny Qwen2 (LLaMA Pro's and freeze's layer choices differ on it), built as tiny_model builds its own.
METHODS_QWEN2 = dict(TINY_QWEN2, num_hidden_layers=4)
# Keys every method run gets: the whole data set (4 rows of identity) in one micro-batch a step, so the steps'
# losses depend on the method only, not on the data order; a constant learning rate large enough to move a tiny model.
METHODS_COMMON = {**NEUTRAL, "dataset": "identity", "max_samples": 4, "per_device_train_batch_size": 4,
                  "gradient_accumulation_steps": 1, "cutoff_len": 1024, "lr_scheduler_type": "constant",
                  "warmup_ratio": 0.0, "learning_rate": 1.0e-2, "max_steps": 3, "logging_steps": 1,
                  "save_steps": 1000, "optim": "adamw_torch", "pure_bf16": False, "num_train_epochs": 1.0}
METHODS_STEPS = 3
# (name, LLaMA-Factory example file, keys changed for the tiny model). The seed is reset to 0 just before peft
# makes the adapter (both here and in the test), so LoRA's random A matrices are the same in both.
METHOD_CASES = [
    ("freeze", "extras/llama_pro/llama3_freeze_sft.yaml", {"use_llama_pro": False, "freeze_trainable_layers": 2}),
    ("freeze_mlp_extra", "extras/llama_pro/llama3_freeze_sft.yaml",
     {"use_llama_pro": False, "freeze_trainable_layers": -1, "freeze_trainable_modules": "mlp,self_attn",
      "freeze_extra_modules": "norm"}),
    ("llama_pro", "extras/llama_pro/llama3_freeze_sft.yaml", {"freeze_trainable_layers": 2}),
    ("llama_pro_lora", "extras/llama_pro/llama3_freeze_sft.yaml",
     {"finetuning_type": "lora", "freeze_trainable_layers": 2, "learning_rate": 1.0e-3}),
    ("loraplus", "extras/loraplus/llama3_lora_sft.yaml", {"learning_rate": 1.0e-3}),
    ("pissa", "extras/pissa/llama3_lora_sft.yaml", {"learning_rate": 1.0e-3, "pissa_iter": -1, "pissa_convert": False}),
    ("oft", "extras/oft/llama3_oft_sft.yaml", {"oft_block_size": 8, "learning_rate": 1.0e-3}),
    ("dft", "extras/dft/qwen2_full_sft.yaml", {"learning_rate": 1.0e-3}),
    ("eaft", "extras/eaft/qwen25_05b_eaft_full.yaml", {"learning_rate": 1.0e-3}),
    ("asft", "extras/asft/qwen2_full_asft.yaml", {"learning_rate": 1.0e-3, "asft_alpha": 0.1}),
    ("galore", "extras/galore/llama3_full_sft.yaml", {"galore_layerwise": False, "galore_rank": 4,
                                                     "learning_rate": 1.0e-3}),
    ("galore_layerwise", "extras/galore/llama3_full_sft.yaml", {"galore_rank": 4, "learning_rate": 1.0e-3}),
    ("apollo", "extras/apollo/llama3_full_sft.yaml", {"apollo_layerwise": False, "apollo_rank": 4,
                                                     "learning_rate": 1.0e-3}),
    ("badam", "extras/badam/llama3_full_sft.yaml", {"badam_switch_interval": 1, "badam_verbose": 0,
                                                   "learning_rate": 1.0e-3}),
    ("adam_mini", "extras/adam_mini/qwen2_full_sft.yaml", {"learning_rate": 1.0e-3}),
    ("muon", "extras/muon/qwen2_full_sft.yaml", {"learning_rate": 1.0e-3, "weight_decay": 0.01}),
]


def _groups(optimizer, names: dict) -> list[dict]:
    """The optimizer's parameter groups as names and JSON-able settings (a layer-wise optimizer: each inner one's)."""
    inner = getattr(optimizer, "optimizer", optimizer)
    if hasattr(inner, "optimizer_dict"):   # LLaMA-Factory's DummyOptimizer (layer-wise GaLore / APOLLO)
        return [g for o in inner.optimizer_dict.values() for g in _groups(o, names)]
    out = []
    for group in inner.param_groups:
        settings = {k: v for k, v in group.items() if k != "params" and _jsonable(v)}
        out.append({"names": sorted(names.get(id(p), "?") for p in group["params"]), **settings})
        if hasattr(inner, "state") and any("use_muon" in inner.state.get(p, {}) for p in group["params"]):
            out[-1]["muon"] = sorted(names[id(p)] for p in group["params"] if inner.state[p].get("use_muon"))
    return out


def capture_method(examples: Path, name: str, relative: str, changes: dict, model: Path, work: Path) -> dict:
    """LLaMA-Factory's run of the example with `changes`: the trainable names, the optimizer's groups at the first
    step, and the loss of each of the first METHODS_STEPS steps."""
    import peft
    import torch
    import transformers
    from llamafactory.train.tuner import run_exp

    args = yaml.safe_load((examples / relative).read_text(encoding="utf-8"))
    args.update(METHODS_COMMON, **changes, model_name_or_path=str(model), dataset_dir=str(examples.parent / "data"),
                output_dir=str(work / name), overwrite_output_dir=True)
    for key in ("adapter_name_or_path", "resume_from_checkpoint", "fsdp", "fsdp_transformer_layer_cls_to_wrap"):
        args.pop(key, None)
    seen: dict = {"losses": []}
    original_step, original_peft = transformers.Trainer.training_step, peft.get_peft_model

    def training_step(self, model, inputs, num_items_in_batch=None):
        if not seen["losses"]:
            named = self.model.named_parameters()
            names = {id(p): n for n, p in named}
            seen["trainable"] = sorted(n for n, p in self.model.named_parameters() if p.requires_grad)
            seen["groups"] = _groups(self.optimizer, names)
        loss = original_step(self, model, inputs, num_items_in_batch)
        seen["losses"].append(float(loss))
        if len(seen["losses"]) == METHODS_STEPS:
            raise Captured(seen)
        return loss

    def seeded_peft(*a, **k):
        torch.manual_seed(0)
        return original_peft(*a, **k)

    transformers.Trainer.training_step = training_step
    peft.get_peft_model = seeded_peft
    import llamafactory.model.adapter as adapter
    adapter.get_peft_model = seeded_peft
    try:
        run_exp(args)
    except Captured as c:
        return {"example": relative, "changes": changes, **c.values}
    finally:
        transformers.Trainer.training_step = original_step
        peft.get_peft_model = adapter.get_peft_model = original_peft
    raise RuntimeError(f"{name}: LLaMA-Factory's run ended before {METHODS_STEPS} steps")


def capture_methods(examples: Path, work: Path) -> dict:
    model = tiny_model(work / "tiny-qwen2-4layers", METHODS_QWEN2)
    out = {"tiny_qwen2": METHODS_QWEN2, "common": METHODS_COMMON, "cases": {}}
    for name, relative, changes in METHOD_CASES:
        out["cases"][name] = capture_method(examples, name, relative, changes, model, work)
        print(name, out["cases"][name]["losses"], flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=Path, default=DEFAULT_EXAMPLES)
    parser.add_argument("--output", type=Path, default=GOLDEN / "lf_fidelity.json")
    parser.add_argument("--methods", action="store_true", help="only the training methods' golden "
                        "(tests/golden/lf_methods.json: trainable names, optimizer groups, first losses)")
    args = parser.parse_args()
    os.environ.setdefault("DISABLE_VERSION_CHECK", "1")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    stub_torchaudio()
    import llamafactory
    import transformers

    work = Path(tempfile.mkdtemp(prefix="lf_fidelity_"))
    if args.methods:
        os.chdir(work)
        result = {"made_with": f"llamafactory {llamafactory.__version__}, transformers {transformers.__version__}",
                  "tokenizer": "tests/golden/tokenizers/bytelevel", **capture_methods(args.examples, work)}
        target = GOLDEN / "lf_methods.json"
        target.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {target}")
        return 0
    model = tiny_model(work / "tiny-qwen2")
    adapter = tiny_adapter(model, work / "tiny-adapter")
    result = {"made_with": f"llamafactory {llamafactory.__version__}, transformers {transformers.__version__}",
              "tokenizer": "tests/golden/tokenizers/bytelevel", "tiny_qwen2": TINY_QWEN2, "neutral_keys": NEUTRAL,
              "train": {}, "predict": {}, "export": {}}
    os.chdir(work)  # LLaMA-Factory writes relative paths (saves/...) where it runs
    for relative in TRAIN_FILES:
        result["train"][relative] = capture_training(args.examples, relative, model, work)
        print(relative, result["train"][relative], flush=True)
    for relative in PREDICT_FILES:
        result["predict"][relative] = capture_predict(args.examples, relative, model, work)
        print(relative, result["predict"][relative], flush=True)
    for relative in EXPORT_FILES:
        result["export"][relative] = capture_export(args.examples, relative, model, adapter, work)
        print(relative, result["export"][relative], flush=True)
    from transformers import TrainingArguments

    result["warmup"] = [{"steps": steps, "warmup_ratio": ratio,
                         "warmup_steps": TrainingArguments(output_dir=str(work / "w"), warmup_ratio=ratio)
                         .get_warmup_steps(steps)} for steps, ratio in WARMUP_CASES]
    result["v1"] = capture_v1(args.examples)
    args.output.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
