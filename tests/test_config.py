"""Config: LLaMA-Factory keys load with their meaning; bad keys and values fail naming the key."""

from pathlib import Path

import pytest
import yaml
from conftest import LF_FIXTURES, needs_shared

from steadytune.config import ConfigError, load_config, save_resolved_config

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
    ("quantization_bit=4", "not supported: quantization_bit"),
    ("image_max_pixels=100", "not supported: image_max_pixels"),
    ("stage=ppo", "not supported: stage: ppo"),
    ("finetuning_type=freeze", "not supported: finetuning_type: freeze"),
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
