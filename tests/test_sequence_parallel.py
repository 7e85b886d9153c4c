"""Sequence parallelism (cp_size, distributed/sequence_parallel.py): a row split over two processes (gloo, on the CPU)
gives one process's attention, losses and adapter, with Ulysses (all-to-all over heads) and with the all-gather form
of ring attention, composed with DDP's LoRA all-reduce, FSDP2 and ZeRO-3; the slices carry the whole row's positions and
targets; the modes are chosen and refused with the reasons."""

from __future__ import annotations

import importlib.util
import json
import os
import socket

import pytest
import torch
import torch.multiprocessing as mp
from conftest import two_processes
from test_distributed import losses, one_process, overrides, run_cli

from steadytune.config import load_config
from steadytune.data.encode import IGNORE_INDEX
from steadytune.distributed import sequence_parallel as cp
from steadytune.errors import UserError
from steadytune.hardware.attention_kernels import tile_attention_reference


@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory):
    from steadytune.model.tiny import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("cp_model") / "qwen2", "qwen2")


def test_a_slice_keeps_the_rows_positions_and_targets():
    sp = cp.SequenceParallel(size=2, rank=1, group=None, mode="ulysses", dp_size=1, dp_rank=0)
    ids = torch.arange(100, 109)[None]                   # 9 tokens: padded to 10, slices of 5
    labels = ids.clone()
    labels[0, :3] = IGNORE_INDEX
    positions = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3, 4]])   # two examples: 0..3 and 4..8
    local, docs, length = cp.shard_batch({"input_ids": ids, "labels": labels, "position_ids": positions}, sp, 0)
    assert length == 10 and docs == [(0, 4), (4, 9), (9, 10)]
    assert local["input_ids"].tolist() == [[105, 106, 107, 108, 0]]
    assert local["position_ids"].tolist() == [[1, 2, 3, 4, 0]]
    # position 4 (the slice's first) predicts token 5; the row's last real token and the padding predict nothing
    assert local["target_index"].tolist() == [0, 1, 2] and local["target_ids"].tolist() == [106, 107, 108]
    first, _, _ = cp.shard_batch({"input_ids": ids, "labels": labels, "position_ids": positions},
                                 cp.SequenceParallel(2, 0, None, "ulysses", 1, 0), 0)
    # the first slice's last token predicts the second slice's first (shifted over the whole row, then sliced)
    assert first["target_ids"].tolist() == [103, 104, 105] and first["n_targets"] == 3


def test_the_mode_follows_the_heads_and_a_refused_ulysses_names_the_key():
    assert cp.choose_mode("ulysses", False, 28, 4, 4)[0] == "ulysses"
    assert "repeated x2" in cp.choose_mode("ulysses", False, 28, 2, 4)[1]
    mode, why = cp.choose_mode("ulysses", False, 14, 2, 4)   # 14 query heads do not split over 4 processes
    assert mode == "allgather" and "LLaMA-Factory" in why
    with pytest.raises(UserError, match="cp_mode: ulysses, but 14 query heads"):
        cp.choose_mode("ulysses", True, 14, 2, 4)
    assert cp.choose_mode("allgather", True, 28, 4, 4)[0] == "allgather"


def test_cp_size_must_divide_the_processes_and_the_stage_must_be_sft_or_pt():
    config = type("C", (), {"num_attention_heads": 4, "num_key_value_heads": 2})
    with pytest.raises(UserError, match="cp_size: 2 does not divide the 3 processes"):
        cp.plan_sequence_parallel(load_config(None, ["cp_size=2"]), 3, 0, config)
    with pytest.raises(UserError, match="stage dpo"):
        cp.plan_sequence_parallel(load_config(None, ["cp_size=2", "stage=dpo"]), 2, 0, config)
    assert cp.plan_sequence_parallel(load_config(None, []), 1, 0, config) is None


CASES = [("ulysses", 2), ("ulysses", 1), ("allgather", 2)]   # (mode, key/value heads), 4 query heads


def _inputs(kv_heads: int):
    torch.manual_seed(0)
    q = torch.randn(12, 4, 8, dtype=torch.float64)
    k, v = torch.randn(2, 12, kv_heads, 8, dtype=torch.float64)
    return q, k, v


