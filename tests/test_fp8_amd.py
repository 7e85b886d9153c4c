"""The frozen-base fp8 path on AMD (issue 64): MI300 (gfx942) multiplies e4m3fnuz, MI350 (gfx950) and RDNA4
(gfx1200/gfx1201) OCP e4m3, through the same torch._scaled_mm (hipBLASLt there). The numerics are checked on the CPU
against torch's exact float8 dtypes (the CPU's _scaled_mm takes both); the choice per arch and its printed reason with
the GPU faked (its arch and torch.version.hip are all the decision reads)."""

from __future__ import annotations

import pytest
import torch

from steadytune.model import fp8_base
from steadytune.model.fp8_matmul import FP8, FP8_FNUZ, Fp8FrozenLinear, fp8_max, quantize_rows
from steadytune.model.tiny import build_model

pytestmark = pytest.mark.skipif(not hasattr(torch, "float8_e4m3fnuz") or not hasattr(torch, "_scaled_mm"),
                                reason="this torch has no e4m3fnuz or no fp8 matmul")
FORMATS = [pytest.param(FP8, 448.0, id="ocp-e4m3fn"), pytest.param(FP8_FNUZ, 240.0, id="mi300-e4m3fnuz")]


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().float() - b.detach().float()).norm() / b.detach().float().norm())


def test_the_two_formats_are_torch_s_and_differ_where_it_matters():
    """e4m3fnuz: largest finite 240 (not 448), one zero, subnormals down to 2^-10 (not 2^-9); a value past its range
    does not saturate but becomes NaN, so a scale meant for e4m3fn's range poisons MI300's rows."""
    assert fp8_max(FP8) == 448.0 and fp8_max(FP8_FNUZ) == 240.0
    probe = torch.tensor([300.0, 260.0, 2.0**-10])
    assert torch.isnan(probe[:2].to(FP8_FNUZ).float()).all()
    assert probe[:2].to(FP8).float().tolist() == [288.0, 256.0]
    assert probe[2:].to(FP8_FNUZ).float().item() == 2.0**-10 and probe[2:].to(FP8).float().item() == 0.0
    assert torch.tensor([-0.0]).to(FP8_FNUZ).view(torch.uint8).item() == 0   # no negative zero: 0x80 is its NaN


@pytest.mark.parametrize("dtype,top", FORMATS)
def test_rows_quantise_into_each_format_s_own_range(dtype, top):
    x = torch.randn(6, 64) * torch.logspace(-3, 3, 6)[:, None]   # rows six orders of magnitude apart
    x[2] = 0
    q, scale = quantize_rows(x, dtype)
    assert q.dtype == dtype and not torch.isnan(q.float()).any()
    assert torch.allclose(q.float().abs().amax(dim=1)[[0, 1, 3, 4, 5]], torch.full((5,), top))  # each row's amax -> top
    back = q.float() * scale
    assert torch.all(back[2] == 0)
    # exactly torch's rounding of x / scale into the format, and within e4m3's 2^-4 of x in every row
    torch.testing.assert_close(q.float(), (x / scale).to(dtype).float(), rtol=0, atol=0)
    for row in (0, 1, 3, 4, 5):
        assert relative(back[row], x[row]) < 0.04
    if dtype == FP8_FNUZ:   # e4m3fn's scale (amax / 448) into e4m3fnuz: every value above 240 becomes NaN
        wrong = (x[5] / (x[5].abs().max() / 448.0)).to(FP8_FNUZ).float()
        assert torch.isnan(wrong).any()


