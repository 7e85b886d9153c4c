"""A torch program left on the CPU, and the CUDA index the paste's own facts point at.

Three ways a paste shows that the torch under a program is the CPU build, where no other rule reads it:
- the install line itself took torch from pytorch.org's CPU index (`--index-url https://download.pytorch.org/whl/cpu`)
  and the program then runs on the CPU: settled, and the same pins go to the CUDA index that carries that release
  (torch 2.2 -> cu121, its newest; pytorch.org's previous-versions page, torch_cuda's table of labels);
- openai-whisper's own warning "FP16 is not supported on CPU; using FP32 instead": whisper loads the model on "cuda"
  when torch.cuda.is_available(), else on the CPU, and warns when fp16 is asked of the CPU (openai/whisper,
  whisper/transcribe.py); with no driver error beside it, the likely cause is a CPU torch (pip install openai-whisper
  on Windows pulls PyPI's CPU-only torch: pytorch/pytorch.github.io PR 757, PyPI's Windows wheels are the CPU build;
  checked v20);
- a torch program (openai-whisper, YOLO, a voice-conversion web UI, "pytorch: Version: 2.0.1") said in words not to
  load, invoke or use the GPU, beside an NVIDIA GPU or no GPU named at all.

The index comes from the facts, in this order: the torch release pinned on a CPU-index line (its newest CUDA index
not newer than the driver's or the user's CUDA major), nvidia-smi's CUDA, the CUDA release the user names (cu118 for
"cuda cudnn: 11.8", cu126 for "CUDA 12.6"), the GPU's compute capability, and with nothing known cu126: the build
pytorch.org still publishes for every NVIDIA GPU from Maxwell (GTX 900) to Hopper, where cu128 leaves out Maxwell and
Pascal from torch 2.8 (fixes.cuda_wheel_for); an RTX 50 (Blackwell) needs cu128. `--upgrade` (or the uninstall
before it) is what makes pip replace a CPU build of the same release: "2.0.1" is already satisfied otherwise.

Mined from dsymbol/decipher#8, raryelcostasouza/pyTranscriber#56, ultralytics/ultralytics#8869 and
RVC-Project/Retrieval-based-Voice-Conversion-WebUI#618 (round 18, r18c)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _cuda_index_for_driver, _lines_matching, _make, _text, \
    _vendor, rule
from steadytune.doctor.rules.install.torch_build import _ON_CPU
from steadytune.doctor.rules.install.torch_cuda import _TORCH_RELEASES_OF, torch_releases_of

# pip taking torch from pytorch.org's CPU index, with the releases it pinned
_CPU_INDEX_LINE = re.compile(r"(?i)\bpip3?\b[^\n]*\binstall\b[^\n]*download\.pytorch\.org/whl/cpu\b")
_PIN = re.compile(r"\b(torch|torchvision|torchaudio)==(\d+\.\d+(?:\.\d+)?)\b")
# openai-whisper's warning when the model was loaded on the CPU
_WHISPER_ON_CPU = re.compile(r"FP16 is not supported on CPU; using FP32 instead")
# the program said not to reach the GPU, beyond torch_build's wordings: "does not invoke the GPU", "cant load the gpu"
_GPU_NOT_USED = re.compile(r"(?i)\b(?:does ?n[o']?t|do ?n[o']?t|won'?t|can'?t|cant|cannot|can not|unable to|fails? to)"
                           r"\s+(?:invoke|load|use|utili[sz]e|detect|find|see)\s+(?:the\s+|my\s+|any\s+)?"
                           r"(?:gpu|graphics card)\b")
# the same said in Chinese: "GPU load: none / 0", "inference does not use the GPU", "runs only on the CPU"
_GPU_IDLE_CJK = re.compile(r"(?i)(?:GPU|显卡)\s*的?(?:负载|负荷|占用|利用率|使用率)\s*(?:为|是|都是|一直是)?\s*(?:0|零|没有|很低)|"
                           r"(?:没有?|未|不)(?:用|使用|调用)到?\s*(?:显卡|GPU)|只(?:用|使用|走|在)\s*CPU")
# torch programs: openai-whisper (not the CTranslate2 or ggml ones), YOLO, torch named itself, and the Chinese LLM
# stacks that run their models in transformers on torch (ChatGLM, Qwen, Baichuan, InternLM, Langchain-Chatchat)
_TORCH_PROGRAM = re.compile(r"(?i)\bwhisper\b|\byolo(?:v\d+)?\b|\bultralytics\b|\bpytorch\b|\btorch\b|"
                            r"chatglm\d?|\bqwen|baichuan|internlm|\btransformers\b|langchain|chatchat")
_NOT_TORCH_WHISPER = re.compile(r"(?i)faster[-_]whisper|whisperx|whisper[.-]cpp|ctranslate2|\bggml\b|\bonnx|"
                                r"llama[.-]cpp|\bollama\b|\bgguf\b|lm ?studio|\bvllm\b")
# the GPU's own driver or device failing: not the build's reading
_OTHER = ("driver", "device-access", "wsl", "visibility", "rocm-libs-missing", "platform-bios", "gpu-unsupported")


def _cuda_ceiling(ctx: Context) -> Optional[int]:
    """The CUDA major the machine runs: nvidia-smi's, else the one the user names."""
    for fact in ctx.sheet.of("cuda"):
        if re.search(r"(?i)CUDA (?:UMD )?Version:|(?<![\w/+-])cuda\b", fact.line) and not re.search(
                r"\+cu\d|whl/cu\d", fact.line):
            return int(fact.value.split(".")[0])
    return None


