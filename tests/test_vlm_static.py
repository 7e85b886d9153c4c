"""A vision-language model's micro-batches under the speed plan (training/vision_speed.py): packed rows and their
images padded to one static shape change no loss and no gradient; the Qwen-VL tower's layout worked out with the
batch is the tower's own; Gemma 3's packed images keep their bidirectional attention; a static micro-batch reads
nothing back from the device (so a CUDA graph can record it) and replays as it ran eagerly; the plan turns it all on
where a varlen kernel runs; the micro-batches are made ahead in a thread, in order.

The rows are LLaMA-Factory's mllm_demo shape (benchmarks/vlm_speed.py's, 1 or 2 images each), prepared by the data
path `train` runs, on the tiny models of steadytune/model/tiny_vlm.py; the Qwen processors allow 16 merged tokens an
image, so that Qwen2.5-VL's windowed blocks see several windows per image."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import load_benchmark
from graph_emulation import _no_host_reads, _Recorder
from steadytune.config import load_config
from steadytune.data.multimodal.vision_layout import LAYOUT_PREFIX, VisionGeometry, vision_layout
from steadytune.data.packing import group_by_token_budget
from steadytune.data.prepare import prepare_datasets
from steadytune.hardware.attention_kernels import segment_sdpa_kernel
from steadytune.model.attention import register_varlen_attention
from steadytune.model.load import load_model_and_tokenizer, load_tokenizer
from steadytune.model.lora import attach_adapter
from steadytune.model.media_features import LAYOUT_KEYS
from steadytune.model.tiny_vlm import TINY_VLM_TEMPLATES, save_tiny_vlm
from steadytune.model.vision_attention import restore_vision_attention, use_vision_varlen, vision_tower
from steadytune.training.graphs import GraphRunner
from steadytune.training.loss import causal_lm_loss_sum, no_host_sync
from steadytune.training.vision_data import load_vision_processor, prepare_with_media, vision_collator
from steadytune.training.vision_speed import geometry_of

KINDS = ("qwen2_5_vl", "qwen3_vl", "gemma3_vl")


def masked_varlen_kernel(q, k, v, cu, max_len, scale, window=None, causal=True):
    """A varlen kernel that reads cu_seq_lens on the device (a mask from it, then SDPA), as a GPU kernel does: the
    reference kernel cuts on the host, which a recorded step may not."""
    position = torch.arange(q.shape[0], device=q.device)
    segment = torch.searchsorted(cu[1:].long().contiguous(), position, right=True)
    allowed = segment[:, None] == segment[None, :]
    if causal:
        allowed = allowed & (position[None, :] <= position[:, None])
    if window:
        allowed = allowed & (position[:, None] - position[None, :] < window)
    out = torch.nn.functional.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                                           attn_mask=allowed, scale=scale,
                                                           enable_gqa=k.shape[1] != q.shape[1])
    return out.transpose(0, 1)


class Setup:
    """A tiny `kind` folder, mllm_demo-shaped rows prepared as `train` prepares them, the model with non-zero LoRA,
    the packed ("varlen") collator, and token-budget groups of about two rows."""

    def __init__(self, kind: str, root, kernel=segment_sdpa_kernel):
        folder = save_tiny_vlm(root / "model", kind)
        if kind.startswith("qwen"):   # 16 merged tokens an image (8 x 8 patches): several windows in Qwen2.5-VL
            unit = 28 if kind == "qwen2_5_vl" else 32
            settings = json.loads((folder / "preprocessor_config.json").read_text())
            settings["max_pixels"] = settings.setdefault("size", {})["longest_edge"] = 16 * unit * unit
            (folder / "preprocessor_config.json").write_text(json.dumps(settings))
        data_dir = load_benchmark("vlm_speed").make_dataset(root / "data", rows=9, image_size=120, fixtures=False)
        self.cfg = load_config(None, {"model_name_or_path": str(folder), "dataset": "vlm_bench",
                                      "dataset_dir": str(data_dir), "template": TINY_VLM_TEMPLATES[kind],
                                      "cutoff_len": 1024, "output_dir": str(root / "out"), "lora_rank": 4})
        tokenizer = load_tokenizer(self.cfg.model)
        self.data = prepare_with_media(prepare_datasets, self.cfg, tokenizer,
                                       load_vision_processor(self.cfg, tokenizer))
        model, tokenizer = load_model_and_tokenizer(self.cfg.model, torch_dtype=torch.float32, tokenizer=tokenizer,
                                                    attn_implementation=register_varlen_attention(kernel))
        self.model = attach_adapter(model, self.cfg)
        torch.manual_seed(1)
        for name, param in self.model.named_parameters():   # non-zero B: the adapters change the output
            if "lora_B" in name:
                torch.nn.init.normal_(param, std=0.05)
        self.tokenizer = tokenizer
        self.collate = vision_collator(self.cfg, self.data, tokenizer, "varlen", self.model)
        if kind.startswith("qwen"):
            use_vision_varlen(self.model, kernel)
            self.collate = self.collate.with_layout(geometry_of(self.model))
        lengths = [len(e["input_ids"]) for e in self.data.train]
        self.groups = group_by_token_budget(lengths, list(range(len(lengths))), 2 * max(lengths))
        self.static = self.collate.with_static(self.collate.static_shape_for(self.data.train, self.groups))

    def rows(self, group):
        return [self.data.train[i] for i in group]


@pytest.fixture(scope="module", params=KINDS)
def setup(request, tmp_path_factory):
    return Setup(request.param, tmp_path_factory.mktemp(request.param))


def loss_and_grads(model, batch):
    model.zero_grad(set_to_none=True)
    loss, n = causal_lm_loss_sum(model, batch)
    loss.backward()
    return float(loss.detach()), n, {k: p.grad.clone() for k, p in model.named_parameters() if p.requires_grad}


def test_padding_to_the_static_shape_changes_no_loss_and_no_gradient(setup):
    padded_images = 0
    for group in setup.groups:
        rows = setup.rows(group)
        plain, padded = setup.collate(rows), setup.static(rows)
        assert padded["static"] is True
        # padding images (Qwen: patches, then empty sequences in cu_seqlens; Gemma 3: blank images) after the real
        padded_images += padded["pixel_values"].shape[0] - plain["pixel_values"].shape[0]
        loss, n, grads = loss_and_grads(setup.model, plain)
        padded_loss, padded_n, padded_grads = loss_and_grads(setup.model, padded)
        assert padded_n == n and padded_loss == pytest.approx(loss, rel=1e-6)
        for name, grad in grads.items():
            # fp32 sums in another order move a gradient by ~1e-6; an image that leaked into the loss moves it far more
            torch.testing.assert_close(padded_grads[name], grad, rtol=1e-4, atol=1e-5)
    assert padded_images > 0


def test_every_static_micro_batch_has_the_same_shapes(setup):
    batches = [setup.static(setup.rows(g)) for g in setup.groups]
    shapes = [{k: tuple(v.shape) if isinstance(v, torch.Tensor) else v for k, v in b.items() if k != "n_targets"}
              for b in batches]
    assert all(s == shapes[0] for s in shapes)
    assert "image_grid_thw" not in batches[0]   # a Qwen tower reads its layout instead; Gemma's has no grid


def test_the_packed_loss_is_the_models_own_forward_example_by_example(setup):
    """Each example alone through the model's own forward (with its labels) sums to the packed loss: the features
    reach their tokens, Qwen's 3-D positions restart per example, Gemma 3's images attend both ways inside."""
    from steadytune.data.multimodal.collate import MultimodalCollator
    from steadytune.data.multimodal.rope import mrope_for_config

    padded = MultimodalCollator(setup.data.media, setup.tokenizer.pad_token_id,
                                rope=mrope_for_config(setup.model.config))
    group = setup.groups[0]
    restore_vision_attention(setup.model)   # the model's own forward, as transformers runs it
    try:
        with torch.no_grad():
            own = 0.0
            for i in group:
                batch = padded([setup.data.train[i]])
                labels = batch.pop("labels")
                labels[0, 0] = -100   # a packed example's first label is ignored
                out = setup.model(**batch, labels=labels)
                own += float(out.loss) * int((labels[:, 1:] != -100).sum())
    finally:
        if "qwen" in setup.model.config.model_type:
            use_vision_varlen(setup.model, segment_sdpa_kernel)
    with torch.no_grad():
        packed = float(causal_lm_loss_sum(setup.model, setup.collate(setup.rows(group)))[0])
    assert packed == pytest.approx(own, rel=1e-5)


def test_gemma3_images_attend_both_ways_in_a_packed_row(tmp_path):
    """A causal varlen kernel alone would let an image token see only the ones before it: the loss differs."""
    from steadytune.model import media_features

    setup = Setup("gemma3_vl", tmp_path)
    batch = setup.collate(setup.rows(setup.groups[0]))
    with torch.no_grad():
        both_ways = float(causal_lm_loss_sum(setup.model, batch)[0])
        saved = media_features.packed_image_attention
        media_features.packed_image_attention = lambda text, types, config: text
        try:
            causal = float(causal_lm_loss_sum(setup.model, batch)[0])
        finally:
            media_features.packed_image_attention = saved
    assert abs(causal - both_ways) / both_ways > 5e-6   # float noise here: ~1e-7


@pytest.mark.parametrize("kind", ["qwen2_5_vl", "qwen3_vl"])
def test_the_layout_worked_out_with_the_batch_is_the_towers_own(kind, tmp_path):
    setup = Setup(kind, tmp_path)
    rows = setup.rows(setup.groups[0])
    batch = setup.collate(rows)
    tower = vision_tower(setup.model)
    grids = torch.tensor([g for r in rows for g in r["image_grid_thw"]])
    with torch.no_grad():
        own = tower(batch["pixel_values"], grids)
        given = tower(batch["pixel_values"], None, **{k[len(LAYOUT_PREFIX):]: v for k, v in batch.items()
                                                      if k.startswith(LAYOUT_PREFIX)})
    torch.testing.assert_close(given.pooler_output, own.pooler_output, rtol=0, atol=0)
    # the names the data side writes are the ones the model side reads
    layout = vision_layout(VisionGeometry(2, 14, window_size=56, position_grid=4), [[1, 4, 4]])
    assert set(layout) <= set(LAYOUT_KEYS) and {k for k in LAYOUT_KEYS if k not in layout} == set()


@pytest.mark.parametrize("kind", KINDS)
def test_a_static_micro_batch_reads_nothing_back_from_the_device(kind, tmp_path):
    """Forward (the tower, the features put in place, the language model, the loss) and backward without one read
    of a tensor's value on the host: what a CUDA graph needs to record it."""
    setup = Setup(kind, tmp_path, kernel=masked_varlen_kernel)
    batch = setup.static(setup.rows(setup.groups[0]))
    # under autocast, as on a GPU: the tower's flash-style attention then takes bf16 (fp32 would go to the
    # reference kernel, which cuts on the host)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    with torch.no_grad(), autocast:
        eager = float(causal_lm_loss_sum(setup.model, batch)[0])
    recorder = _Recorder()   # refuses the ops that wait for a value (nonzero, item, ...)
    with autocast, no_host_sync(), _no_host_reads(), recorder:
        loss, _ = causal_lm_loss_sum(setup.model, batch)
        loss.backward()
    assert recorder.ops and float(loss.detach()) == pytest.approx(eager, rel=1e-6)