def _attention_worker(rank: int, port: int, results):
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    group = dist.new_group([0, 1])
    for mode, kv_heads in CASES:
        sp = cp.SequenceParallel(2, rank, group, mode, 1, 0, kernel=tile_attention_reference)
        leaves = [t[rank * 6:rank * 6 + 6].clone().requires_grad_(True) for t in _inputs(kv_heads)]
        with cp.split_row(sp, [(0, 5), (5, 12)], 12):
            out, _ = cp.cp_attention_forward(None, *(t.transpose(0, 1)[None] for t in leaves), None, scaling=0.3)
        (out[0] * _weights()[rank * 6:rank * 6 + 6]).sum().backward()
        results[(rank, mode, kv_heads)] = (out[0].detach(), *(t.grad for t in leaves))
    dist.destroy_process_group()


def _weights():
    return torch.linspace(-1, 1, 12 * 4 * 8, dtype=torch.float64).reshape(12, 4, 8)


@two_processes
def test_split_attention_equals_the_whole_rows_in_value_and_gradient():
    """Ulysses (with 2 key/value heads, and with 1 repeated over the 2 processes) and the all-gather mode: each
    process's slice of the output and of the gradients of q, k and v equals the whole row's."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = mp.Manager().dict()
    mp.spawn(_attention_worker, args=(port, results), nprocs=2)
    for mode, kv_heads in CASES:
        q, k, v = (t.requires_grad_(True) for t in _inputs(kv_heads))
        want = tile_attention_reference(q, k, v, [0, 5, 12], [0, 5, 12], 0.3)
        (want * _weights()).sum().backward()
        got = [torch.cat([results[(0, mode, kv_heads)][i], results[(1, mode, kv_heads)][i]]) for i in range(4)]
        for name, a, b in zip(("output", "dq", "dk", "dv"), got, (want, q.grad, k.grad, v.grad)):
            assert torch.allclose(a, b, atol=1e-10), (mode, kv_heads, name)


@two_processes
def test_two_processes_splitting_each_row_train_as_one_process_does(tiny_qwen, sample_data_dir, tmp_path):
    """cp_size 2 on two processes: one data-parallel group, so the same micro-batches as one process; Ulysses with
    DDP's LoRA all-reduce, then the all-gather mode under FSDP2."""
    single = one_process(tiny_qwen, sample_data_dir, tmp_path / "one", max_steps=3)
    done = run_cli(overrides(tiny_qwen, sample_data_dir, tmp_path / "ulysses", max_steps=3, cp_size=2)
                   + ["--nproc", "2"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cp_mode      ulysses" in done.stdout and "x 1 group of 2 ranks = 8 examples" in done.stdout
    assert losses(tmp_path / "ulysses") == pytest.approx(single.losses, rel=1e-5)
    done = run_cli(overrides(tiny_qwen, sample_data_dir, tmp_path / "ring", max_steps=3, cp_size=2,
                             cp_mode="allgather", fsdp="full_shard auto_wrap", fsdp_config="{fsdp_version: 2}")
                   + ["--nproc", "2"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cp_mode      allgather" in done.stdout and "FSDP2" in done.stdout
    assert losses(tmp_path / "ring") == pytest.approx(single.losses, rel=1e-5)
    from safetensors.torch import load_file
    ours, reference = (load_file(tmp_path / name / "adapter_model.safetensors") for name in ("ring", "one"))
    assert sorted(ours) == sorted(reference)
    assert all(torch.allclose(ours[k], reference[k], atol=1e-5) for k in ours)


@two_processes
@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed (pip install "
                    "'steadytune[deepspeed]'; DS_BUILD_OPS=0 builds it without a GPU)")
def test_split_rows_under_zero3_train_as_one_process_does(tiny_qwen, sample_data_dir, tmp_path):
    config = tmp_path / "ds_z3.json"
    config.write_text(json.dumps({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                                  "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
                                  "zero_allow_untested_optimizer": True,
                                  "zero_optimization": {"stage": 3, "contiguous_gradients": True,
                                                        "stage3_gather_16bit_weights_on_model_save": True}}))
    single = one_process(tiny_qwen, sample_data_dir, tmp_path / "one", max_steps=3)
    done = run_cli(overrides(tiny_qwen, sample_data_dir, tmp_path / "z3", max_steps=3, cp_size=2, deepspeed=config)
                   + ["--nproc", "2"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "DeepSpeed ZeRO-3" in done.stdout and "cp_mode      ulysses" in done.stdout
    assert losses(tmp_path / "z3") == pytest.approx(single.losses, rel=1e-5)


# --- hostile round 5 (issue 67): models whose layers a split row would compute wrongly ------------------------------

def _text_config(model_type: str, **keys):
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, **keys)


def test_a_model_whose_layers_cannot_run_on_a_slice_is_named():
    """Only attention meets across the slices: a recurrent state, a window shorter than the examples, attention sinks
    or soft-capped scores would be computed wrongly without a word (two processes trained a Qwen3.5 so)."""
    from steadytune.model.tiny import TINY_CONFIGS

    def spec(kind):
        keys = dict(TINY_CONFIGS[kind])
        return keys.pop("model_type"), keys

    model_type, keys = spec("qwen3_5")
    assert "2 gated DeltaNet" in cp.unsplittable(_text_config(model_type, **{**keys, "layer_types": [
        "linear_attention"] * 2}), 64)
    for kind in ("qwen3_5", "qwen3_5_moe", "qwen3_next"):
        assert "gated DeltaNet" in cp.unsplittable(_text_config(spec(kind)[0], **spec(kind)[1]), 64)
    gemma4 = _text_config(spec("gemma4")[0], **{**spec("gemma4")[1], "vocab_size_per_layer_input": 512})
    assert "sliding_attention layers attend within a window of 16 tokens" in cp.unsplittable(gemma4, 64)
    assert cp.unsplittable(gemma4, 16) is None   # no example longer than the window: it changes nothing
    assert "sliding-window layers" in cp.unsplittable(_text_config("mistral", sliding_window=32), 64)
    assert "chunked_attention" in cp.unsplittable(_text_config("llama4_text", attention_chunk_size=32), 64)
    assert "sinks" in cp.unsplittable(_text_config(spec("gpt_oss")[0], **spec("gpt_oss")[1]), 8)
    assert "attn_logit_softcapping" in cp.unsplittable(_text_config("gemma2", sliding_window=4096), 64)
    for kind in ("qwen2", "llama", "qwen3", "qwen3_moe"):
        assert cp.unsplittable(_text_config(spec(kind)[0], **spec(kind)[1]), 4096) is None, kind


def _damaged(folder):
    """The model folder with its weight file cut short: a check that comes after the weights load never speaks."""
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    return folder


@pytest.mark.parametrize("kind, keys, said", [
    ("qwen3_5", ["cp_size=2"], "cp_size: 2 splits each row over processes, but its 1 gated DeltaNet"),
    ("gemma4", ["cp_size=2", "--nproc=2"], "its sliding_attention layers attend within a window of 16 tokens"),
    ("qwen2", ["cp_size=2"], "cp_size: 2 does not divide the 1 processes"),
    ("qwen2", ["ep_size=2"], "ep_size: 2 splits a mixture of experts' routed experts, and this model has none"),
    ("qwen3_moe", ["ep_size=2"], "ep_size: 2 does not divide the 1 processes"),
    ("qwen3_moe", ["ep_size=2", "finetuning_type=full"], "ep_size: 2 does not divide the 1 processes"),
    ("qwen3_5", ["sequence_tiling=true"], "sequence_tiling: true, but model type qwen3_5_text: tiled layers exist"),
    ("qwen3_moe", ["sequence_tiling=true"], "sequence_tiling: true, but a mixture of experts' layers are not tiled"),
    ("qwen2", ["sequence_tiling=true", "lora_dropout=0.1"], "sequence_tiling: true, but lora_dropout would need"),
    ("qwen3_5", ["activation_offloading=true"], "activation_offloading: true, but the model is on the CPU"),
])
def test_layout_keys_are_refused_before_any_weights_load(kind, keys, said, sample_data_dir, tmp_path, capsys):
    from steadytune.cli import main
    from steadytune.model.tiny import save_tiny_model

    base = _damaged(save_tiny_model(tmp_path / kind, kind))
    run = tmp_path / "run.yaml"
    run.write_text(f"model_name_or_path: {base}\ndataset: alpaca_sample\ndataset_dir: {sample_data_dir}\n"
                   f"template: qwen\noutput_dir: {tmp_path / 'out'}\n", encoding="utf-8")
    if "--nproc=2" in keys:   # the check itself, as each of two processes makes it
        from steadytune.train import check_layout_before_loading
        with pytest.raises(UserError, match=said):
            check_layout_before_loading(load_config(str(run), [k for k in keys if "=" in k and "--" not in k]), 2)
        return
    assert main(["train", str(run), *keys]) == 1
    err = capsys.readouterr().err
    assert said in err and "damaged" not in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
