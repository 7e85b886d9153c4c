"""fp8_base over a 4-bit base (model/fp8_4bit.py): bitsandbytes' packed weight unpacked straight into fp8 for the
forward and the input gradient. torch._scaled_mm and bitsandbytes' 4-bit layers both run on a CPU, so the unpacking
and the real kernels' arithmetic are checked here against bitsandbytes' own dequantisation."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from fp8_checks import compiled_against_eager

from steadytune.model.fp8_base import fp8_support

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None,
                       reason="bitsandbytes is not installed (pip install 'steadytune[qlora]')"),
    pytest.mark.skipif(not fp8_support(torch.device("cpu"))[0], reason="this torch has no fp8 matmul"),
]

E4M3_MAX = 448.0


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().float() - b.detach().float()).norm() / b.detach().float().norm())


def make_4bit(quant_type: str = "nf4", double: bool = True, bias: bool = True, out_features: int = 96,
              in_features: int = 256, seed: int = 0, spread: bool = False):
    """-> (bitsandbytes Linear4bit quantised on the CPU, its weight dequantised by bitsandbytes [out, in] fp32).
    spread: rows and columns of the weight orders of magnitude apart (a single scale would flush the small ones)."""
    import bitsandbytes as bnb
    from bitsandbytes.functional import dequantize_4bit

    torch.manual_seed(seed)
    linear = torch.nn.Linear(in_features, out_features, bias=bias)
    if spread:
        with torch.no_grad():
            linear.weight *= torch.logspace(-3, 0, out_features)[:, None] * torch.logspace(-1, 1, in_features)
    linear = linear.to(torch.bfloat16)
    layer = bnb.nn.Linear4bit(in_features, out_features, bias=bias, compute_dtype=torch.bfloat16,
                              compress_statistics=double, quant_type=quant_type, quant_storage=torch.uint8)
    layer.load_state_dict(linear.state_dict())
    layer = layer.to("cpu")   # .to quantises
    weight = dequantize_4bit(layer.weight.data, layer.weight.quant_state).float()
    return layer, weight


def statistics(layer) -> tuple:
    """(absmax as stored, code2, absmax2, offset, blocksize2): a 4-bit layer's statistics as block_absmax reads them."""
    state = layer.weight.quant_state
    if state.nested:
        return (state.absmax, state.state2.code.float(), state.state2.absmax.float(), state.offset.float(),
                state.state2.blocksize)
    return state.absmax, None, None, torch.zeros(()), 1


def flat_absmax(layer, transposed: bool = False) -> torch.Tensor:
    from steadytune.model.fp8_4bit import block_absmax

    rows = layer.weight.quant_state.shape[0]
    return block_absmax(*statistics(layer), rows, transposed=transposed).reshape(-1)