def test_graphed_micro_batches_accumulate_and_update_like_eager_ones(tmp_path):
    """GraphRunner's bookkeeping over static VLM micro-batches (pixels and layout copied into its buffers each
    time), with a replay that reruns the step on those buffers (tests/test_speed.py's RerunStep)."""
    from test_speed import RerunStep, train_windows

    setup = Setup("qwen2_5_vl", tmp_path)
    batches = [setup.static(setup.rows(g)) for g in setup.groups]
    batches[0] = setup.collate(setup.rows(setup.groups[0]))   # an unpadded first one runs eagerly
    params = [p for p in setup.model.parameters() if p.requires_grad]
    start = [p.detach().clone() for p in params]

    def run(graphed: bool):
        for p, p0 in zip(params, start):
            p.data.copy_(p0)
        optimizer = torch.optim.AdamW(params, lr=1e-2)
        events = []
        runner = GraphRunner(lambda b: causal_lm_loss_sum(setup.model, b), params, torch.device("cpu"), None,
                             report=events.append, step_class=RerunStep)
        windows = [batches[i:i + 2] for i in range(0, len(batches), 2)]
        return train_windows(setup.model, runner, windows, params, optimizer, graphed), events, runner

    eager, _, _ = run(False)
    graphed, events, runner = run(True)
    assert events and events[0]["captured"] is True
    assert runner.eager_batches == 1
    assert graphed == pytest.approx(eager, rel=1e-5)


