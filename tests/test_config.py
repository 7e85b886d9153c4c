"""Config: LLaMA-Factory keys load with their meaning; bad keys and values fail naming the key."""

import re
import time
from pathlib import Path

import pytest
import yaml
from conftest import LF_FIXTURES, needs_shared

from steadytune.cli import main
from steadytune.config import ConfigError, load_config, save_resolved_config
from steadytune.distributed.deepspeed_config import read_deepspeed_file
from steadytune.distributed.fsdp_config import read_fsdp_keys
from steadytune.errors import UserError
from steadytune.eval.labelcheck import _training_label_names
from steadytune.report.rundata import load_run

LF_EXAMPLES = LF_FIXTURES / "examples"
REPO = Path(__file__).resolve().parents[1]


@needs_shared
@pytest.mark.parametrize("name", ["qwen3_lora_sft.yaml", "qwen3_lora_sft_ds3.yaml"])
def test_llamafactory_examples_load_with_their_meaning(name):
    cfg = load_config(LF_EXAMPLES / "train_lora" / name)
    assert cfg.model.model_name_or_path == "Qwen/Qwen3-4B-Instruct-2507"
    assert cfg.method.finetuning_type == "lora" and cfg.method.lora_rank == 8 and cfg.method.lora_target == "all"
    assert cfg.data.dataset == "identity,alpaca_en_demo" and cfg.data.template == "qwen3_nothink"
    assert cfg.data.cutoff_len == 2048 and cfg.data.max_samples == 1000
    assert cfg.train.learning_rate == pytest.approx(1e-4) and cfg.train.lr_scheduler_type == "cosine"
    assert cfg.train.warmup_ratio == pytest.approx(0.1) and cfg.train.bf16 is True
    assert cfg.train.resume_from_checkpoint is None and cfg.train.plot_loss is True
    assert cfg.train.gradient_accumulation_steps == (2 if "ds3" in name else 8)
    if "ds3" in name:
        assert cfg.method.deepspeed.endswith("ds_z3_config.json")


SEED_001_YAML = """
model_name_or_path: Qwen/Qwen2-7B-Instruct
trust_remote_code: true
stage: sft
do_train: true
finetuning_type: lora
lora_target: all
lora_rank: 16
lora_alpha: 32
lora_dropout: 0.1
dataset: identity
template: qwen
cutoff_len: 2048
max_samples: 1000
preprocessing_num_workers: 4
output_dir: saves/qwen2-7b/lora/sft
logging_steps: 10
save_steps: 500
plot_loss: true
overwrite_output_dir: true
per_device_train_batch_size: 2
gradient_accumulation_steps: 4
learning_rate: 1.0e-4
num_train_epochs: 3.0
lr_scheduler_type: cosine
warmup_ratio: 0.1
ddp_timeout: 180000000
val_size: 0.1
per_device_eval_batch_size: 2
eval_strategy: steps
eval_steps: 500
"""


def test_seed_001_yaml_keys(tmp_path):
    path = tmp_path / "seed001.yaml"
    path.write_text(SEED_001_YAML, encoding="utf-8")
    cfg = load_config(path)
    assert cfg.method.lora_alpha == 32 and cfg.method.lora_dropout == pytest.approx(0.1)
    assert cfg.data.val_size == pytest.approx(0.1) and cfg.train.eval_steps == 500
    assert cfg.train.ddp_timeout == 180000000


def test_overrides_are_typed_and_win_over_the_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("model_name_or_path: Qwen/Qwen3-4B-Instruct-2507\nstage: sft\nfinetuning_type: lora\n"
                    "dataset: identity,alpaca_en_demo\nlearning_rate: 1.0e-4\nmax_samples: 1000\nbf16: true\n",
                    encoding="utf-8")
    cfg = load_config(path,
                      ["learning_rate=5e-5", "max_samples=2000", "bf16=false", "guard.window=20", "label_names=[a, b]"])
    assert cfg.train.learning_rate == pytest.approx(5e-5) and cfg.data.max_samples == 2000
    assert cfg.train.bf16 is False and cfg.guard.window == 20 and cfg.data.label_names == ["a", "b"]
    assert {"learning_rate", "max_samples", "guard.window"} <= cfg.user_keys


