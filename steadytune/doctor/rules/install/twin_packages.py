"""Two distributions of one import module installed side by side: a package's CPU build and its GPU build both install
the same module (onnxruntime and onnxruntime-gpu both install `onnxruntime`), so whichever was installed last owns the
files, and the GPU build's providers go missing. A listing that shows both, with the program left on the CPU, is this
reading, and so is the user's word that both are installed ("I had installed both onnxruntime and onnxruntime-gpu");
the fix keeps one of them.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


# (the CPU distribution, its GPU twins, the module they share, source)
_TWINS = (
    ("onnxruntime", ("onnxruntime-gpu", "onnxruntime-directml", "onnxruntime-rocm", "onnxruntime-openvino"),
     "onnxruntime",
     "onnxruntime.ai install docs: the onnxruntime packages share one module, only one of them should be installed in "
     "an environment"),
    ("paddlepaddle", ("paddlepaddle-gpu",), "paddle",
     "PaddlePaddle pip install docs: uninstall the CPU paddlepaddle before installing paddlepaddle-gpu (one module, "
     "paddle)"),
)

# the program left on the CPU: onnxruntime's providers, get_device(), or the words
_ON_CPU = re.compile(r"(?i)\bonly (?:the )?CPU(?:ExecutionProvider)?\b|\bCPUExecutionProvider\b|get_device\(\)|"
                     r"\b(?:runs?|running|ran) (?:only )?on (?:the )?CPU\b|\bnot (?:running|run|using|use) (?:on )?"
                     r"(?:the )?GPU\b|CUDAExecutionProvider.{0,40}(?:not|unavailable|missing)|is_compiled_with_cuda\(\)"
                     r"\W{0,20}False")


def _listed(name: str) -> re.Pattern:
    """`name` shown as installed with a version: pip list ("onnxruntime      1.2.0", its column padded), pip freeze ("onnxruntime==1.2.0"),
    a user's list ("onnxruntime - 1.2.0"), pip's "Successfully installed onnxruntime-1.2.0". A twin's longer name
    ("onnxruntime-gpu 1.2.0") is not the shorter one's listing: a version must follow the name."""
    return re.compile(rf"(?i)(?<![\w-]){re.escape(name)}(?:\s{{0,3}}(?:==|:|-)\s{{0,3}}|[ \t]{{1,30}})v?\d+\.\d+")


def _said_together(cpu: str, gpu: str) -> re.Pattern:
    """The user saying both are installed, with no listing: "I had installed both onnxruntime and onnxruntime-gpu",
    "paddlepaddle-gpu and paddlepaddle are both installed"."""
    a, b = re.escape(cpu), re.escape(gpu)
    pair = rf"(?:{a}(?![\w-])\W{{1,5}}(?:and|&|\+)\W{{1,5}}{b}|{b}\W{{1,5}}(?:and|&|\+)\W{{1,5}}{a}(?![\w-]))"
    return re.compile(rf"(?i)\b(?:install\w*|ha(?:ve|d|s))\s+(?:\w+\s+)?both\s+{pair}|{pair}\W{{0,3}}(?:are|were)\s+"
                      rf"(?:both\s+)?installed\b|\bboth\s+{pair}\W{{0,3}}(?:are|were)?\s*installed\b")