@pytest.mark.parametrize("dtype,top", FORMATS)
def test_an_fp8_layer_follows_the_bf16_layer_in_either_format(dtype, top):
    """Forward and input gradient through torch._scaled_mm with copies in the format, against the bf16 layer: within
    e4m3's rounding; the copies, the activations and the gradients all in the same format."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48).to(torch.bfloat16).requires_grad_(False)
    fp8 = Fp8FrozenLinear(linear, dtype=dtype)
    assert fp8.w_rows.dtype == fp8.wt_rows.dtype == dtype and fp8.fp8_dtype == dtype and str(dtype) in repr(fp8)
    assert fp8.w_rows.float().abs().max() == top
    x = torch.randn(4, 9, 64, dtype=torch.bfloat16, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    grad = torch.randn(4, 9, 48, dtype=torch.bfloat16)
    out, ref = fp8(x), linear(x_ref)
    (out.float() * grad).sum().backward()
    (ref.float() * grad).sum().backward()
    assert out.dtype == torch.bfloat16 and relative(out, ref) < 0.06 and relative(x.grad, x_ref.grad) < 0.06
    # the product is the exact one of the quantised operands: dequantise and multiply in fp32
    xq, xs = quantize_rows(x.detach().reshape(-1, 64), dtype)
    exact = (xq.float() * xs) @ (fp8.w_rows.float() * fp8.w_rows_scale).t() + linear.bias.float()
    torch.testing.assert_close(out.detach().reshape(-1, 48).float(), exact, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("arch,ok,says", [
    ("gfx942", True, "e4m3fnuz"), ("gfx950", True, "OCP e4m3"), ("gfx1201", True, "OCP e4m3"),
    ("gfx1200", True, "OCP e4m3"), ("gfx90a", False, "no fp8 matrix cores"), ("gfx1100", False, "no fp8 matrix cores"),
    ("gfx1151", False, "no fp8 matrix cores"), ("gfx1030", False, "no fp8 matrix cores")])
def test_each_amd_arch_gets_its_format_or_the_reason_it_has_none(arch, ok, says):
    supported, why = fp8_base.fp8_arch_support("rocm", arch)
    assert supported is ok and says in why and arch in why
    if arch == "gfx942":
        assert "240" in why


def test_the_rocm_and_torch_floors_of_the_scaled_matmul():
    assert "ROCm 6.3" in fp8_base.fp8_arch_support("rocm", "gfx1201", rocm=(6, 2))[1]
    assert not fp8_base.fp8_arch_support("rocm", "gfx950", rocm=(6, 4))[0]
    assert fp8_base.fp8_arch_support("rocm", "gfx950", rocm=(7, 2), torch_version=(2, 11))[0]
    assert "torch 2.7" in fp8_base.fp8_arch_support("rocm", "gfx942", rocm=(6, 2), torch_version=(2, 6))[1]
    assert "architecture unknown" in fp8_base.fp8_arch_support("rocm", None)[1]


@pytest.fixture
def rocm_gpu(monkeypatch):
    """A ROCm GPU as fp8_base sees it: torch.version.hip set, the device's arch; the model stays on the CPU (the CPU's
    _scaled_mm computes the same products)."""
    monkeypatch.setattr(torch.version, "hip", "7.2.53211", raising=False)

    def on(arch: str) -> torch.device:
        monkeypatch.setattr(fp8_base, "device_arch", lambda device: arch)
        return torch.device("cuda", 0)
    return on


def _decide(model, asked, device, precision="bf16"):
    return fp8_base.decide_fp8_base(model, asked, device, precision, True, 256, None, 0.0)


@pytest.mark.parametrize("arch,dtype", [("gfx942", FP8_FNUZ), ("gfx950", FP8), ("gfx1201", FP8)])
def test_fp8_base_true_on_an_amd_gpu_multiplies_in_its_format_and_says_why(rocm_gpu, arch, dtype):
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(0)
    model = get_peft_model(build_model("qwen2", seed=0), LoraConfig(r=4, target_modules=["q_proj", "gate_proj"]))
    x = torch.randint(0, 100, (2, 12))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        before = model(x).logits.float()
    on, why = _decide(model, True, rocm_gpu(arch))
    assert on and arch in why and fp8_base.describe_format(dtype).split(" (")[0] in why and "hipBLASLt" in why
    layers = [m for m in model.modules() if isinstance(m, Fp8FrozenLinear)]
    assert layers and all(layer.fp8_dtype == dtype for layer in layers)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        after = model(x).logits.float()
    assert relative(after, before) < 0.1


def test_fp8_base_stays_off_where_the_amd_gpu_cannot_run_it(rocm_gpu):
    from peft import LoraConfig, get_peft_model
    model = get_peft_model(build_model("qwen2", seed=0), LoraConfig(r=4, target_modules=["q_proj"]))
    on, why = _decide(model, True, rocm_gpu("gfx90a"))
    assert not on and "gfx90a: no fp8 matrix cores" in why
    on, why = _decide(model, True, rocm_gpu("gfx942"), precision="fp16")
    assert not on and "bf16 only" in why and "precision fp16" in why
    on, why = _decide(model, None, rocm_gpu("gfx942"))    # the default: untimed on ROCm, so off, with the reason
    assert not on and why.startswith("off:")
    assert not any(isinstance(m, Fp8FrozenLinear) for m in model.modules())