@pytest.mark.parametrize("override, message", [
    ("lerning_rate=1e-4", "unknown key 'lerning_rate' (did you mean 'learning_rate'?)"),
    ("quantization_method=hqq", "not supported: quantization_method: hqq"),
    ("quantization_device_map=auto", "not supported: quantization_device_map"),
    ("audio_sampling_rate=16000", "not supported: audio_sampling_rate"),
    ("stage=ppo", "not supported: stage: ppo"),
    ("finetuning_type=prefix", "finetuning_type: invalid value 'prefix' (choose one of lora, full, freeze, oft)"),
    ("mixture_of_depths=convert", "not supported: mixture_of_depths (mixture of depths is not supported"),
    ("ray_num_workers=0", "ray_num_workers: 0 is out of range"),
    ("placement_strategy=ANYWHERE", "placement_strategy: invalid value 'ANYWHERE'"),
    ("report_to=neptune", "report_to: unknown tracker 'neptune'; choose from none, all, tensorboard"),
    ("lora_rank=0", "lora_rank: 0 is out of range"),
    ("learning_rate=-1", "learning_rate: -1.0 is out of range"),
    ("warmup_ratio=1.5", "warmup_ratio: 1.5 is out of range"),
    ("lora_rank=eight", "lora_rank: invalid value 'eight'"),
    ("lr_scheduler_type=cosin", "did you mean 'cosine'"),
    ("bf16=maybe", "bf16: invalid value 'maybe'"),
    ("prompt_template=no placeholder", "prompt_template must contain {text}"),
    ("guard.windw=3", "guard.windw: unknown key (did you mean 'window'?)"),
    ("label_names=[a, a]", "label_names has duplicates"),
    ("fp8_backend=fast", "fp8_backend: invalid value 'fast'"),
    ("export_quantization_bit=5", "export_quantization_bit: invalid value 5"),
    # issue 67: accepted, then every image shrunk below one bound and enlarged past the other
    ("image_min_pixels=1000000", "image_min_pixels (1,000,000) is larger than image_max_pixels (589,824)"),
    ("video_min_pixels=70000", "video_min_pixels (70,000) is larger than video_max_pixels (65,536)"),
])
def test_bad_keys_and_values_name_the_key(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert message in str(err.value)


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("learning_rate: 1e-4 # caf\xe9".encode("latin-1"))
    with pytest.raises(ConfigError, match="latin1.yaml: not UTF-8"):
        load_config(bad)
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1, 2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="broken.yaml: invalid YAML"):
        load_config(broken)


def test_resolved_config_round_trips(tmp_path):
    cfg = load_config(None, ["lora_rank=4"])
    cfg.decide("precision", "fp32", "CPU")
    out = tmp_path / "run_config.yaml"
    save_resolved_config(cfg, out)
    written = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert written["lora_rank"] == 4 and written["decisions"]["precision"]["reason"] == "CPU"
    again = load_config(out)  # a resolved config is itself a valid config
    assert again.method.lora_rank == 4


def test_every_shipped_yaml_validates():
    shipped = sorted((REPO / "steadytune" / "recipes").glob("*.yaml")) + sorted((REPO / "examples").glob("*.yaml"))
    assert shipped, "no YAML shipped?"
    for path in shipped:
        load_config(path)


def test_yaml_boolean_words_mean_the_word(tmp_path):
    """YAML 1.1 reads `off` and `no` as false; for keys whose choices are words, the word is what was meant
    (a real bug: `guard_policy=off` on the command line was refused)."""
    cfg = load_config(None, ["guard_policy=off", "eval_strategy=no"])
    assert cfg.guard.guard_policy == "off" and cfg.train.eval_strategy == "no"
    path = tmp_path / "run.yaml"
    path.write_text("guard:\n  guard_policy: off\neval_strategy: no\n", encoding="utf-8")
    cfg = load_config(path)
    assert cfg.guard.guard_policy == "off" and cfg.train.eval_strategy == "no"
    with pytest.raises(ConfigError, match="lr_scheduler_type"):
        load_config(None, ["lr_scheduler_type=off"])