LAYOUTS = [pytest.param(qt, double, id=f"{qt}-{'double' if double else 'single'}")
           for qt in ("nf4", "fp4") for double in (True, False)]


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("quant_type, double", LAYOUTS)
def test_forward_and_input_gradient_follow_the_dequantised_weight(quant_type, double, bias):
    from steadytune.model.fp8_4bit import Fp8Over4bitLinear

    layer, weight = make_4bit(quant_type, double, bias)
    fp8 = Fp8Over4bitLinear(layer)
    x = torch.randn(4, 9, 256, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(4, 9, 96, dtype=torch.bfloat16)
    out = fp8(x)
    out.backward(grad)
    exact = x.detach().float() @ weight.t() + (layer.bias.float() if bias else 0)
    exact_grad = grad.float() @ weight
    assert out.shape == (4, 9, 96) and out.dtype == torch.bfloat16 and x.grad.dtype == torch.bfloat16
    assert relative(out, exact) < 0.06 and relative(x.grad, exact_grad) < 0.06
    assert layer.weight.grad is None and fp8.weight is layer.weight and fp8.bias is layer.bias
    # a wrong layout (the packed rows read in another order, or the transposed unpacking) would be far off
    flipped = x.detach().float() @ weight.flip(0).t() + (layer.bias.float() if bias else 0)
    assert relative(out, exact) < 0.1 * relative(flipped, exact)
    assert relative(x.grad, exact_grad) < 0.1 * relative(grad.float() @ weight.flip(1), exact_grad)


def test_under_autocast_it_answers_in_the_autocast_dtype_and_fp32_inputs_stay_fp32():
    """A CPU training run computes in fp32 (bitsandbytes answers in the input's dtype); autocast wins where on."""
    from steadytune.model.fp8_4bit import Fp8Over4bitLinear

    layer, weight = make_4bit()
    fp8 = Fp8Over4bitLinear(layer)
    x = torch.randn(5, 256)
    assert fp8(x).dtype == torch.float32 and relative(fp8(x), x @ weight.t() + layer.bias.float()) < 0.06
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert fp8(x).dtype == torch.bfloat16


@pytest.mark.parametrize("quant_type, double", LAYOUTS)
def test_unpacking_reproduces_bitsandbytes_within_e4m3_rounding_and_never_overflows(quant_type, double):
    """unpack_to_fp8 times its scale is bitsandbytes' dequantize_4bit, in both layouts, each value within e4m3's
    rounding (2^-4 relative; subnormals 2^-10 of the scale); the row scales are exact (a block's absmax is its
    largest value) and the column scales a bound that no column exceeds."""
    from bitsandbytes.functional import dequantize_blockwise

    from steadytune.model.fp8_4bit import Fp8Over4bitLinear, unpack_to_fp8

    layer, weight = make_4bit(quant_type, double, spread=True)
    state = layer.weight.quant_state
    absmax = flat_absmax(layer)
    stored = dequantize_blockwise(state.absmax, state.state2) + state.offset if double else state.absmax
    torch.testing.assert_close(absmax, stored.float(), rtol=1e-6, atol=0)   # block_absmax as bitsandbytes reads it
    torch.testing.assert_close(flat_absmax(layer, transposed=True),          # and in the transposed order
                               stored.float().view(96, -1).t().reshape(-1), rtol=1e-6, atol=0)
    fp8 = Fp8Over4bitLinear(layer)
    row_scale, col_scale = fp8.row_scale, fp8.col_scale
    assert row_scale.shape == (96, 1) and col_scale.shape == (256, 1)
    packed = layer.weight.data.view(96, 128)

    absmax_stored, code2, absmax2, offset, blocksize2 = statistics(layer)
    rows, cols = (unpack_to_fp8(packed, fp8.code, absmax_stored, code2, absmax2, offset, (96, 256), state.blocksize,
                                blocksize2, scale, transposed=transposed)
                  for scale, transposed in ((row_scale, False), (col_scale, True)))
    assert rows.dtype == cols.dtype == torch.float8_e4m3fn and rows.shape == (96, 256) and cols.shape == (256, 96)
    assert cols.is_contiguous()
    for back, scale, ref in ((rows.float() * row_scale, row_scale, weight),
                             (cols.float() * col_scale, col_scale, weight.t())):
        assert torch.isfinite(back).all()
        assert relative(back, ref) < 0.04
        assert torch.all((back - ref).abs() <= 2**-4 * ref.abs() + 2**-10 * scale + 1e-12)
        # per row of the layout too: the small rows (three orders of magnitude down) are not flushed to zero
        per_row = (back - ref).norm(dim=1) / ref.norm(dim=1)
        assert float(per_row.max()) < 0.06

    # no element overflows e4m3 (448): the scale times 448 covers each row's and each column's largest magnitude
    row_max, col_max = weight.abs().amax(dim=1, keepdim=True), weight.abs().amax(dim=0)[:, None]
    assert torch.all(row_scale * E4M3_MAX * (1 + 1e-6) >= row_max)
    assert torch.all(col_scale * E4M3_MAX * (1 + 1e-6) >= col_max)
    torch.testing.assert_close(row_scale * E4M3_MAX, row_max, rtol=1e-6, atol=0)   # and wastes no range on rows
    # a column's scale is its block's (64 columns): loose by at most the spread of the block, no more
    block_max = weight.abs().view(96, 256 // state.blocksize, state.blocksize).amax(dim=(0, 2))
    torch.testing.assert_close(col_scale * E4M3_MAX, block_max.repeat_interleave(state.blocksize)[:, None],
                               rtol=1e-6, atol=0)
    assert float(rows.float().abs().amax(dim=1).min()) == E4M3_MAX


def test_no_copy_of_the_weight_is_kept_only_its_scales():
    """QLoRA's memory: the packed buffer is the layer's own weight storage, the absmaxes and code tables are
    bitsandbytes' tensors, and what is new is an fp32 scale per row and per column, as fp8_copies_gib counts."""
    from steadytune.model.fp8_4bit import Fp8Over4bitLinear

    layer, _ = make_4bit("nf4", double=True)
    state = layer.weight.quant_state
    fp8 = Fp8Over4bitLinear(layer)
    assert fp8.packed.data_ptr() == layer.weight.data_ptr() and fp8.packed.dtype == torch.uint8
    assert fp8.packed.untyped_storage().data_ptr() == layer.weight.untyped_storage().data_ptr()
    assert fp8.absmax.data_ptr() == state.absmax.data_ptr()
    existing = {t.data_ptr() for t in (layer.weight, state.absmax, state.code, state.state2.code, state.state2.absmax)}
    new = {name: b for name, b in fp8.named_buffers() if b.data_ptr() not in existing}
    assert set(new) <= {"row_scale", "col_scale", "code", "code2", "absmax2", "offset"}, sorted(new)
    assert fp8.row_scale.numel() + fp8.col_scale.numel() == 96 + 256
    scales = 4 * (96 + 256)
    extra = sum(b.numel() * b.element_size() for b in new.values())
    # the scales, and at most fp32 copies of the code tables, the second absmaxes and the offset
    assert extra <= scales + 4 * (16 + 256 + state.state2.absmax.numel() + 1)
    assert extra < 0.15 * layer.weight.numel()   # the packed 4-bit weight: 12,288 bytes here
    assert list(fp8.parameters()) == list(layer.parameters())   # nothing new to train or to save
    assert fp8.state_dict().keys() == {"weight", "bias"}


def test_it_compiles_without_graph_breaks():
    """On a GPU the decoder layers are compiled: the 4-bit fp8 layer (its unpacking in the graph) must trace as one
    graph, forward and backward, and give what the eager layer gives."""
    from steadytune.model.fp8_4bit import Fp8Over4bitLinear

    layer, weight = make_4bit("nf4", double=True, out_features=48, in_features=128)
    x, ref = compiled_against_eager(Fp8Over4bitLinear(layer), 128)
    assert relative(ref, x @ weight.t() + layer.bias.float()) < 0.06   # and both are the 4-bit product



def test_compiled_it_keeps_nothing_of_the_weights_size_for_the_backward():
    """Compiled, the backward's unpacking is the same ops on the same bytes as the forward's, and the partitioner
    chooses between keeping a result and computing it again. The layer's memory is QLoRA's only if it reads the packed
    bytes again: kept unpacked codes or fp8 weights would cost a byte a weight (6.6 GiB at the 7B shape; seen on the
    H200 before unpack_to_fp8 stopped using torch.stack)."""
    from steadytune.model.fp8_4bit import Fp8Over4bitLinear

    first, _ = make_4bit("nf4", double=True, bias=False, out_features=256, in_features=128)
    second, _ = make_4bit("nf4", double=True, bias=False, out_features=128, in_features=256, seed=1)
    net = torch.nn.Sequential(Fp8Over4bitLinear(first), torch.nn.ReLU(), Fp8Over4bitLinear(second))
    held = {t.data_ptr() for t in [*net.parameters(), *net.buffers()]}
    kept = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.data_ptr() not in held:
            kept.append(t.numel() * t.element_size())
        return t

    x = torch.randn(4, 128, dtype=torch.bfloat16, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = torch.compile(net)(x)
    y.float().sum().backward()
    assert x.grad is not None and kept, "the compiled graph kept nothing at all: the hook saw no saved tensor"
    weight_bytes = 256 * 128   # one byte a weight: the unpacked codes, or an fp8 weight
    assert max(kept) < weight_bytes / 4, kept



def test_compiled_decoder_layer_keeps_no_fp8_weight_for_the_backward(tmp_path):
    """The same in a QLoRA decoder layer compiled as train compiles it (kernels.compile_layers, with and without
    recompute_pointwise): the partitioner sees the whole layer's forward and backward at once, and before the
    transposed unpacking was built in its own order it kept several projections' fp8 weights from the forward."""
    from peft import LoraConfig, get_peft_model

    from steadytune.config import load_config
    from steadytune.infer.loading import load_for_inference
    from steadytune.model.fp8_4bit import Fp8Over4bitLinear
    from steadytune.model.fp8_base import use_fp8_base
    from steadytune.model.kernels import compile_layers
    from steadytune.model.quantize import keep_training_layout
    from steadytune.model.tiny import save_tiny_model

    folder = save_tiny_model(tmp_path / "qwen2", "qwen2", hidden_size=128, intermediate_size=256,
                             num_hidden_layers=1)
    for recompute_pointwise in (False, True):
        torch._dynamo.reset()
        cfg = load_config(None, {"model_name_or_path": str(folder), "quantization_bit": 4})
        model, _, _, _ = load_for_inference(cfg, device=torch.device("cpu"), dtype=torch.bfloat16)
        keep_training_layout(model)
        model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", lora_dropout=0.0))
        model.train()
        changed, _ = use_fp8_base(model)
        assert changed == 7
        compile_layers(model, static_shapes=True, recompute_pointwise=recompute_pointwise)
        held = {t.data_ptr() for t in [*model.parameters(), *model.buffers()]}
        kept = []

        def pack(t: torch.Tensor) -> torch.Tensor:
            if t.data_ptr() not in held:
                kept.append((tuple(t.shape), t.dtype))
            return t

        ids = torch.randint(0, 100, (1, 24))
        with torch.autocast("cpu", dtype=torch.bfloat16), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        assert kept and not [k for k in kept if k[1] == torch.float8_e4m3fn], (recompute_pointwise, kept)
        # nor anything else of a weight's shape (its codes or values, either layout); 24 tokens match no width here
        weights = {s for m in model.modules() if isinstance(m, Fp8Over4bitLinear)
                   for s in ((m.out_features, m.in_features), (m.in_features, m.out_features))}
        assert not [k for k in kept if k[0] in weights], (recompute_pointwise, kept)


# --- over a peft QLoRA model ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def qlora_folder(tmp_path_factory):
    """A tiny Qwen2 64 wide (bitsandbytes' block) whose MLP is 96 wide: down_proj's 96 inputs are a multiple of 16
    but not of the block of 64, so its blocks straddle rows and that one layer cannot be unpacked by rows."""
    from steadytune.model.tiny import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("fp8_4bit") / "qwen2", "qwen2", hidden_size=64,
                           intermediate_size=96)


def load_qlora(folder):
    from peft import LoraConfig, get_peft_model

    from steadytune.config import load_config
    from steadytune.infer.loading import load_for_inference
    from steadytune.model.quantize import keep_training_layout

    cfg = load_config(None, {"model_name_or_path": str(folder), "quantization_bit": 4})
    model, _, _, _ = load_for_inference(cfg, device=torch.device("cpu"), dtype=torch.float32)
    keep_training_layout(model)   # as train does: the CPU inference repacking would change the packed layout
    model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", lora_dropout=0.0))
    model.train()
    return model


def test_qlora_bases_swap_to_fp8_and_restore_to_the_very_same_bitsandbytes_layers(qlora_folder):
    from steadytune.model.fp8_4bit import Fp8Over4bitLinear, fits_4bit_layout, is_4bit_linear
    from steadytune.model.fp8_base import (eligible_layers, fp8_copies_gib, restore_base, set_fast_accumulation,
                                           use_fp8_base)

    model = load_qlora(qlora_folder)
    lora = {name: m for name, m in model.named_modules() if hasattr(m, "lora_A") and hasattr(m, "base_layer")}
    originals = {name: m.base_layer for name, m in lora.items()}
    assert len(lora) == 14 and all(is_4bit_linear(b) for b in originals.values())
    narrow = {name for name, b in originals.items() if b.in_features % 64}
    assert narrow and all(name.endswith("down_proj") for name in narrow)   # 96 inputs: a multiple of 16, not of 64
    assert not any(fits_4bit_layout(originals[name]) for name in narrow)
    assert all(fits_4bit_layout(b) for name, b in originals.items() if name not in narrow)
    assert len(eligible_layers(model)) == 14 - len(narrow)
    copies = fp8_copies_gib(model)
    assert copies == pytest.approx(sum(4 * (b.in_features + b.out_features) for name, b in originals.items()
                                       if name not in narrow) / 2**30)

    ids = torch.randint(0, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    before = model(input_ids=ids).logits
    changed, why = use_fp8_base(model)
    assert changed == 14 - len(narrow) and "4-bit" in why and f"{changed} of them 4-bit" in why
    assert f"{len(narrow)} layers kept" in why
    for name, m in lora.items():
        if name in narrow:
            assert m.base_layer is originals[name]   # kept as bitsandbytes' layer
        else:
            assert isinstance(m.base_layer, Fp8Over4bitLinear) and m.base_layer.original is originals[name]
    assert not any("packed" in k or "row_scale" in k for k in model.state_dict())   # nothing new is saved
    assert set_fast_accumulation(model, False) == changed

    out = model(input_ids=ids).logits
    assert relative(out, before) < 0.05   # the same model, in fp8
    out.float().logsumexp(-1).sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all()
               for n, p in model.named_parameters() if "lora_B" in n)   # the adapters still train through it

    assert restore_base(model) == changed
    assert all(m.base_layer is originals[name] for name, m in lora.items())   # the identical objects
    assert not any(isinstance(m, Fp8Over4bitLinear) for m in model.modules())
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, before.detach(), rtol=0, atol=0)


def test_the_memory_policy_counts_only_the_scales_a_4bit_swap_adds(qlora_folder):
    """train's plan_fp8_base hands the checkpointing decision the growth of the model's buffers as the fp8 copies'
    GiB. Over a 4-bit base nothing is copied: that growth must be the scales fp8_copies_gib counts, not the packed
    weight (and its absmaxes and code tables) a second time."""
    from types import SimpleNamespace

    from steadytune.config import load_config
    from steadytune.model.fp8_base import fp8_copies_gib
    from steadytune.training.speed_plan import plan_fp8_base

    model = load_qlora(qlora_folder)
    cfg = load_config(None, {"model_name_or_path": str(qlora_folder), "quantization_bit": 4, "fp8_base": True})
    copies = fp8_copies_gib(model)
    added = plan_fp8_base(cfg, model, SimpleNamespace(compile=False), "fp32", None, 64, None, 0.0)
    assert cfg.decisions["fp8_base"]["value"] is True
    assert added == pytest.approx(copies, rel=1e-9), f"{added * 2**30:,.0f} bytes counted, {copies * 2**30:,.0f} added"


def test_fp8_over_a_repacked_cpu_layout_is_not_taken_for_the_plain_one():
    """bitsandbytes 0.50 repacks a 4-bit weight in place for its CPU kernel at an eval forward without grad
    (AVX512-BF16 CPUs; model/quantize.keep_training_layout). That layout is not the row-major pairs unpack_to_fp8
    reads: a layer in it must not be swapped (or must be unpacked right)."""
    from steadytune.model.fp8_4bit import Fp8Over4bitLinear, fits_4bit_layout

    layer, weight = make_4bit("nf4", double=True)
    layer.eval()
    x = torch.randn(5, 256, dtype=torch.bfloat16)
    with torch.no_grad():
        layer(x)
    if not getattr(layer.weight.quant_state, "packing_format_for_cpu", False):
        pytest.skip("bitsandbytes did not repack this layer for its CPU kernel (no AVX512-BF16 here)")
    assert not fits_4bit_layout(layer)   # kept as bitsandbytes' layer: its layout is not the one unpacked here
