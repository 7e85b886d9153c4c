"""doctor, round 6 (issue 63): readings of what users say in words (rules/prose.py), tried over pastes written here
(other tools, cards and wordings than the mined cases, English and Chinese), each with a negative that keeps the
reading out of a paste it does not fit."""

from __future__ import annotations

from steadytune.doctor.diagnose import diagnose_text
from steadytune.doctor.error_lines import find_errors


def _top(text: str):
    top = diagnose_text(text).top
    assert top is not None, f"no diagnosis for:\n{text}"
    return top


# --- black pictures only past some size: the attention kernel --------------------------------------------------

def test_black_pictures_only_at_large_sizes_are_the_attention_kernel():
    for paste in (
        "SDXL at 1024x1024 works, but 2048x2048 gives a black image every time. RTX 3090, plenty of VRAM left.",
        "Hires fix turns the picture all black\nA1111 1.9, RTX 4080. Without hires the image is fine.",
        "高分辨率出图全黑，低分辨率正常\n显卡 RTX 4070",
    ):
        top = _top(paste)
        assert top.family == "attention", (paste, top.family, top.fix)
        assert "xformers" in top.fix and "pytorch-cross-attention" in top.fix, top.fix


def test_black_pictures_on_an_amd_card_get_its_own_attention_switches():
    top = _top("Upscaling to 1536x1536 gives black images, 768x768 is fine. Radeon RX 7900 XTX, ROCm 6.2")
    assert top.family == "attention", (top.family, top.fix)
    assert "--use-split-cross-attention" in top.fix, top.fix


def test_black_pictures_at_every_size_or_with_the_vae_named_are_not_the_attention_reading():
    for paste in (
        "Every image is black. RTX 3060, ComfyUI",                                   # no size said
        "1024x1024 and 2048x2048 both come out as black images; the VAE runs in fp16",  # the format named
        "NansException: A tensor with all NaNs was produced in VAE.\nhires fix gives a black image",
    ):
        top = diagnose_text(paste).top
        assert top is None or top.family != "attention", (paste, top.family, top.fix)


# --- a line that says memory is NOT running out is no out-of-memory line ----------------------------------------

def _error_families(text: str) -> list:
    return [e.family for e in find_errors(text.splitlines())]


def test_saying_memory_is_not_running_out_is_not_an_out_of_memory_line():
    assert "out-of-memory" not in _error_families("I'm not running out of vram or ram either.")
    assert "out-of-memory" not in _error_families("we are not going out of GPU memory, nvidia-smi shows 10 GB free")
    assert _error_families("training on the 4090 runs out of memory at step 3") == ["out-of-memory"]
    assert _error_families("the RTX 3060 ran out of VRAM after two images") == ["out-of-memory"]


# --- the complaint said in Chinese ------------------------------------------------------------------------------

def test_a_chinese_complaint_beside_a_card_gets_the_cards_reading():
    for paste, wanted in (
        ("6600XT 用 ollama 只用CPU，不用显卡", "HSA_OVERRIDE_GFX_VERSION=10.3.0"),
        ("koboldcpp 识别不到我的 RX 6700 XT，一直跑在CPU上", "HSA_OVERRIDE_GFX_VERSION=10.3.0"),
        ("PyTorch 在 RX 6750 XT 上跑不起来", "HSA_OVERRIDE_GFX_VERSION=10.3.0"),
        ("ComfyUI 在 Radeon 780M 上无法使用 GPU", "HSA_OVERRIDE_GFX_VERSION=11.0.0"),
    ):
        top = _top(paste)
        assert top.family == "arch-missing", (paste, top.family, top.fix)
        assert wanted in top.fix, (paste, top.fix)


def test_a_chinese_sentence_without_a_complaint_is_no_complaint():
    from steadytune.doctor.facts import extract_facts
    sheet = extract_facts("我的显卡是 RX 6600，训练 Qwen 的 LoRA 很顺利")
    assert not sheet.has("complaint", "yes")
    assert extract_facts("我的显卡是 RX 6600，一直走 CPU").has("complaint", "yes")


def test_is_available_returning_false_said_in_chinese_is_a_visibility_line():
    assert "visibility" in _error_families("torch.cuda.is_available() 返回 False")
    assert "visibility" in _error_families("torch.cuda.is_available()输出为False")
    assert "visibility" not in _error_families("torch.cuda.is_available() 返回 True")


def test_a_real_out_of_memory_beside_black_pictures_is_not_the_attention_reading():
    top = _top("2048x2048 gives a black image, 1024x1024 is fine\ntorch.cuda.OutOfMemoryError: CUDA out of memory. "
               "Tried to allocate 4.00 GiB")
    assert top.family == "out-of-memory", (top.family, top.fix)


def test_black_pictures_at_an_ordinary_size_or_on_a_small_gpu_are_not_the_attention_reading():
    for paste in (
        "Black images above 512x512, 256x256 is fine. GTX 1650",              # black at an ordinary size
        "Hires fix gives black images. 4GB VRAM laptop, ComfyUI",              # a small GPU
        "高分辨率出图全黑，显存 2G",
    ):
        top = diagnose_text(paste).top
        assert top is None or top.family != "attention", (paste, top.family, top.fix)