def test_do_train_follows_llamafactory():
    from steadytune.config import resolve_do_train
    cfg = load_config(None, {"dataset": "x"})
    assert resolve_do_train(cfg) and cfg.decisions["do_train"]["value"] is True
    predict = load_config(None, {"eval_dataset": "x", "do_predict": True, "predict_with_generate": True})
    assert resolve_do_train(predict) is False      # extras/nlg_eval: evaluate only
    with pytest.raises(ConfigError, match="nothing to do"):
        resolve_do_train(load_config(None, {"do_train": False}))
    with pytest.raises(ConfigError, match="do_train: true needs dataset"):
        resolve_do_train(load_config(None, {"do_train": True}))


# ---------------------------------------------------------------------------------------------------------
# Hostile YAML (issue 25, cases 4-6): one line naming the file, in bounded time and memory, never a traceback
# ---------------------------------------------------------------------------------------------------------

def billion_laughs(levels: int = 9) -> str:
    """A flow sequence whose every level repeats the one below nine times through aliases: 10 KB of YAML, 9**levels
    strings once expanded."""
    expr = "&l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"
    for level in range(1, levels + 1):
        expr = f"&l{level} [{expr}, " + ", ".join([f"*l{level - 1}"] * 8) + "]"
    return expr


@pytest.mark.timeout(20)
@pytest.mark.parametrize("template", [
    "label_names: {laughs}\n",
    "fsdp_config: {{x: {laughs}}}\n",
    "deepspeed: {laughs}\n",
    "guard:\n  grad_norm_schedule: {laughs}\n",
    "lols: {laughs}\n",
])
def test_yaml_alias_expansion_is_refused_quickly(tmp_path, template):
    path = tmp_path / "laughs.yaml"
    path.write_text(template.format(laughs=billion_laughs()), encoding="utf-8")
    start = time.monotonic()
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert time.monotonic() - start < 5
    message = str(err.value)
    assert message.startswith(f"{path}:") and "aliases" in message and "\n" not in message and len(message) < 400


@pytest.mark.timeout(20)
def test_yaml_aliases_within_bounds_still_load(tmp_path):
    path = tmp_path / "anchors.yaml"
    path.write_text("label_names: &labels [negative, positive]\nguard:\n  grad_norm_schedule: &s [1.0, 0.5]\n"
                    "fault_injection: {}\n", encoding="utf-8")
    assert load_config(path).data.label_names == ["negative", "positive"]


