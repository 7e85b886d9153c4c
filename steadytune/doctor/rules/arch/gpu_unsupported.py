"""A GPU outside every build: an Intel GPU expected to run CUDA or ROCm, an old GCN card under a current ROCm, a GPU
the inference apps or the kernel's KFD no longer list, ZLUDA on a pre-RDNA card."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine, family
from steadytune.doctor.fixes import INFERENCE_TOOLS
from steadytune.hardware.gpu_facts import arch_info, lookup_product
from steadytune.doctor.rules.base import (
    Context,
    NOT_DETECTED,
    Diagnosis,
    _first,
    _lines_matching,
    _make,
    rule,
    _symptom_lines,
    _text,
)
from steadytune.doctor.rules.arch.old_gcn import _gcn_generation, _is_old_gfx, _rocm_of_its_era


def _dropped_for_inference(ctx: Context, arch: Optional[str], where) -> Optional[Diagnosis]:
    """An inference app (LM Studio, Ollama, koboldcpp...) that does not see a GPU the current ROCm releases dropped
    (gfx906 after ROCm 6.3): its bundled ROCm runtime has no code for it, and its Vulkan backend still runs."""
    row = arch_info(arch) if arch else None
    tool = ctx.tool()
    complaint = [f for f in ctx.sheet.of("complaint") if f.value == "yes"][:1]
    if row is None or row.max_rocm is None or tool not in INFERENCE_TOOLS or ctx.of("arch-missing") or not complaint:
        return None
    last = f"{row.max_rocm[0]}.{row.max_rocm[1]}"
    return _make("gpu-unsupported", f"{arch} is outside the ROCm that {tool} ships",
                 f"ROCm releases after {last} dropped {arch}; {tool}'s bundled ROCm runtime is newer, so it does not "
                 "list the GPU", f"use {tool}'s Vulkan backend (llama.cpp's Vulkan build, LM Studio's Vulkan runtime, "
                 f"Ollama's Vulkan runner), or a build made against ROCm {last} or older with {arch} in its targets",
                 [where] + complaint, _symptom_lines(ctx, complaint), confirmed=False)


_HIP_NO_DEVICE = r"hipErrorInvalidDevice|hipErrorNoDevice|no ROCm-capable device|No HIP GPUs are available"


def _old_card_in_its_era(ctx: Context, arch: str, where, era: str) -> Optional[Diagnosis]:
    """A GCN 4 card (gfx803) under a ROCm that still built it: not a card outside ROCm. HIP refusing the device with
    no index in play is the device files (that era gave /dev/kfd to the video group); the GPU not detected at all is
    the PCIe atomics gfx8 needs (machine/platform.py's reading); a missing-code message is arch-missing's to read."""
    if ctx.of("arch-missing"):
        return None
    refused = [e for e in ctx.errors if re.search(_HIP_NO_DEVICE, e.line)]
    indexed = re.search(r"(?i)cuda:\d|device_?(?:id|index|ordinal)\s*[=:]\s*\d", _text(ctx)) or any(
        re.match(r"(?:HIP|ROCR|CUDA)_VISIBLE_DEVICES=", f.value) for f in ctx.sheet.of("env"))
    if refused and not indexed:
        return _first(_make(
            "device-access", f"{arch} under {era}: HIP cannot open the GPU",
            f"{era} still carried {arch} code, and no device index or visibility variable is in play, so HIP refusing "
            "the device is the device files: the user cannot open /dev/kfd and /dev/dri (releases of that era gave "
            "them to the video group)",
            "sudo usermod -a -G video $LOGNAME (and render too where the group exists: -G render,video), then log out "
            "and back in; a sample that works under sudo confirms it; if it still fails as root, look for 'PCI rejects "
            f"atomics' in dmesg ({arch} needs PCIe atomics)", [where, ctx.line_fact(refused[0])], refused))
    # not detected at all: the PCIe atomics gfx8 needs, the platform family's reading (machine/platform), not this one's
    return None


def _kfd_unlisted(ctx: Context, errors: list[ErrorLine], arch: Optional[str], where) -> Optional[Diagnosis]:
    """The kernel's KFD saying the PCI device id "is missing in supported_devices": that kernel driver creates no
    compute device for the card, so every ROCm tool above it fails (/dev/kfd unusable, out of resources). That is
    the root: the groups and the user-space ROCm cannot change it."""
    said = [e for e in errors if re.search(r"(?i)is missing in supported_devices", e.line)]
    if not said:
        return None
    did = re.search(r"(?i)DID ([0-9a-f]{4})", said[0].line)
    card = f"{arch} (device id {did.group(1)})" if arch and did else arch or (f"device id {did.group(1)}" if did else
                                                                              "this GPU")
    row = arch_info(arch) if arch else None
    note = f" ({row.note})" if row and row.note else ""
    return _first(_make("gpu-unsupported", f"the kernel driver does not support {card}",
                        f"the amdgpu kernel driver's compute part (KFD) has no entry for {card}, so it creates no compute "
                        "device; the /dev/kfd and resource errors above follow from that",
                        f"{card} is not supported by this kernel driver: use a kernel driver whose KFD lists it (the "
                        "amdgpu-dkms of a ROCm release that supports the card, or a newer Linux kernel), and a ROCm "
                        f"release that supports it in user space{note}; the group membership is not the cause",
                        [where, ctx.line_fact(said[0])], errors + ctx.of("device-access")))


def _zluda_pre_rdna(ctx: Context, arch: Optional[str], where) -> Optional[Diagnosis]:
    """ZLUDA on a GCN 1-4 card (gfx6-gfx8: Polaris, Fiji and older): ZLUDA's README lists Radeon RX 5000 (RDNA 1) and
    newer, so the card never shows up as a CUDA device, whatever else the paste says. (Vega, gfx9, is left out: SD.Next
    users run it there with patched ROCm libraries.)"""
    if ctx.tool() != "zluda" or not _is_old_gfx(arch):   # Vega (gfx9) runs it with patched ROCm libraries
        return None
    if _lines_matching(ctx, r"(?i)\bDevice:\s*cuda:\d+\b.{0,80}\[ZLUDA\]"):
        return None   # the program printed a ZLUDA CUDA device: some card runs, the question is which one it picks
    said = [f for f in ctx.sheet.of("gpu") if f.detail == arch][:1]
    name = said[0].value if said else arch
    diagnosis = _make("gpu-unsupported", f"ZLUDA does not run on the {name}",
                 f"ZLUDA supports AMD Radeon RX 5000 series (RDNA 1) and newer GPUs only; the {name} ({arch}) is an "
                 "older GCN chip, so ZLUDA offers no CUDA device on it",
                 f"the {name} is not supported by ZLUDA (it needs an RDNA GPU, Radeon RX 5000 or newer): on Windows use "
                 "DirectML (torch-directml) or the program's Vulkan / OpenCL backend; on Linux ROCm itself where a "
                 "release still lists the card", [f for f in (where,) if f], ctx.errors)
    # nothing else can work on it: the DLLs or libraries ZLUDA misses beside it would not bring the card in
    diagnosis.rank = min(family(n).rank for n in ("device-access", "driver", "wsl", "rocm-libs-missing")) - 1
    return diagnosis


# Intel GPUs by name (Arc, Iris Xe, Data Center GPU Max / Flex): torch runs them through its XPU build, never CUDA or ROCm
_INTEL_GPU = re.compile(r"(?i)\bIntel(?:\(R\)|®)?\s+(?:Arc|Iris|Data Center GPU|UHD|Xe)\b|\bArc(?:\(TM\))?\s+[AB]\d{3}\b|"
                        r"\bIris Xe\b|\bGPU Max \d{4}\b")
# a torch XPU build in use ("2.10.0+xpu", torch.xpu answering): the Intel GPU is reached, whatever fails next
_INTEL_TORCH = re.compile(r"(?i)\+xpu\b|torch\.xpu\.(?:is_available|device_count)\(\)\W{0,6}(?:True|[1-9])")
# a tool with its own route to Intel GPUs, said first in the fix (the tool that was asked about)
_INTEL_ROUTES = (
    # docker's GPU request goes to the NVIDIA Container Toolkit: on a machine without an NVIDIA GPU there is nothing to
    # hand over, and installing the toolkit cannot change that
    (r"(?i)--gpus\b|could not select device driver", "docker run --gpus hands NVIDIA GPUs to a container (through the "
                                                      "NVIDIA Container Toolkit) and this machine has no NVIDIA GPU: "
                                                      "run the image on the CPU (drop --gpus; the tool's CPU option, "
                                                      "e.g. --device cpu), or run it on a machine with an NVIDIA GPU; "),
    (r"(?i)\bdeepspeed\b", "DeepSpeed itself runs only CUDA/ROCm accelerators; for Intel GPUs install Intel's port, "
                            "pip install intel-extension-for-deepspeed (DeepSpeed's XPU accelerator, with torch's XPU "
                            "build and intel-extension-for-pytorch); "),
    (r"(?i)\bollama\b", "Ollama's released CUDA/ROCm runners do not drive Intel GPUs: use its Vulkan backend (a release "
                         "that ships it, or a source build with Vulkan) or ipex-llm's Ollama build; "),
    (r"(?i)\bllama\.?cpp\b", "build llama.cpp with its SYCL (-DGGML_SYCL=ON, oneAPI) or Vulkan (-DGGML_VULKAN=ON) "
                              "backend; "),
)
_CUDA_OR_ROCM = re.compile(r"(?i)\bcuda\b|\brocm\b|\bhip\b|is_available|No CUDA GPUs|torch\.cuda|--gpus|nvidia")


@rule("gpu-unsupported")
def intel_gpu_under_cuda(ctx: Context) -> Optional[Diagnosis]:
    """An Intel GPU (Arc, Iris Xe, Data Center Max) expected to run CUDA or ROCm code: neither stack runs on it; torch
    reaches it through its XPU build (device "xpu"), llama.cpp and Ollama through SYCL or Vulkan. Only where the paste
    names no NVIDIA or AMD GPU (a laptop's Intel iGPU beside an RTX card is not the GPU in question)."""
    said = _lines_matching(ctx, _INTEL_GPU.pattern)
    text = _text(ctx)
    route = next((fix for tool, fix in _INTEL_ROUTES if re.search(tool, text)), "")
    if not said or ctx.sheet.of("gpu") or not (_CUDA_OR_ROCM.search(text) or route) or _INTEL_TORCH.search(text):
        return None   # a torch XPU build already in use is past this reading (its driver's, access/driver_mismatches)
    if re.search(r"(?i)\bonnxruntime\b|CUDAExecutionProvider", text):
        return None   # onnxruntime has builds for Intel GPUs (OpenVINO, DirectML): install/onnxruntime_cuda.py says which
    trouble = ctx.errors or ctx.no_gpu() or ctx.sheet.has("complaint", "yes") or \
        re.search(r"(?i)\?|\bFalse\b|not (?:yet )?(?:detected|found|used|work|supported|implemented)|doesn't|does not|"
                  r"don't|can't|cannot|\bstop(?:s|ped|ping)?\b|不支持|用不了|找不到", text)
    if not trouble:
        return None
    name = re.sub(r"\s+", " ", _INTEL_GPU.search(said[0].line).group(0))
    diagnosis = _make("gpu-unsupported", f"{name} runs neither CUDA nor ROCm",
                 f"the {name} is an Intel GPU: CUDA builds need an NVIDIA GPU and ROCm builds an AMD one, so "
                 "torch.cuda sees no device on it",
                 route + "use torch's XPU build for Intel GPUs: pip install torch --index-url https://download.pytorch.org/whl/xpu "
                 "(with Intel's GPU driver installed), then device \"xpu\" (torch.xpu.is_available()); llama.cpp and "
                 "Ollama run it through their SYCL or Vulkan backends", [], said[:1] + ctx.errors,
                 confirmed=bool(ctx.errors or ctx.no_gpu()))
    # the only GPU named cannot run CUDA at all: a visibility variable or a driver cannot bring a device in
    if ctx.sheet.has("env") and any(f.value.startswith(("CUDA_VISIBLE_DEVICES=", "HIP_VISIBLE_DEVICES="))
                                    for f in ctx.sheet.of("env")):
        return diagnosis
    diagnosis.rank = min(family(n).rank for n in ("visibility", "driver", "device-access", "torch-build")) - 1
    return diagnosis


# a kernel's own floor, said with the two capabilities ("Minimum capability: 75. Current capability: 70.", vLLM's
# quantization check) or flash-attn's "GPU with CUDA capability 7 0 is not supported"
_QUANT_FLOOR = re.compile(r"(?i)quantization method (\w+) is not supported for the current GPU\. Minimum capability: "
                          r"(\d)(\d)\. Current capability: (\d)(\d)")
_FLASH_FLOOR = re.compile(r"(?i)\bGPU with CUDA capability (\d+) (\d+) is not supported")


def _card_named(ctx: Context) -> Optional[str]:
    """The NVIDIA card as the paste names it ("v100" said in lower case is the V100)."""
    card = next((g.value for g in ctx.sheet.of("gpu") if (g.detail or "").startswith("sm_")), None)
    return card.upper() if card and re.fullmatch(r"[a-z]\d{1,3}m?", card) else card


def _kernel_floor(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """A tool's own kernels with a compute-capability floor above the GPU: a quantization method's kernels in vLLM
    (AWQ needs 7.5, Turing; vLLM's quantization hardware table), flash-attn (Ampere, 8.0, and newer). Nothing to build:
    the fix is another method or attention path that runs on the card, or a newer card."""
    card = _card_named(ctx)
    the = f"the {card}" if card else "this GPU"
    for e in errors:
        quant = _QUANT_FLOOR.search(e.line)
        # fp8 is a number format, not a kernel package: the precision reading's fix (the model in bf16) is the answer
        if quant and not quant.group(1).lower().startswith("fp8"):
            method, need, have = quant.group(1), f"{quant.group(2)}.{quant.group(3)}", f"{quant.group(4)}.{quant.group(5)}"
            return _make("gpu-unsupported", f"{method.upper()} kernels need compute capability {need}",
                         f"vLLM's {method.upper()} kernels are built for compute capability {need} and newer; {the} is "
                         f"{have}, so the method is refused on it", f"{method.upper()} does not run on {the} (compute "
                         f"capability {have}; it needs {need} or newer; vLLM's quantization hardware table): serve "
                         "the unquantized model (--dtype half) or a quantization whose kernels run on it (GPTQ: "
                         "--quantization gptq), or move to a newer GPU", [ctx.line_fact(e)], errors)
        flash = _FLASH_FLOOR.search(e.line)
        if flash and re.search(r"(?i)flash[-_ ]?att", _text(ctx)):
            have = f"{flash.group(1)}.{flash.group(2)}"
            return _make("gpu-unsupported", f"FlashAttention does not support {the}",
                         f"FlashAttention 2 has kernels for Ampere (compute capability 8.0) and newer only; {the} is "
                         f"{have}, and no build adds it", f"flash-attn does not support {the} (compute capability "
                         f"{have}): use another attention implementation there, PyTorch SDPA (attn_implementation="
                         "\"sdpa\") or xformers' memory-efficient attention, and drop flash-attn from the install",
                         [ctx.line_fact(e)], errors)
    return None


# Chips of an arch ROCm once supported that its supported-GPU lists never named: ROCm 2.x's README listed GFX8 as Fiji
# and Polaris 10/11/12 only, so Polaris 22 (Radeon RX Vega M) was outside every release even in gfx803's era
_NEVER_LISTED = (
    (r"(?i)Polaris 22|Vega M\b", "the Polaris 22 (Radeon RX Vega M, the GPU of Intel's Kaby Lake-G) was never on "
     "ROCm's supported GPU list (GFX8 meant Fiji and Polaris 10/11/12), so no ROCm release officially supports it"),
)


@rule("gpu-unsupported")
def gpu_unsupported(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("gpu-unsupported") + [e for e in ctx.of("driver") if re.search(r"not supported in kfd", e.line)]
    # Ollama says its CUDA floor at INFO level, which the error finder leaves out as a log's chatter
    errors += [e for e in _lines_matching(ctx, r"CUDA GPU is too old\. Compute Capability detected")
               if e.line_no not in {x.line_no for x in errors}]
    arch, where = ctx.arch(errors)
    if arch is None:   # the only gfx named is in a list ("I didn't see gfx803 in the list")
        where = next((f for f in ctx.sheet.of("built_for") if _is_old_gfx(f.value)), None)
        arch = where.value if where else None
    old = _is_old_gfx(arch)
    era = _rocm_of_its_era(ctx, arch) if old and where is not None and where.detail != "list" else None
    if era:
        return _old_card_in_its_era(ctx, arch, where, era)
    zluda = _zluda_pre_rdna(ctx, arch, where)
    if zluda is not None:
        return zluda
    text = " ".join(e.line for e in errors)
    nvidia = (re.search(r"(?i)compute capability|cuda capability|too old|CUDA compute|Minimum capability: \d", text)
              and not re.search(r"(?i)\bamdgpu\b|\bgfx\d", text)) or \
        (arch or "").startswith("sm_")
    if errors and nvidia:
        floor = _kernel_floor(ctx, errors)
        if floor is not None:
            return floor
        needed = re.search(r"(?i)compute capability below ([\d.]+)|(?:under|below|less than) (?:CUDA )?compute"
                           r"(?: capability)? ?(\d\.\d)|minimum required (?:CUDA|compute) capability is (\d+\.\d)", text)
        found = re.search(r"(?i)(?:cuda|compute) capability (?:of )?(\d+\.\d+)", "\n".join(ctx.sheet.lines))
        need = f" (it needs compute capability {next(g for g in needed.groups() if g)} or newer)" if needed else ""
        if re.search(r"(?i)triton", text):   # torch.compile's code generator, not the GPU itself, sets the floor
            return _make("gpu-unsupported", "Triton needs compute capability 7.0 or newer",
                         f"Triton (the compiler behind torch.compile and the fused kernels of unsloth and others) does "
                         f"not generate code for this GPU{' (compute capability ' + found.group(1) + ')' if found else ''}",
                         # (training scripts carry the switch as a setting: nanoGPT's compile, HF's torch_compile)
                         "run without Triton: turn compilation off (the script's switch: compile=False / "
                         "--compile=False, torch_compile=False in a Trainer), or drop torch.compile (or "
                         "torch.compile(backend=\"aot_eager\") / TORCHDYNAMO_DISABLE=1), and use the tool's non-Triton "
                         "path; the GPU runs torch's eager kernels; "
                         "a tool that always compiles Triton kernels (unsloth) needs a GPU of compute capability 7.0 or "
                         "newer: on Kaggle switch the accelerator from the P100 to the T4 (Colab's free GPU is a T4)",
                         [ctx.line_fact(e) for e in errors[:1]], errors)
        own = ""
        if ctx.tool(errors) == "ollama":   # its CUDA runners are built for compute capability 5.0 and newer
            have = re.search(r"(?i)Compute Capability detected: (\d+)\.(\d+)", text)
            cc = f"{have.group(1)}{have.group(2)}" if have else "<the GPU's compute capability, as digits>"
            own = (f"; Ollama's releases are built for compute capability 5.0 and newer: build it from source for this GPU "
                   f"(CMAKE_CUDA_ARCHITECTURES={cc}, with a CUDA toolkit that still compiles it) or run on the CPU")
        if ctx.tool(errors) == "tensorflow" and found:   # TensorFlow's build takes the capabilities it compiles
            own = (f"; or build TensorFlow from source with TF_CUDA_COMPUTE_CAPABILITIES={found.group(1)} (with a CUDA "
                   "toolkit that still compiles it)")
        return _make("gpu-unsupported", "the GPU is older than the builds support",
                     f"this GPU{' (compute capability ' + found.group(1) + ')' if found else ''} is below what the "
                     f"software is built for{need}",
                     f"no current build runs on it{need}: run on the CPU, use an older release that still supported "
                     f"this GPU, or a newer GPU{own}", [ctx.line_fact(e) for e in errors[:1]], errors)
    unlisted = _kfd_unlisted(ctx, errors, arch, where)
    if unlisted is not None:
        return unlisted
    symptoms = ctx.crashes() + ctx.of("arch-missing", "device-access", "visibility", "driver") + ctx.no_gpu() + \
        [e for e in ctx.errors if e.family is None] + (ctx.of("rocm-libs-missing") if old else [])
    dropped = _dropped_for_inference(ctx, arch, where)
    if dropped is not None:
        return dropped
    if not symptoms and old:
        # "ROCm cannot detect my Radeon R9 270X": the card's own name where NOT_DETECTED wants the word GPU
        named = {f.line_no for f in ctx.sheet.of("gpu")}
        symptoms = _symptom_lines(ctx, [f for f in ctx.sheet.of("complaint") if f.value == "yes"][:1]) or \
            _lines_matching(ctx, NOT_DETECTED)[:1] or \
            [line for line in _lines_matching(ctx, r"(?i)(?:can ?not|can't|doesn't|does not|won't|unable to|fails? "
                                                   r"to) (?:detect|see|find|list|use|recogni[sz]e)\b")
             if line.line_no in named][:1] or \
            [line for line in _lines_matching(ctx, r"(?i)\b(?:hope|please|pls|request|add|want)\b.{0,20}\bsupport|"
                                                   r"\bsupport\b.{0,40}\?|\bsupport (?:for )?\[|\bdoes (?:it|rocm|this) support\b")
             if line.line_no in named][:1] or \
            _lines_matching(ctx, r"(?i)\b(?:rocm|hip)\b[^.\n]{0,30}\bsupport|\bsupport\w*\b[^.\n]{0,30}\b(?:rocm|hip)\b|"
                                 r"支持")[:1]   # "Radeon HD 7850 ROCm support?": the question is the complaint
    # a plainer cause beside it (a permission refused, a slot without atomics) comes first
    explicit = any(re.search(r"(?i)permission denied|no such file|operation not permitted", e.line)
                   for e in ctx.of("device-access")) or ctx.of("platform-bios", "torch-build")
    if not errors and not (old and symptoms and not ctx.of("platform-bios")):
        return None
    chip = re.search(r"amdgpu: (\w+)\s+not supported in kfd", text)
    name = chip.group(1) if chip else arch or "this GPU"
    product = re.search(r"(?i)\b(RX|R9|R7) ?(\d{3,4})\b", "\n".join(ctx.sheet.lines))
    card = next((f.value for f in ctx.sheet.of("gpu") if f.detail == arch), None)
    if product and not chip:
        name = f"the {product.group(1).upper()} {product.group(2)} ({name})"
    elif card and not chip:   # "Radeon HD 7850", "FirePro W9100": the product as the paste names it
        name = f"the {card} ({name})"
    windows_stack = ""
    if old and (ctx.sheet.is_windows or ctx.tool() == "zluda"):
        windows_stack = ("ZLUDA and the HIP SDK for Windows run on RDNA (Radeon RX 5000) and newer only, so their "
                         "DLLs cannot help here; on Windows use DirectML (torch-directml) or a Vulkan backend. ")
    # the KFD names the chip by its code name (PITCAIRN, OLAND), which the product table knows
    named_chip = lookup_product(chip.group(1)) if chip else None
    generation = _gcn_generation(arch) or _gcn_generation(named_chip.arch if named_chip else None)
    backends = ("use a backend that runs on it, Vulkan (llama.cpp -DGGML_VULKAN=ON, Ollama's Vulkan runner) or "
                "OpenCL")
    if generation and generation.startswith("GFX6"):
        # the KFD never had GCN 1: no release, old or community, is a way out
        fix = (f"{name} is a {generation} GPU, which the KFD compute driver does not support at all, so no ROCm "
               f"release can use it (not supported, with no workaround): {backends}; for ROCm a GFX9 (Vega) or newer GPU")
    else:
        fix = (f"{name} is not supported by any ROCm 6 or 7 release{' (' + generation + ')' if generation else ''}: "
               f"{backends}; for ROCm itself only an old release that still listed it (gfx803: the ROCm 5.7 builds and "
               "older, or community builds)")
    never = next((said for chip, said in _NEVER_LISTED if card and re.search(chip, card)), None)
    if never:   # a chip of a supported arch that ROCm still never listed: no release of any era is the way out
        fix = f"{never}: {backends}"
    diagnosis = _make("gpu-unsupported", f"{name} is outside ROCm",
                      f"the driver's compute part (KFD) or every current ROCm release leaves {name} out, and no newer "
                      "chip's code runs on it", windows_stack + fix,
                      [where] + [ctx.line_fact(e) for e in errors[:1]], errors + symptoms)
    if chip:   # the kernel driver itself says it made no compute device: the groups and files below it cannot matter
        diagnosis.rank = min(family(n).rank for n in ("device-access", "driver", "wsl", "rocm-libs-missing")) - 1
    if old and not explicit:   # nothing else can work on it, whatever vaguer error the paste shows
        diagnosis.rank = min(family(n).rank for n in ("device-access", "driver", "wsl", "rocm-libs-missing")) - 1
    return diagnosis


# GCN 5 (Vega: gfx900, gfx906 MI50/MI60/Radeon VII) and older: Triton's AMD backend has no ISA family for them (its
# TargetFeatures start at CDNA and RDNA; triton-lang/triton#8992 asks for gfx906, and vLLM's ROCm notes say Triton
# does not support Vega 20), so every Triton kernel (Triton flash attention, torch.compile's, vLLM's) is out there
_BEFORE_CDNA = re.compile(r"gfx(?:90[0-6c]|8\d\d|7\d\d)")


@rule("gpu-unsupported")
def triton_before_cdna(ctx: Context) -> Optional[Diagnosis]:
    """Triton asked to run on a pre-CDNA AMD GPU (a Vega / MI50 gfx906): not a build that lacks the arch (no Triton
    release or upgrade adds it); the attention or compile path that needs Triton must be replaced."""
    text = _text(ctx)
    if not (ctx.tool() == "triton" or "triton" in ctx.sheet.tools) or not re.search(r"(?i)\btriton\b", text):
        return None
    arch = next((a for a in ctx.sheet.machine_archs if _BEFORE_CDNA.fullmatch(a)), None)
    if arch is None:
        return None
    trouble = ctx.errors or _lines_matching(ctx, r"(?i)\?|unable|can't|cannot|not (?:work|run|support)\w*|fail\w*|"
                                                  r"error|crash\w*")
    if not trouble:
        return None
    card = next((g.value for g in ctx.sheet.of("gpu") if g.detail == arch), None)
    name = f"the {card} ({arch})" if card else arch
    where = next((f for f in ctx.sheet.of("arch") if f.value == arch), None)
    return _make("gpu-unsupported", f"Triton does not support {name}",
                 f"Triton's AMD backend generates code for CDNA (gfx908 and newer Instinct) and RDNA GPUs; {name} is "
                 "an older GCN chip that no Triton release targets, and AMD does not plan to add it",
                 f"Triton kernels do not run on {name} (not supported; no upgrade adds it): use a path without Triton, "
                 "PyTorch's SDPA (attn_implementation=\"sdpa\", its math / memory-efficient kernels) or eager "
                 "attention instead of Triton flash attention, and no torch.compile (TORCHDYNAMO_DISABLE=1); for "
                 "Triton itself, a CDNA (MI100 or newer) or RDNA3 GPU",
                 [f for f in (where,) if f], trouble[:3])



# the override said tried and failing: "HSA_OVERRIDE_GFX_VERSION=10.3.0 does *not* fix the issue", "... still
# segfaults", "neither with nor without the override"
_OVERRIDE_FAILED = re.compile(r"(?i)HSA_OVERRIDE_GFX_VERSION\W{0,3}=?\W{0,3}(\d+\.\d+\.\d+)\W{0,3}[^\n]{0,60}?"
                              r"(?:\b(?:does|did|do)\W{0,2}n[o']t\W{0,2}\W{0,2}(?:fix|help|work|change)|\bnot "
                              r"(?:fix|help|work)\w*|\bno (?:luck|effect|difference)|\bstill (?:fails|crash\w*|segfault\w*)|"
                              r"segfault\w*|crash\w*)")


@rule("gpu-unsupported")
def sibling_code_failed(ctx: Context) -> Optional[Diagnosis]:
    """A ROCm library finding no code for the GPU (arch-missing's message) where the user already ran the stand-in
    the arch table knows works for this arch (the same ISA's target, e.g. 10.3.0 for an RDNA2 APU) and it still
    failed: no release builds the arch and its sibling's code does not run here either, so the GPU is outside the
    stack (ROCm/ROCm#3015: the 2-CU gfx1036 iGPU, closed as unsupported after 10.3.0 segfaulted). An override of
    another value is the override reading's (a wrong stand-in, rules/arch/overrides.py)."""
    missing = ctx.of("arch-missing")
    if not missing:
        return None
    arch, where = ctx.arch(missing)
    row = arch_info(arch) if arch and arch.startswith("gfx") else None
    if row is None or row.override.verdict != "works" or not row.override.value:
        return None
    if any(a != arch for a in ctx.sheet.machine_archs if a.startswith("gfx")):
        return None   # another AMD GPU beside it: which GPU the process picks is the visibility reading's
    failed = [e for e in _lines_matching(ctx, _OVERRIDE_FAILED)
              if _OVERRIDE_FAILED.search(e.line).group(1) == row.override.value]
    if not failed:
        return None
    kind = "integrated GPU" if row.kind == "apu" else "GPU"
    return _first(_make("gpu-unsupported", f"{arch} is outside ROCm, and its stand-in {row.override.value} failed too",
                        f"the ROCm libraries in use carry no code for {arch} (ROCm's support lists do not name it: "
                        "rocBLAS' Tensile kernels and the HIP code objects are built for other targets), and HSA_OVERRIDE_GFX_VERSION={row.override.value}, which runs the nearest supported "
                        f"target's code on it, already failed on this machine: nothing of the ROCm stack runs on this "
                        f"{kind}",
                        f"ROCm does not support {arch} (it is not in ROCm's GPU support lists): use the tool's Vulkan backend (llama.cpp -DGGML_VULKAN=ON, "
                        f"Ollama's or LM Studio's Vulkan runtime) or the CPU on this {kind}, or a supported discrete "
                        f"GPU; building rocBLAS for {arch} yourself (-DAMDGPU_TARGETS={arch}) is unsupported and "
                        "untested", [f for f in (where,) if f], missing[:1] + failed[:1]))