@rule("wheel-platform")
def cpu_and_gpu_builds_installed_together(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    lower = text.lower()
    for cpu, gpus, module, _source in _TWINS:
        if cpu not in lower:
            continue
        said = next((g for g in gpus if g in lower and _said_together(cpu, g).search(text)), None)
        gpu = said or (next((g for g in gpus if g in lower and _listed(g).search(text)), None)
                       if _listed(cpu).search(text) else None)
        if gpu is None:
            continue
        if not _ON_CPU.search(text):   # the whole text: a REPL's answer comes on the line after its call
            continue
        symptom = _lines_matching(ctx, _ON_CPU) or _lines_matching(ctx, r"is_compiled_with_cuda")
        listed = _lines_matching(ctx, _said_together(cpu, gpu)) if said else _lines_matching(ctx, _listed(cpu))
        return _make("wheel-platform", f"{cpu} and {gpu} are installed together",
                     f"{cpu} (the CPU build) and {gpu} both install the {module} module; with both installed one "
                     f"overwrites the other's files, and the program gets the CPU build's providers only",
                     f"uninstall {cpu} (the CPU build) and keep only {gpu}, which carries the CPU provider too; "
                     f"since both share the {module} folder, remove both and reinstall the GPU one: pip uninstall -y "
                     f"{cpu} {gpu}; pip install {gpu} (check that nothing in your requirements pulls {cpu} back)",
                     [ctx.line_fact(listed[0]), ctx.line_fact(symptom[0])], listed[:1] + symptom[:1])
    return None


# A package extra that names the CPU twin: optimum's extras come in pairs (setup.py: "exporters" pulls onnxruntime,
# "exporters-gpu" onnxruntime-gpu; "onnxruntime" / "onnxruntime-gpu" likewise), so adding a CPU-side extra after the
# GPU one installs onnxruntime over onnxruntime-gpu's files and the CUDA provider goes missing.
# (the extra as installed, its GPU counterpart)
_EXTRA_TWINS = {
    "optimum": {"exporters": "exporters-gpu", "onnxruntime": "onnxruntime-gpu"},
}
_EXTRAS = re.compile(r"(?i)\b(optimum)\[([\w,\s-]+)\]")
_PROVIDERS_GONE = re.compile(r"(?i)\bproviders?\b.{0,40}\b(?:gone|missing|disappear\w*|lost|not (?:available|there|listed)"
                             r")|CUDAExecutionProvider.{0,60}(?:not|unavailable|missing|gone)|\bonly (?:the )?"
                             r"CPU(?:ExecutionProvider)?\b|\bruns? on (?:the )?CPU\b")


@rule("torch-build")
def extra_pulls_the_cpu_twin(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    asked: dict[str, set[str]] = {}
    for m in _EXTRAS.finditer(text):
        asked.setdefault(m.group(1).lower(), set()).update(e.strip().lower() for e in m.group(2).split(","))
    for package, extras in asked.items():
        pairs = _EXTRA_TWINS.get(package, {})
        cpu_side = sorted(e for e in extras if e in pairs)
        gpu_side = {e for e in extras if e in pairs.values()}
        if not (cpu_side and gpu_side) or not _PROVIDERS_GONE.search(text):
            continue
        lines = _lines_matching(ctx, rf"(?i)\b{package}\[[^\]]*\b{re.escape(cpu_side[0])}\b(?!-gpu)")
        symptom = _lines_matching(ctx, _PROVIDERS_GONE)
        wanted = sorted(gpu_side | {pairs[e] for e in cpu_side})
        return _make("torch-build", f"{package}[{cpu_side[0]}] installs the CPU onnxruntime over onnxruntime-gpu",
                     f"{package}'s extra {cpu_side[0]} depends on onnxruntime, the CPU build; installed after "
                     "onnxruntime-gpu it overwrites the shared onnxruntime module, so the CUDA provider is gone",
                     f"install every extra in its GPU form: pip uninstall -y onnxruntime onnxruntime-gpu; pip install "
                     f"\"{package}[{','.join(wanted)}]\" (check that pip list shows onnxruntime-gpu and no onnxruntime)",
                     [ctx.line_fact(l) for l in (lines[:1] + symptom[:1])], lines[:1] + symptom[:1])
    return None


# onnxruntime-genai: one import module (onnxruntime_genai) from onnxruntime-genai (CPU), onnxruntime-genai-cuda and
# onnxruntime-genai-directml; "Unknown provider type: dml" is the model's genai_config asking for a provider the
# imported build does not have: the plain package is the one installed (or installed last)
_GENAI_PROVIDER = re.compile(r"(?i)Unknown provider type:?\s*['\"]?(dml|cuda)\b")
_GENAI_PACKAGE = {"dml": "onnxruntime-genai-directml", "cuda": "onnxruntime-genai-cuda"}


@rule("torch-build")
def genai_build_without_the_provider(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _GENAI_PROVIDER)
    if not lines or not re.search(r"(?i)onnxruntime[-_]genai|\bog\.Model\b|phi-?3\S*onnx|genai_config", _text(ctx)):
        return None
    provider = _GENAI_PROVIDER.search(lines[0].line).group(1).lower()
    package = _GENAI_PACKAGE[provider]
    return _make("torch-build", f"the onnxruntime-genai imported has no {provider} provider",
                 f"the model asks for the {provider} provider, which only {package} carries; onnxruntime-genai "
                 f"(the CPU build) installs the same onnxruntime_genai module, so where both are installed (or the "
                 "plain one alone) the import gets a build without it",
                 f"pip uninstall onnxruntime-genai {package} (both share the onnxruntime_genai folder), then pip "
                 f"install {package} alone; pip list must show no plain onnxruntime-genai"
                 + (" (and og.is_dml_available() must print True)" if provider == "dml" else ""),
                 [ctx.line_fact(lines[0])], lines[:1])