def test_the_plan_pads_and_graphs_a_vlm_where_a_varlen_kernel_runs(monkeypatch, tmp_path):
    """On a CUDA machine (its kernel checks answered here by the reference kernel): the tower's attention switched,
    its layout with the batch, static shapes possible, nothing ruling CUDA graphs out, micro-batches made ahead."""
    from steadytune.hardware.speed import plan_speed
    from steadytune.training import vision_speed
    from steadytune.training.batches import Prefetched, TrainBatches

    monkeypatch.setattr(vision_speed, "varlen_kernel_status", lambda causal=True: ("reference", "runs"))
    monkeypatch.setattr(vision_speed, "varlen_kernels", lambda: {"reference": segment_sdpa_kernel})
    setup = Setup("qwen2_5_vl", tmp_path)
    restore_vision_attention(setup.model)
    batches = TrainBatches(setup.cfg, setup.data, setup.tokenizer, packing_attention="varlen", max_tokens=400,
                           collate=vision_collator(setup.cfg, setup.data, setup.tokenizer, "varlen", setup.model))
    plan = vision_speed.plan_vision(setup.model, batches, "cuda")
    assert plan.static_ok == (True, "") and plan.graph_blockers == {}
    assert vision_tower(setup.model).config._attn_implementation == "steadytune_flash_vision"
    assert batches.collate.geometry is not None and batches.prefetch == vision_speed.PREFETCH and batches.pin
    shape = batches.static_shape_for(2)
    speed = plan_speed("cuda", "varlen", 2000, blockers=plan.graph_blockers, static_ok=plan.static_ok,
                       static_fill=shape.fill)
    assert speed.static_shapes and speed.cuda_graphs
    batches.use_static_shape(shape)
    batches.pin = False   # (no pinned memory without a GPU)
    stream = batches.stream(0, 0)
    assert isinstance(stream, Prefetched)
    made = [next(stream) for _ in range(4)]
    stream.close()
    batches.prefetch = 0
    plain = batches.stream(0, 0)
    for item in made:
        again = next(plain)
        assert item.ids == again.ids and torch.equal(item.batch["pixel_values"], again.batch["pixel_values"])
    assert any(item.batch["static"] for item in made)
    restore_vision_attention(setup.model)
    assert vision_tower(setup.model).config._attn_implementation != "steadytune_flash_vision"


def test_a_prefetching_stream_raises_its_errors_where_the_item_would_come():
    from steadytune.training.batches import Prefetched

    def source():
        yield 1
        raise ValueError("row 2: not an image")

    stream = Prefetched(source(), depth=2)
    assert next(stream) == 1
    with pytest.raises(ValueError, match="row 2"):
        next(stream)


def test_a_layout_the_tower_does_not_take_is_refused_saying_why():
    """Checked at start on one blank image: a layout short of what the tower reads (here Qwen2.5-VL's windows) is
    not used, and the start-up line says why."""
    import dataclasses

    from steadytune.training.vision_speed import layout_mismatch
    from vlm_batches import tiny

    model, _ = tiny("qwen2_5_vl")
    geometry = geometry_of(model)
    assert layout_mismatch(model, geometry) is None
    assert layout_mismatch(model, dataclasses.replace(geometry, window_size=None))