@pytest.mark.timeout(20)
def test_a_self_referencing_alias_is_one_line(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("label_names: &a [x, *a]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"loop.yaml: .*refers to itself"):
        load_config(path)


@pytest.mark.timeout(20)
@pytest.mark.parametrize("opening, closing", [("[", "]"), ("{a: ", "}")])
def test_deep_nesting_is_one_line_naming_the_file(tmp_path, opening, closing):
    path = tmp_path / "deep.yaml"
    path.write_text("guard: " + opening * 10_000 + "x" + closing * 10_000 + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}: nested deeper than") and "line 1" in str(err.value)


@pytest.mark.timeout(20)
def test_a_huge_config_file_is_refused_at_once(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text('default_system: "' + "x" * 10_000_000 + '"\n', encoding="utf-8")
    start = time.monotonic()
    with pytest.raises(ConfigError, match=r"huge.yaml: 10.0 MB is larger than a config file may be \(1 MiB\)"):
        load_config(path)
    assert time.monotonic() - start < 1


@pytest.mark.timeout(20)
def test_a_huge_text_value_is_refused_naming_the_key(tmp_path):
    path = tmp_path / "long.yaml"
    path.write_text('default_system: "' + "x" * 200_000 + '"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"long.yaml: default_system: 200,000 characters is longer than a value may be"):
        load_config(path)
    with pytest.raises(ConfigError, match="command line: default_system: 200,000 characters"):
        load_config(None, ["default_system=" + "y" * 200_000])


@pytest.mark.parametrize("override", ["lora_rank=" + "x" * 5000, "label_names=[" + "a, " * 3000 + "a]",
                                      "x" * 5000 + "=1", "prompt_template=" + "no placeholder " * 500])
def test_errors_show_a_cut_value(override):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert len(str(err.value)) < 500 and "..." in str(err.value)


@pytest.mark.timeout(60)
def test_the_cli_says_one_line_for_a_hostile_config(tmp_path, capsys):
    path = tmp_path / "laughs.yaml"
    path.write_text(f"label_names: {billion_laughs()}\n", encoding="utf-8")
    assert main(["train", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "Traceback" not in err


@pytest.mark.timeout(30)
@pytest.mark.parametrize("content", [f"label_names: {billion_laughs()}\n", "label_names: " + "[" * 10_000 + "]" * 10_000,
                                     "label_names: [a, b]\n" + "# padding\n" * 200_000])
def test_every_yaml_reader_is_bounded(tmp_path, content):
    """Besides the config: a run folder's run_config.yaml (report, eval's label check) and an FSDP config file."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "run_config.yaml").write_text(content, encoding="utf-8")
    start = time.monotonic()
    assert any("run_config.yaml could not be read" in note for note in load_run(run).notes)
    assert _training_label_names(run) is None
    fsdp = tmp_path / "fsdp.yaml"
    fsdp.write_text(content.replace("label_names", "fsdp_config"), encoding="utf-8")
    with pytest.raises(UserError, match=f"{fsdp}"):
        read_fsdp_keys(load_config(None, {"fsdp": "full_shard", "fsdp_config": str(fsdp)}).train)
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("text, message", [
    ("a: \x1f\n", "invalid YAML: unacceptable character"),           # PyYAML's reader, before parsing
    ("learning_rate: !!float\n", "invalid YAML: a tagged value cannot be built"),   # PyYAML: IndexError
    ("learning_rate: !!int 0x\n", "invalid YAML"),
])
def test_yaml_that_pyyaml_chokes_on_is_one_line(tmp_path, text, message):
    """Found by tests/test_fuzz_config.py."""
    path = tmp_path / "odd.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=f"{path}: {message}"):
        load_config(path)


def test_an_override_of_a_section_and_one_of_its_keys_is_one_line():
    """Found by tests/test_fuzz_config.py: `guard=x guard.window=3` was a TypeError."""
    with pytest.raises(ConfigError, match="guard.window'?: guard was given as 'x' before"):
        load_config(None, ["guard=x", "guard.window=3"])


@pytest.mark.timeout(30)
def test_deeply_nested_json_configs_are_one_line(tmp_path):
    """A DeepSpeed or FSDP JSON file nested 100,000 deep was a RecursionError from json.loads."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(UserError, match=f"deepspeed: {deep}: JSON nested too deeply"):
        read_deepspeed_file(deep)
    with pytest.raises(UserError, match=f"fsdp_config: {deep}: cannot read"):
        read_fsdp_keys(load_config(None, {"fsdp": "full_shard", "fsdp_config": str(deep)}).train)


def test_a_bad_value_given_on_the_command_line_is_named_as_the_command_lines(tmp_path):
    """`steadytune export run/ export_format=ggml` said the run's run_config.yaml held the bad value."""
    path = tmp_path / "run.yaml"
    path.write_text("model_name_or_path: some/model\nlearning_rate: 1.0e-4\n")
    with pytest.raises(ConfigError, match=r"^command line: export_format: invalid value 'ggml'"):
        load_config(path, ["export_format=ggml"])
    path.write_text("model_name_or_path: some/model\nexport_format: ggml\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: export_format: invalid value 'ggml'"):
        load_config(path, ["learning_rate=2e-4"])