def _label_for_release(release: tuple[int, int], ceiling: Optional[int]) -> Optional[str]:
    """The newest pytorch.org CUDA label that carries this torch release, not of a newer CUDA major than the machine's."""
    found = None
    for label in _TORCH_RELEASES_OF:
        first, last = torch_releases_of(label)
        major = int(label[2:-1])
        if first <= release <= last and (ceiling is None or major <= ceiling):
            found = label
    return found


def _label(ctx: Context, vendor: Optional[str]) -> tuple[str, str]:
    """(label, why) from the paste's facts; cu126 with the RTX 50 note when nothing is known."""
    arch, _fact = ctx.arch()
    if vendor == "nvidia" or arch or ctx.sheet.of("cuda"):
        line = _cuda_index_for_driver(ctx, arch)
        m = re.search(r"whl/(cu\d+)(?:\s*\(([^)]*)\))?", line)
        if m:
            return m.group(1), m.group(2) or "the GPU's build"
    return "cu126", "runs on every NVIDIA GPU from the GTX 900 series to the RTX 40 series; cu128 for an RTX 50"


def _fix(label: str, why: str, pins: str = "torch torchvision torchaudio") -> str:
    return (f"in the program's own environment: pip uninstall torch torchvision torchaudio -y, then pip install "
            f"--upgrade {pins} --index-url https://download.pytorch.org/whl/{label} ({why}); python -c \"import torch; "
            f"print(torch.__version__, torch.cuda.is_available())\" must then print a +{label} version and True")


@rule("torch-build")
def torch_from_the_cpu_index(ctx: Context) -> Optional[Diagnosis]:
    """The install line shown took torch from pytorch.org's CPU index, and the program runs on the CPU."""
    installs = _lines_matching(ctx, _CPU_INDEX_LINE)
    if not installs or _vendor(ctx) == "amd" or any(e.family in _OTHER for e in ctx.errors):
        return None
    said = _lines_matching(ctx, _ON_CPU) or _lines_matching(ctx, _GPU_NOT_USED)
    if not said:
        return None
    pins = dict((name, version) for name, version in _PIN.findall(installs[0].line))
    release = re.match(r"(\d+)\.(\d+)", pins.get("torch", ""))
    label = _label_for_release((int(release.group(1)), int(release.group(2))), _cuda_ceiling(ctx)) if release else None
    if label:
        why = f"torch {pins['torch']}'s newest CUDA build"
        pinned = " ".join(f"{name}=={pins[name]}" for name in ("torch", "torchvision", "torchaudio") if name in pins)
    else:
        label, why = _label(ctx, _vendor(ctx))
        pinned = "torch torchvision torchaudio"
    return _make("torch-build", "torch was installed from pytorch.org's CPU index",
                 "the install line took torch from download.pytorch.org/whl/cpu, the CPU-only build, so the program "
                 "finds no GPU and runs on the CPU whatever GPU and driver the machine has",
                 _fix(label, why, pinned), [ctx.line_fact(installs[0])], said[:1] + installs[:1])


@rule("torch-build")
def torch_program_on_the_cpu(ctx: Context) -> Optional[Diagnosis]:
    """openai-whisper's CPU warning, or a torch program said not to use the GPU, with nothing else wrong: likely the
    CPU build of torch in the program's environment."""
    text = _text(ctx)
    vendor = _vendor(ctx)
    if vendor == "amd" or any(e.family not in (None, "precision", "torch-build") for e in ctx.errors) or ctx.crashes():
        return None
    if re.search(r"\+cu\d{3}\b", text) or any(f.detail in ("cuda", "rocm") for f in ctx.sheet.of("torch")):
        return None   # the torch shown is a GPU build: the device choice or the driver, not the build
    warned = _lines_matching(ctx, _WHISPER_ON_CPU)
    if not warned:
        if any(e.family for e in ctx.errors) or not _TORCH_PROGRAM.search(text) or _NOT_TORCH_WHISPER.search(text):
            return None
        said = _lines_matching(ctx, _GPU_NOT_USED) or _lines_matching(ctx, _ON_CPU) or \
            _lines_matching(ctx, _GPU_IDLE_CJK)
        if not said:
            return None
        # a GPU of NVIDIA, or none named at all (Windows, where pip's torch is the CPU build)
        if vendor is None and not re.search(r"(?i)\bwindows\b|\bwin ?1[01]\b|\bnvidia\b|\bcuda\b|\brtx\b|\bgtx\b", text):
            return None
    label, why = _label(ctx, vendor)
    lines = warned or said
    return _make("torch-build", "the program's torch is the CPU build",
                 ("openai-whisper warns that fp16 is not supported on the CPU when it loaded the model there: it uses "
                  "\"cuda\" whenever torch.cuda.is_available(), so " if warned else
                  "the program runs its models in torch and stays on the CPU with no driver error beside it: ") +
                 "the torch in its environment is likely the CPU-only build (pip's default on Windows, pulled in by "
                 "the program's own requirements)", _fix(label, why), [ctx.line_fact(lines[0])], lines[:1],
                 confirmed=False)
