"""Attention kernels: flash-attention and FlashInfer on a GPU or arch they have no kernels for, and how each tool
turns them off (SDPA instead)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.rules.base import (_ahead_of, _arch_fact, _catalogue, Context, Diagnosis, _first, _lines_matching,
                                          _make, on_windows, _restate, rule, _vendor, WINDOWS_WORD)
from steadytune.doctor.rules.runtime.shared import _text_of


# NVIDIA GPUs older than Ampere, by name: flash-attn 2 has no kernels for them
_PRE_AMPERE = re.compile(r"(?i)(?<![A-Za-z0-9])(?:V100|P100|P40|P4|T4|K80|M40|GTX ?1[06]\d\d|RTX ?20\d\d|Titan (?:V|Xp|RTX)|Quadro RTX ?\d+)"
                         r"(?![A-Za-z0-9])|\b(?:Volta|Turing|Pascal)\b")


def _amd_arch_outside_flash_attention(ctx: Context, text: str) -> Optional[Diagnosis]:
    """ROCm's flash-attention refusing an AMD GPU by its own arch check ("only supports MI200 GPUs or newer"): the
    arch is missing from the build's list, which the maintainers extend (gfx908 was added that way), so the arch
    reading: build it for this arch, or use SDPA."""
    said = _lines_matching(ctx, r"(?i)FlashAttention only supports AMD|only supports AMD MI\d+")
    if not said:
        return None
    allowed = re.compile(r"gfx9(?:0a|4\d|5\d)")
    refused = [a for a in ctx.sheet.machine_archs if a.startswith("gfx") and not allowed.fullmatch(a)]
    if not refused:
        return None
    arch = refused[0]
    return _make("arch-missing", f"ROCm's flash-attention leaves {arch} out of its arch check",
                 f"the flash-attention build checks the GPU's arch against the ones it was made for (MI200 / MI300: "
                 f"gfx90a, gfx94x); {arch} is not in that list, so it refuses the GPU before running",
                 f"build ROCm/flash-attention from a release whose arch check includes {arch} (add it to the valid "
                 f"archs in setup.py and the TORCH_CHECK where it is missing), with GPU_ARCHS={arch} pip install "
                 f"--no-build-isolation .; or skip it: attn_implementation=\"sdpa\"",
                 [f for f in (_arch_fact(ctx, arch),) if f], said)


# flash-attn 1.x checks the GPU before its backward pass for head dims above 64 (is_sm80: the A100's / H100's larger
# shared memory); its README's table says so ("Head dim > 64 backward requires A100 or H100")
_HEAD_DIM_BACKWARD = re.compile(r"(?i)Expected is_sm80(?: \|\| is_sm90)? to be true|\bhead dim > ?\d+ backward requires")


_FLASH_ATTN_SAID = re.compile(r"(?i)flash[_-]?attn|flash_attn_cuda|flash-attention|FlashAttention")
# torch's own SDPA in the paste: torch 2.0 named, or scaled_dot_product_attention / sdpa (the bare check line alone is
# also what flash-attn 1.x prints: its TORCH_CHECK has the same wording)
_TORCH_SDPA_SAID = re.compile(r"(?i)\b(?:py)?torch\W{0,3}(?:==|version:?\s*)?v?2\.0(?:\.\d+)?\b|\b2\.0\.\d\+cu1\d\d\b|"
                              r"scaled_dot_product|\bsdpa\b")


def _head_dim_backward(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """flash-attn 1.x refusing the backward pass of a head dim above 64 on a GPU that is not an A100 / H100 (an RTX
    3090 / 4090, an A40, an A10): the forward runs there, training does not. Not the GPU's arch (no build adds the
    shared memory): flash-attn 2 runs the backward of every head dim up to 256 on Ampere and newer (its README: head
    dim 256 backward on consumer GPUs since 2.5.5, without dropout)."""
    said = [e for e in errors if _HEAD_DIM_BACKWARD.search(e.line)]
    if not said:
        return None
    gpu = next((g.value for g in ctx.sheet.of("gpu") if not re.search(r"(?i)\b[AH]100\b", g.value)), None)
    on = f" on the {gpu}" if gpu else ""
    text = "\n".join(ctx.sheet.lines)
    if not _FLASH_ATTN_SAID.search(text) and _TORCH_SDPA_SAID.search(text) and \
            any("is_sm80" in e.line for e in said):
        tag = re.search(r"\+(cu1\d{2})\b", text)
        label = tag.group(1) if tag else "cuXXX"
        # no flash-attn package anywhere in the paste: torch 2.0's own SDPA flash backend made the same check and
        # dispatched head dims above 64 to it on sm86 / sm89 (pytorch/pytorch#94883, #98140: fixed in the releases
        # after 2.0; ChatGLM-Efficient-Tuning#200's maintainer pointed at the nightly that had the fix) (round 19, r19c)
        diagnosis = _make("attention", f"torch 2.0's SDPA sends this backward pass to a kernel it cannot run{on}",
                          "torch 2.0's scaled_dot_product_attention picks its flash backend for the backward pass of a "
                          "head dim above 64, which that backend runs only on sm80 / sm90 (A100, H100); on other GPUs it "
                          "stops with this check (a known torch 2.0 dispatch bug)",
                          "upgrade torch past 2.0 (pip install -U torch from the index of your CUDA; the fix was in the "
                          "nightlies first: pip install --force-reinstall --pre torch --index-url "
                          f"https://download.pytorch.org/whl/nightly/{label}" + ("" if tag else ", cuXXX the CUDA of your torch: "
                          "python -c \"import torch; print(torch.version.cuda)\"") + "), or keep torch and turn SDPA's flash backend off "
                          "for training: torch.backends.cuda.enable_flash_sdp(False) before the model runs",
                          [ctx.line_fact(said[0])], said)
        return _ahead_of(diagnosis, "arch-missing")
    diagnosis = _make("attention", f"flash-attn 1.x trains head dims above 64 only on an A100 / H100{on}",
                      "FlashAttention 1.x runs the backward pass (training) of a head dim above 64 only on sm80 / sm90 "
                      "GPUs (A100, H100: their larger shared memory); the forward pass (inference) runs on this GPU",
                      "upgrade to flash-attn 2.x (pip install -U flash-attn --no-build-isolation): its backward pass "
                      "runs every head dim up to 256 on Ampere and newer GPUs (RTX 30xx/40xx, A40, A10); with flash-attn "
                      "1.x, train only a model whose head dim is 64 or less, or train on an A100 / H100 (inference "
                      "runs here as is)", [ctx.line_fact(said[0])], said)
    # the arch reading of the same line (rebuild flash-attn for this GPU) cannot add shared memory
    return _ahead_of(diagnosis, "arch-missing")


# flash-attn's TORCH_CHECK of the GPU's arch before its forward pass: "Expected is_sm90 || is_sm8x || is_sm75 to be
# true" (flash-attn 1.x's fmha_api.cpp; early 2.x: is_sm90 || is_sm8x); the head-dim check above is another
_GPU_CHECK = re.compile(r"(?i)Expected is_sm\w+(?:\s*\|\|\s*is_sm\w+)* to be true")


_SGLANG = re.compile(r"(?i)\bsglang\b")
_FLASHINFER = re.compile(r"(?i)\bflash_?infer\b")
_AMD_WORDS = re.compile(r"(?i)\bamd|\brocm\b|\bhip\b|\bgfx\d|\bMI\d{2,3}\b|\bradeon\b|\binstinct\b")
_TURING_OR_OLDER = re.compile(r"(?i)(?:<=?|or lower|below|older)\W{0,3}sm_?[5-7]\d|\bsm_?[5-7]\d\b\W{0,3}(?:or lower|and below)")


def _flashinfer_outside(ctx: Context) -> Optional[Diagnosis]:
    """SGLang on a GPU its default attention backend, FlashInfer, has no kernels for: an AMD GPU (FlashInfer is CUDA
    only) or an NVIDIA card below sm_80 (FlashInfer's README lists sm80 and newer as supported; sm75 has come and gone
    between releases). SGLang's own switch runs attention through its Triton kernels instead (--attention-backend
    triton, with --sampling-backend pytorch for the sampler; older releases: --disable-flashinfer
    --disable-flashinfer-sampling)."""
    text = _text_of(ctx)
    if not (_SGLANG.search(text) and _FLASHINFER.search(text)):
        return None
    older = [a for a in ctx.sheet.machine_archs if re.fullmatch(r"sm_[5-7]\d", a)]
    amd = bool(_AMD_WORDS.search(text) or any(a.startswith("gfx") for a in ctx.sheet.machine_archs)) and not older
    if not (amd or older or _TURING_OR_OLDER.search(text)):
        return None
    if not (ctx.errors or ctx.sheet.has("complaint", "yes") or re.search(r"\?|？|crash|fail|error|can't|cannot", text)):
        return None
    where = "AMD GPUs (FlashInfer has CUDA kernels only)" if amd else \
        f"this NVIDIA GPU ({older[0] if older else 'below sm_80'}; FlashInfer supports sm80 and newer, sm75 only in some releases)"
    said = _lines_matching(ctx, _FLASHINFER.pattern)[:1]
    upgrade = "" if amd else ("; or upgrade sglang together with flashinfer to a release whose FlashInfer lists this "
                              "arch among its supported ones")
    return _make("attention", "SGLang's FlashInfer attention backend does not run on this GPU",
                 f"SGLang uses FlashInfer for attention and sampling by default, and FlashInfer has no kernels for {where}",
                 "start sglang without FlashInfer: python -m sglang.launch_server ... --attention-backend triton "
                 "--sampling-backend pytorch (releases before the --attention-backend flag: --disable-flashinfer "
                 f"--disable-flashinfer-sampling){upgrade}", [ctx.line_fact(l) for l in said], said, confirmed=False)


# a fine-tuning script that patches flash attention into the model itself (FastChat's and LLaVA's train_mem.py call
# replace_llama_attn_with_flash_attn); the same trainer without the patch is train.py, and FastChat's README gives
# train_xformers.py for the V100 ("If you are using V100 which is not supported by FlashAttention ... replace
# fastchat/train/train_mem.py with fastchat/train/train_xformers.py"; lm-sys/FastChat issue 498)
_PATCHING_TRAINER = re.compile(r"(?i)\btrain_mem\.py\b|\bfastchat\b|\bllava\b|\bvicuna\b|"
                               r"replace_llama_attn_with_flash_attn|\b(?:fine-?tun\w*|finetune\w*|lora)\b")


def _attention_off(ctx: Context) -> str:
    """How to turn flash-attn off, in the configuration language of the tool the paste uses."""
    text = _text_of(ctx)
    if re.search(r"(?i)\bvllm\b", text):
        # vLLM picks its attention backend itself; VLLM_ATTENTION_BACKEND overrides it (its envs.py), and its
        # xFormers backend runs on Volta and Turing; a model whose own code called flash-attn (Qwen2-VL's vision
        # encoder, QwenLM/Qwen3-VL issue 67) got an xFormers path in later vLLM releases
        return ("start vLLM with export VLLM_ATTENTION_BACKEND=XFORMERS (xFormers' attention runs on this GPU), on a "
                "vLLM release whose code for this model has an xFormers path (pip install -U vllm, or the model's "
                "updated docker image)")
    if re.search(r"(?i)\baxolotl\b", text):
        return "flash_attention: false in the axolotl YAML (sdp_attention: true for PyTorch's fused attention)"
    if re.search(r"(?i)llama-?factory|llamafactory-cli", text):
        return "flash_attn: sdpa in the LLaMA-Factory YAML (or disabled)"
    off = ("load the model with attn_implementation=\"sdpa\" (or \"eager\") instead of \"flash_attention_2\", and "
           "turn the tool's flash-attention option off (axolotl: flash_attention: false; LLaMA-Factory: flash_attn: "
           "sdpa)")
    if _PATCHING_TRAINER.search(text):
        off += ("; a training script that patches flash attention in itself (FastChat's and LLaVA's train_mem.py): "
                "run its train.py instead, which does not (FastChat: fastchat/train/train_xformers.py for xFormers' "
                "memory-efficient attention)")
    return off


@rule("attention")
def attention(ctx: Context) -> Optional[Diagnosis]:
    errors = ctx.of("attention")
    if not errors and ctx.tool() == "flash-attn":   # its build fails for this GPU's arch
        errors = [ErrorLine(i, l.strip(), "attention") for i, l in enumerate(ctx.sheet.lines, 1)
                  if re.search(r"(?i)errors? generated when compiling for gfx\w+", l)]
    tgi = _lines_matching(ctx, r"(?i)Flash Attention enabled models")
    old_gpu = _PRE_AMPERE.search(_text_of(ctx))
    if tgi and old_gpu and _lines_matching(ctx, r"(?i)\bSharded \w+ requires Flash Attention"):
        # TGI shards (tensor parallel) a model only through its flash-attention model code, and flash-attention has
        # no kernels before Ampere: no install brings them to this GPU
        return _first(_make("attention", f"TGI shards this model only with flash attention, which the {old_gpu.group(0)} "
                            "cannot run", "text-generation-inference implements the sharded (tensor-parallel) model "
                            "only on its flash-attention model code; flash attention has kernels for Ampere (compute "
                            f"capability 8.0) and newer, and the {old_gpu.group(0)} is older",
                            "run the model unsharded on this GPU (drop --num-shard, or --num-shard 1: TGI then uses the "
                            "transformers code path on one GPU, which must hold the model; quantize it to fit), or "
                            "serve it sharded on Ampere or newer GPUs", [ctx.line_fact(tgi[0])], tgi))
    if tgi:
        # TGI's server imports its own compiled kernels (flash-attention, vLLM's paged-attention ops); a local install
        # without them cannot shard or page; the install readings of the missing module do not fix it
        return _first(_make("attention", "text-generation-inference was installed without its attention kernels",
                            "a local TGI install imports the flash-attention and vLLM paged-attention kernels it "
                            "builds itself (vllm_cache_ops, flash_attn_cuda); without them the models that need them "
                            "(sharded, paged) refuse to load",
                            "build the kernels from TGI's server folder: cd server && make install-flash-attention "
                            "(make install-flash-attention-v2 for newer releases) && make install-vllm, then restart "
                            "the launcher; or run TGI's docker image, which ships them", [ctx.line_fact(tgi[0])],
                            tgi))
    flashinfer = _flashinfer_outside(ctx)
    if flashinfer is not None:
        return flashinfer
    if not errors:
        return None
    head_dim = _head_dim_backward(ctx, errors)
    if head_dim is not None:
        return head_dim
    text = " ".join(e.line for e in errors)
    evidence = [ctx.line_fact(errors[0])]
    if re.search(r"(?i)stack frame size", text) and ctx.tool(errors) == "vllm" or \
            re.search(r"VLLM_USE_TRITON_FLASH_ATTN", "\n".join(ctx.sheet.lines)):
        return _make("attention", "vLLM's Triton flash attention does not build for this GPU",
                     "the Triton flash-attention kernel fails to compile for this arch (stack frame too large)",
                     "export VLLM_USE_TRITON_FLASH_ATTN=0 (vLLM then uses its other attention backend)", evidence,
                     errors)
    cuda = re.search(r"(?i)FlashAttention is only supported on CUDA ([\d.]+)", text)
    if cuda:
        return _make("attention", f"flash-attn needs CUDA {cuda.group(1)} to build",
                     f"building flash-attn from source needs the CUDA toolkit {cuda.group(1)} or newer",
                     f"install a prebuilt flash-attn wheel that matches torch and its CUDA (the release page lists "
                     f"them), or build with a CUDA {cuda.group(1)}+ toolkit", evidence, errors)
    old_gpu = _PRE_AMPERE.search(_text_of(ctx))
    checked = _GPU_CHECK.search(text)
    if checked:
        archs = re.findall(r"is_sm(\w+)", checked.group(0))
        floor = min(int(a.replace("x", "0")) for a in archs)
        gpu = next((g for g in ctx.sheet.of("gpu") if re.fullmatch(r"sm_\d+", g.detail or "")), None)
        card = f"the {gpu.value} ({gpu.detail})" if gpu else (f"the {old_gpu.group(0)}" if old_gpu else "this GPU")
        if not gpu or int(gpu.detail[3:]) < floor:
            listed = ", ".join("sm_" + a for a in archs)
            return _make("attention", f"flash-attn has no kernels for {card}",
                         f"flash-attn checks the GPU before it runs and accepts only {listed}; {card} is none of them "
                         "(FlashAttention 1.x runs on Turing (sm_75) and newer, 2.x on Ampere (sm_80) and newer), so no "
                         "reinstall or rebuild of flash-attn runs here",
                         f"do not use flash-attn on {card}: " + _attention_off(ctx), evidence, errors)
    if re.search(r"(?i)Ampere GPUs or newer|(?:lower|older) than ampere", text) or (
            old_gpu and re.search(r"(?i)flash[-_ ]?att", text)):
        named = next((g.value for g in ctx.sheet.of("gpu") if re.fullmatch(r"sm_[1-7]\d", g.detail or "")), None)
        on = f" ({old_gpu.group(0)})" if old_gpu else f" ({named})" if named else ""
        return _make("attention", f"FlashAttention 2 needs an Ampere or newer GPU{on}",
                     f"flash-attn 2 has kernels for sm_80 (Ampere) and newer only; this GPU{on} is older, so there "
                     "is nothing to build or install for it",
                     f"do not use flash-attn on this GPU{on}: " + _attention_off(ctx) +
                     " (the model runs with the default attention; drop flash-attn from the install)", evidence,
                     errors)
    if re.search(r"(?i)FlashAttention2? has been toggled on|flash_attn\W+(?:seems to be )?not installed|No module named "
                 r"'flash_attn", text):
        amd = _vendor(ctx) == "amd"
        install = ("ROCm's flash-attention (github.com/ROCm/flash-attention, built with GPU_ARCHS=<your gfx>) or its "
                   "Triton backend (FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE)" if amd else
                   "pip install flash-attn --no-build-isolation (a prebuilt wheel matching torch and CUDA)")
        return _make("attention", "flash-attn is not installed", "the model is asked for FlashAttention 2, but the "
                     "flash_attn package is not importable in this environment",
                     f"load the model with attn_implementation=\"sdpa\" (PyTorch's fused attention, no extra package), "
                     f"or install {install}", evidence, errors)
    # on Windows the install reading (rules/install/wheels.py: no Windows wheels, the platform's own build) says more
    if not ctx.sheet.is_windows and not (WINDOWS_WORD.search(text) and re.search(r"(?i)\binstall", text)) and re.search(
            r"(?i)flash[-_ ]?attn\w*\b.{0,40}\b(?:install|build|compil)|(?:install|build|compil)\w*\b.{0,20}\bflash[-_ ]?attn",
            text):
        if _vendor(ctx) == "amd":
            fix = ("build ROCm's fork instead (github.com/ROCm/flash-attention: GPU_ARCHS=<your gfx> pip install "
                   "--no-build-isolation .) or its Triton backend (FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE, no CUDA "
                   "build); or skip it: attn_implementation=\"sdpa\"")
        else:
            fix = ("install a prebuilt wheel for this torch, CUDA and Python (the flash-attention release page), or "
                   "build with pip install flash-attn --no-build-isolation and MAX_JOBS=4 (the build runs out of RAM "
                   "with more); or skip it: attn_implementation=\"sdpa\"")
        return _make("attention", "flash-attn does not build here", "flash-attn compiles CUDA (or HIP) kernels at "
                     "install time; without a wheel for this torch and GPU the build fails", fix, evidence, errors)
    if re.search(r"(?i)TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL|current AMD GPU", text):
        return _make("attention", "torch's fused attention is experimental on this AMD GPU",
                     "this ROCm torch builds its flash / memory-efficient SDPA kernels (AOTriton) for this GPU but "
                     "keeps them off by default; attention falls back to the slower math path (a warning, not an error)",
                     "export TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1 before starting (torch 2.4+ on RDNA3/RDNA4), "
                     "or ignore the warning; a newer torch turns it on for more GPUs", evidence, errors,
                     severity="warning")
    if re.search(r"(?i)Torch was not compiled with (?:flash|memory efficient) attention", text):
        return _make("attention", "this torch has no flash-attention kernel for SDPA",
                     "the torch wheel (the Windows builds, and older ROCm ones) is built without the flash kernel of "
                     "scaled_dot_product_attention; it falls back to the memory-efficient or math kernel and runs on",
                     "nothing to fix: a warning about speed only; for faster attention on Windows use a torch build "
                     "with it (a newer release) or xformers / flash-attn wheels built for this torch; the error that "
                     "stopped the run, if any, is another line", evidence, errors, severity="warning")
    if re.search(r"(?i)memory_efficient_attention", text) and _vendor(ctx) == "amd":
        return _make("attention", "xformers has no kernels for this AMD GPU",
                     "the installed xformers has no ROCm kernels for this arch",
                     "do not use xformers on AMD: uninstall it or start without it (ComfyUI: "
                     "--use-pytorch-cross-attention; A1111: no --xformers) and use PyTorch's SDPA", evidence, errors)
    refused = _amd_arch_outside_flash_attention(ctx, text)
    if refused is not None:
        return refused
    if re.search(r"(?i)not supported by Flash-?Attention|FlashAttention only supports|compiling for gfx", text):
        return _make("attention", "flash-attn does not support this GPU",
                     "this flash-attn build has no kernels for the GPU's arch",
                     "use PyTorch's scaled_dot_product_attention (SDPA; attn_implementation=\"sdpa\") instead of "
                     "flash-attn", evidence, errors)
    hit = _catalogue(errors)
    if hit is not None:
        return _restate("attention", hit, errors)
    # a fused-attention failure no reading above settles: PyTorch's own attention needs no extra kernel package; a
    # package that will not install on Windows is the install reading's (no Windows wheels, the platform's build)
    if on_windows(ctx, text) and re.search(r"(?i)\binstall", text):
        return None
    return _make("attention", "the fused attention kernel does not run here",
                 "the attention kernel the model asked for (flash-attn, xformers, a tool's own) is missing or not "
                 "built for this GPU", "use PyTorch's scaled_dot_product_attention: attn_implementation=\"sdpa\" "
                 "(vLLM: another attention backend, VLLM_ATTENTION_BACKEND; ComfyUI: --use-pytorch-cross-attention), "
                 "or install the kernel package built for this torch and GPU", evidence, errors, confirmed=False)


# a NaN in the first logged step, before any weight update: the trainer's first log line (learning_rate 0.0 at the
# start of warmup) or the user's "step 0" / "first step" / 第一个step beside NaN
_FIRST_STEP_NAN = re.compile(r"(?i)'grad_norm': nan\b[^\n]{0,60}'learning_rate': 0\.0\b|'learning_rate': 0\.0\b[^\n]{0,60}"
                             r"'grad_norm': nan\b|(?:\bstep ?0\b|\bfirst (?:training )?step\b|第一个 ?step|第一步|第0步)"
                             r"[^\n]{0,40}(?:\bnan\b|梯度溢出|溢出)")
# fp16 named anywhere: its overflow is the precision reading's
_FP16_SAID = re.compile(r"(?i)\bfp16\b|float16|\bhalf\b|\bamp\b|autocast")


@rule("attention")
def nan_before_any_update(ctx: Context) -> Optional[Diagnosis]:
    """Gradients NaN at the very first step of a fine-tune, in a run not in fp16: the pretrained weights, untouched
    yet, give finite values in bf16, so no divergence or learning rate explains it; the default fused attention
    (PyTorch's SDPA, whose memory-efficient kernel returns NaN for fully masked rows of padded batches) does, and
    another attention implementation is the accepted remedy (LLaMA-Factory #9631: flash_attn fa2)."""
    said = _lines_matching(ctx, _FIRST_STEP_NAN.pattern)
    text = _text_of(ctx)
    if not said or _FP16_SAID.search(text):
        return None
    lf = re.search(r"(?i)llama-?factory|llamafactory-cli", text)
    fix = ("flash_attn: fa2 in the training YAML (pip install flash-attn --no-build-isolation first), or flash_attn: "
           "eager" if lf else
           "load the model with attn_implementation=\"flash_attention_2\" (pip install flash-attn --no-build-isolation; "
           "LLaMA-Factory: flash_attn: fa2), or attn_implementation=\"eager\"")
    return _first(_make("attention", "NaN gradients at the first step: the default attention kernel",
                        "the gradients are NaN at the first step, before any update changed the pretrained weights, "
                        "in a run not in fp16: not an overflow built up by training but the default fused attention "
                        "(SDPA), whose kernel gives NaN on some padded batches",
                        "switch the attention implementation away from SDPA: " + fix + "; keep bf16", [], said,
                        confirmed=False))


# the optional flash-attention extensions a model's own code imports, and where flash-attention's sources keep them
# (Qwen's modeling code warns "import flash_attn rotary fail, please install FlashAttention rotary ...": rotary in
# csrc/rotary, rms_norm in csrc/layer_norm); the flash-attn wheel ships neither compiled kernel
_OPTIONAL_EXTENSIONS = {"rotary": "rotary", "rms_norm": "layer_norm", "layer_norm": "layer_norm",
                        "cross_entropy": "xentropy", "fused_dense": "fused_dense_lib"}
_EXTENSION_FAILED = re.compile(r"(?i)\bimport flash_?attn[ .](rotary|rms_norm|layer_norm|cross_entropy|fused_dense)\w*"
                               r" (?:fail|failed|error)|\bflash_attn\.(?:layers|ops)\.(rotary|rms_norm|layer_norm)\b"
                               r".{0,40}(?:No module|ImportError|cannot import|fail)|"
                               # said without "import" before it: "flash_attn rotary 导入失败", "flash_attn rotary import error"
                               r"\bflash_?attn[ .](rotary|rms_norm|layer_norm)\w*\s*(?:导入失败|import (?:fail\w*|error))")


@rule("attention")
def optional_extension_missing(ctx: Context) -> Optional[Diagnosis]:
    """A model's code that imports one of flash-attention's optional kernels (rotary embedding, RMS norm) and warns
    that the import failed: flash-attn is installed, but that extension is a separate build from its source tree. The
    model runs without it (slower); building it from csrc/<name> removes the warning."""
    said = _lines_matching(ctx, _EXTENSION_FAILED)
    if not said:
        return None
    found = _EXTENSION_FAILED.search(said[0].line)
    name = next(g for g in found.groups() if g).lower()
    folder = _OPTIONAL_EXTENSIONS[name]
    return _make("attention", f"flash-attention's {name} extension is not installed",
                 f"the model's code imports flash-attention's optional {name} kernel, which the flash-attn package "
                 f"does not build; the import fails and the model falls back to its slower code (a warning, not an "
                 f"error)",
                 f"build the {folder} extension from flash-attention's sources, for the flash-attn version installed: "
                 f"git clone https://github.com/Dao-AILab/flash-attention; cd flash-attention/csrc/{folder}; pip "
                 f"install . --no-build-isolation (the CUDA toolkit's nvcc must match torch's CUDA); or ignore the "
                 f"warning: only speed is lost", [], said)


# NaN / inf in a model's output (not a loss): logits, hidden states, generations, "returns NaN"
_OUTPUT_NAN = re.compile(r"(?i)\b(?:returns?|gives?|outputs?|produces?|results? in|logits?|hidden[_ ]states?|"
                         r"generat\w+|predictions?|scores?)\b[^\n]{0,40}\bnan\b|\bnan\b[^\n]{0,40}\b(?:logits?|outputs?|"
                         r"for (?:the )?padd\w+|in (?:the )?padd\w+)")
_PADDING = re.compile(r"(?i)\bpadd(?:ing|ed)\b|padding(?:=True|_side)|\bpad_token\b|attention_mask")
_SDPA = re.compile(r"(?i)\bsdpa\b|scaled_dot_product_attention|default attn|default attention")
# models whose attention soft-caps its logits (Gemma 2: attn_logit_softcapping), which SDPA cannot do; Gemma 1's
# "gemma-2b" / "gemma-2-..." sizes are told apart by what follows the 2
_SOFTCAP_MODEL = re.compile(r"(?i)\bgemma[-_ ]?2(?![\db.])|\bGemma2\w*")


@rule("attention")
def nan_output_with_padding(ctx: Context) -> Optional[Diagnosis]:
    """NaN in a model's outputs under SDPA on a padded batch, or with a model whose attention SDPA cannot compute
    (Gemma 2's logit soft-capping): the attention implementation, not the format. Sources: transformers' Gemma 2 model
    (attn_logit_softcapping, applied in its eager attention only, and its warning to use attn_implementation="eager"
    for Gemma 2); transformers' AttentionMaskConverter._unmask_unattended (SDPA's memory-efficient path returns NaN
    for fully masked rows, as left padding makes them)."""
    said = _lines_matching(ctx, _OUTPUT_NAN)
    if not said:
        return None
    text = _text_of(ctx)
    softcap = _SOFTCAP_MODEL.search(text)
    sdpa, padded = _SDPA.search(text), _PADDING.search(text)
    if not (sdpa or padded) or not (softcap or (sdpa and padded)):
        return None
    if _FP16_SAID.search(text) and not sdpa:
        return None   # a NaN in fp16 without the attention named: fp16's range (the precision reading)
    why = (f"{softcap.group(0)} soft-caps its attention logits, which only the eager attention computes; under "
           "SDPA (transformers' default) the scores are left uncapped" + (" and the padded rows come out NaN"
                                                                         if padded else "")
           if softcap else
           "PyTorch's SDPA kernels return NaN for rows whose every key is masked, as the padding rows of a batch "
           "are; the eager attention handles them")
    return _first(_make("attention", "NaN outputs from the attention implementation",
                        why,
                        "load the model with attn_implementation=\"eager\" (AutoModelForCausalLM.from_pretrained(..., "
                        "attn_implementation=\"eager\")); LLaMA-Factory: flash_attn: disabled; keep bf16 (or fp32)",
                        [], said, confirmed=bool(softcap)))


# xformers said to lack this GPU in words: no prebuilt (precompiled) binary for it, the GPU too new for it, xformers
# not supporting it ("架构过新": the architecture too new; "预编译": precompiled)
_XFORMERS_LACKS_SAID = re.compile(r"(?i)xformers[^\n]{0,120}(?:no (?:pre-?compiled|pre-?built|matching)|(?:can ?not|can't|"
                                  r"unable to|fails? to) find[^\n]{0,40}(?:binar|wheel|kernel)|not support\w*|too new|"
                                  r"预编译|不支持)|(?:too new|过新|not support\w*)[^\n]{0,80}xformers")
_NEW_GPU = re.compile(r"(?i)\bRTX ?50[5-9]0\b|\bBlackwell\b|\bsm_?12\d\b|\bB[23]00\b|架构过新|too new")


@rule("attention")
def xformers_without_the_gpu_said(ctx: Context) -> Optional[Diagnosis]:
    """A user saying, with no error line another reading classes, that xformers has no binary for their (new) GPU and
    so the trainer does not start: xformers is an optional attention kernel; PyTorch's own SDPA covers every GPU torch
    runs on. Unsloth picks its attention backend at import and, in current releases, falls back to SDPA where xformers
    and flash-attn cannot run (unslothai/unsloth#3870: upgrading unsloth and unsloth_zoo fixed an RTX 5060, sm_120,
    whose xformers wheel had no kernels)."""
    said = _lines_matching(ctx, _XFORMERS_LACKS_SAID)
    if not said or any(e.family is not None for e in ctx.errors):
        return None
    text = _text_of(ctx)
    if not (_NEW_GPU.search(text) or any(a.startswith("sm_") and int(a[3:]) >= 100
                                         for a in ctx.sheet.machine_archs if re.fullmatch(r"sm_\d+", a))):
        return None
    gpu = next((f"the {g.value} ({g.detail})" for g in ctx.sheet.of("gpu") if (g.detail or "").startswith("sm_")),
               "this GPU")
    if re.search(r"(?i)\bunsloth\b", text):
        fix = ("upgrade Unsloth and unsloth_zoo, whose current releases fall back to PyTorch's SDPA when xformers (and "
               "flash-attn) cannot run on the GPU: pip install --upgrade --force-reinstall --no-cache-dir unsloth "
               "unsloth_zoo (uv pip install the same); pip uninstall xformers if an old wheel is still picked up")
    else:
        fix = ("run without xformers and use PyTorch's SDPA (scaled_dot_product_attention): pip uninstall xformers, "
               "or the tool's switch (ComfyUI: --use-pytorch-cross-attention; A1111: drop --xformers; transformers: "
               "attn_implementation=\"sdpa\"); or install an xformers wheel built for this torch and GPU")
    return _make("attention", f"xformers has no kernels for {gpu}",
                 f"the xformers wheel installed has no precompiled kernels for {gpu} (a GPU newer than the wheel's "
                 "arch list); xformers is an optional attention kernel, and PyTorch's own SDPA runs there",
                 fix, [], said[:1], confirmed=False)


# flash-attn's compiled extension failing to load (an undefined symbol, a DLL): the line the abi reading classes
_FLASH_ATTN_LOAD = re.compile(r"(?i)flash_attn\w*\.(?:cpython\S*\.so|pyd)|importing flash_attn\w*|flash_attn_2_cuda")
# Turing by name: flash-attn 1.x runs there, 2.x does not
_TURING = re.compile(r"(?i)\bT4\b|RTX ?20\d\d|Titan RTX|Quadro RTX|\bTuring\b")


@rule("attention")
def flash_attn_broken_on_a_gpu_it_cannot_run(ctx: Context) -> Optional[Diagnosis]:
    """flash-attn's extension failing to load (built for another torch) on a GPU flash-attn has no kernels for (a
    Pascal P40, a Volta V100; Turing for flash-attn 2): rebuilding it for this torch would only reach the GPU check, so
    the fix is to remove it and let the model's code take its own attention (transformers' and remote model code
    import flash_attn only when it is installed: MiniCPM-V's maintainers told a P40 user to uninstall it, OpenBMB/
    MiniCPM-V issue 13). Ranked before the abi reading, whose rebuild cannot help here."""
    said = [e for e in ctx.errors if e.family in ("abi-mismatch", "wheel-platform") and _FLASH_ATTN_LOAD.search(e.line)]
    if not said:
        return None
    text = _text_of(ctx)
    cards = [g for g in ctx.sheet.of("gpu") if re.fullmatch(r"sm_\d+", g.detail or "")]
    named = _PRE_AMPERE.search(text)
    if cards:
        # every GPU the paste shows is below Ampere
        if any(int(g.detail[3:]) >= 80 for g in cards):
            return None
        card = f"{cards[0].value} ({cards[0].detail})"
        turing = all(g.detail == "sm_75" for g in cards)
    elif named:
        card, turing = named.group(0), bool(_TURING.fullmatch(named.group(0)))
    else:
        return None
    if turing and not re.search(r"(?i)flash_attn_2|flash[-_ ]?attn(?:[-_ =]{1,3}|\s+v?)2\.|flash[-_ ]?attention[-_ ]?2", text):
        return None   # flash-attn 1.x runs on Turing: its rebuild is the abi reading's fix
    diagnosis = _make("attention", f"flash-attn cannot run on the {card}: remove it",
                      f"flash-attn's extension does not load (built against another torch), but even rebuilt it has no "
                      f"kernels for the {card}: flash-attn 2 runs on Ampere (sm_80) and newer only",
                      "pip uninstall -y flash-attn (flash_attn too where pip lists it so): the model's code then uses its "
                      "own attention; load it with attn_implementation=\"sdpa\" (or \"eager\") where it asks for "
                      "flash_attention_2, and take the model's code from a release that does not require flash_attn",
                      [ctx.line_fact(said[0])], said)
    return _ahead_of(diagnosis, "abi-mismatch")
