"""Overrides: HSA_OVERRIDE_GFX_VERSION naming the wrong arch, or one set where the paste does not show it (a GPU
that reports another chip's target)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.facts import Fact, discrete_archs, extract_facts
from steadytune.doctor.archs import build_fix
from steadytune.doctor.fixes import override_value, rocm_index_for, set_variable
from steadytune.hardware.gpu_facts import OFFICIAL_WHEEL_ARCHS, arch_info, normalise_gfx, override_for_arch
from steadytune.doctor.rules.base import (
    _arch_fact,
    Context,
    _first,
    Diagnosis,
    _lines_matching,
    _make,
    OVERRIDE,
    rule,
    _text,
)


# ---------------------------------------------------------------------------------------------------------
# Code without this GPU's architecture, and overrides
# ---------------------------------------------------------------------------------------------------------

def _family_of(arch: str) -> str:
    base = normalise_gfx(arch)
    if base.startswith("gfx10") and len(base) == 7:   # RDNA1 (gfx101x) and RDNA2 (gfx103x) are different ISAs
        return base[:-1]
    return base[:-2] if len(base) >= 6 else base[:4]


def _target(value: str) -> Optional[str]:
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", value.strip())
    return f"gfx{m.group(1)}{m.group(2)}{int(m.group(3)):x}" if m else None


def _windows_ollama_leftover(ctx: Context) -> Optional[Diagnosis]:
    """Ollama on Windows (and the ollama-for-amd builds that ship rocBLAS per arch) refusing the GPU with an empty
    list of supported types, or while an override sits in the Windows environment: the override is what makes it
    reject the card; the Windows runner does not borrow a sibling's code the way Linux's does."""
    if not ctx.sheet.is_windows and not re.search(r"\bwsarecv\b|\.exe\b|AppData", _text(ctx)):
        return None
    if ctx.tool() != "ollama":
        return None
    empty = _lines_matching(ctx, r"amdgpu is not supported \(supported types:\s*\[\]\)|"
                                 r"(?i:amdgpu is not supported\W{1,3}supported types (?:is |are )?(?:empty|none)\b)")
    leftover = ctx.override() is not None or bool(re.search(r"(?i)system environment variables?|environment variables? "
                                                             r"(?:for|of) (?:the )?(?:system|user)|"
                                                             # told in words: "I still have it set system-wide"
                                                             + OVERRIDE + r"\b.{0,30}\bset (?:system[- ]wide|globally|"
                                                             r"in (?:the |my )?(?:user |system )?env)", _text(ctx)))
    refused = empty or ctx.of("arch-missing") or [f for f in ctx.sheet.of("complaint") if f.value == "yes"] or \
        _lines_matching(ctx, r"(?i)(?:last|latest|newer|older) version .{0,40}support|amdgpu is not supported|"
                             r"\bstopped working\b|\b(?:runs?|running|falls? back to|fell back to) (?:on )?(?:the )?CPU\b")
    arch, where = ctx.arch(ctx.errors)
    # a card whose rocBLAS AMD's Windows HIP SDK ships (RDNA2's gfx1030, RDNA3, RDNA4) said not to be detected, no
    # override in sight: it needs none, and on Windows the override only makes the runner check the card as another
    # chip; a variable left in the Windows environment from earlier tries is the usual cause, so it is the first thing
    # to remove (likelovewant/ollama-for-amd#36: "remove any HSA_OVERRIDE_GFX_VERSION set in system environment
    # variable (previous tricks)", which fixed it; #103: a 9070 XT detected once the leftover was removed, and the
    # maintainer: the override does not work on Windows)
    # lazy: imported at the top, windows_rocblas would register its rules ahead of this module's (tie order)
    from steadytune.doctor.rules.arch.windows_rocblas import _SDK_ARCHS
    unseen = _lines_matching(ctx, r"(?i)\bnot (?:be(?:ing)? )?(?:recogni[sz]ed|detected)\b|\b(?:doesn't|does not|won't|"
                                  r"can't|cannot) (?:recogni[sz]e|detect)\b") if arch in _SDK_ARCHS else []
    if not (empty or (leftover and refused) or unseen):
        return None
    if unseen and not (empty or (leftover and refused)):
        return _make("override-wrong", f"a {OVERRIDE} left in the Windows environment may hide the {arch}",
                     f"the {arch} is one whose libraries AMD's HIP SDK ships, so Ollama's ROCm runner takes it without "
                     f"any override; on Windows {OVERRIDE} does not work, and one left from earlier tries makes the "
                     "runner check the card as another chip and pass it over",
                     f"look for {OVERRIDE} in the Windows environment (System Properties > Environment Variables, "
                     f"user and system; PowerShell: [Environment]::GetEnvironmentVariable(\"{OVERRIDE}\", \"Machine\")) "
                     "and remove it, quit Ollama from the tray and start it again; if none is set, update the AMD "
                     "driver (Adrenalin) and use the Ollama build whose ROCm libraries list the card",
                     [where] if where else [], unseen, confirmed=False)
    lines = empty or _lines_matching(ctx, r"(?i)environment variable|HSA_OVERRIDE_GFX_VERSION") or []
    return _make("override-wrong", f"a {OVERRIDE} left in the Windows environment makes Ollama reject the GPU",
                 "on Windows Ollama's ROCm runner uses the rocBLAS libraries it ships for each arch; an override in "
                 "the user or system environment makes it check the GPU as another chip and turn it down",
                 f"remove {OVERRIDE} from the Windows environment (System Properties > Environment Variables, user "
                 f"and system; or in PowerShell [Environment]::SetEnvironmentVariable(\"{OVERRIDE}\", $null, "
                 "\"User\") and the same with \"Machine\" as administrator), quit Ollama from the tray and start it "
                 f"again; for {arch or 'a GPU AMD does not list'} use a build that ships its rocBLAS libraries "
                 "(ollama-for-amd)", [where] if where else [], lines, confirmed=bool(empty))


# ROCr's own complaint when the variable is set but not X.Y.Z ("Invalid HSA_OVERRIDE_GFX_VERSION format expected
# "1.2.3""), and its result: every agent reported as gfx000 (which otherwise names only the CPU agent, beside the
# GPU's own target). An empty value (docker -e NAME= , a Kubernetes env value or ConfigMap key left blank) is "set"
# to ROCr, so it is rejected the same way instead of being ignored.
_REJECTED = re.compile(r"(?i)Invalid " + OVERRIDE + r" (?:format|value)")
_GFX000 = re.compile(r"\bgfx000\b")
_EMPTY = re.compile(OVERRIDE + r"(?:=(?:\"\"|''|(?=\s)|$)|\s*:\s*(?:\"\"|''|~)?\s*$)", re.M)


def _rejected_override(ctx: Context) -> Optional[Diagnosis]:
    """The runtime rejecting the override's value (its own words, or only gfx000 left where the override is set
    empty): unset it or write X.Y.Z."""
    text = _text(ctx)
    empty = _EMPTY.search(text) or any(f.value == OVERRIDE + "=" for f in ctx.sheet.of("env"))
    said = _lines_matching(ctx, _REJECTED)
    if not said and empty and _GFX000.search(text) and not re.search(r"\bgfx(?!000\b)[1-9]\w+", text):
        said = _lines_matching(ctx, _GFX000)
    if not said:
        return None
    arch, _ = ctx.arch([])
    good = override_for_arch(arch) if arch and arch != "gfx000" else None
    value = (f", or give it a valid version ({OVERRIDE}={good} for {arch})" if good else
             f", or give it a valid X.Y.Z version ({_OVERRIDE_TABLE})")
    return _first(_make(
        "override-wrong", f"the runtime rejects {OVERRIDE}'s value" + (" (set, but empty)" if empty else ""),
        f"ROCr reads {OVERRIDE} whenever it is set" + (", even to an empty string (docker -e with no value, a "
                                                       "blank Kubernetes env value or ConfigMap key)" if empty else "")
        + "; a value that is not X.Y.Z is rejected and every GPU agent is reported as gfx000, so nothing runs on it",
        f"take the variable away: unset {OVERRIDE} in the shell, and in a container or a pod spec remove the entry "
        f"rather than leave it empty{value}; then rocminfo | grep gfx must show the card's real target", [], said))


@rule("override-wrong")
def override_wrong(ctx: Context) -> Optional[Diagnosis]:
    leftover = _windows_ollama_leftover(ctx) or _rejected_override(ctx) or _override_said_to_rename(ctx)
    if leftover is not None:
        return leftover
    # "export HSA_OVERRIDE_GFX_VERSION = 10.3.0": the shell reads three words, sets nothing ("not a valid identifier")
    # (a line that starts with the name alone is that only where the shell complained: prose writes "X = 10.3.0" too)
    spaced = re.search(r"(?m)^\W{0,3}(export\s+|set\s+)?" + OVERRIDE + r"\s+=\s*[\"']?(\d+\.\d+\.\d+)", _text(ctx))
    if spaced and (spaced.group(1) or "not a valid identifier" in _text(ctx) or "command not found" in _text(ctx)):
        lines = _lines_matching(ctx, OVERRIDE + r"\s+=|not a valid identifier")
        return _make("override-wrong", f"{OVERRIDE} was never set (spaces around =)",
                     f"a shell assignment takes no spaces around '='; written with them, the shell sets nothing (bash: "
                     f"\"not a valid identifier\"), so the runtime never sees {OVERRIDE}",
                     f"write it without spaces: export {OVERRIDE}={spaced.group(2)} (then check with echo "
                     f"${OVERRIDE} in the same shell)", [], lines)
    # a quoted message where the version belongs: a script's detection failed and wrote its error into the variable
    garbage = re.search(OVERRIDE + r"\s*:?=\s*\"([A-Za-z][^\"\n]* [^\"\n]*)\"", _text(ctx))
    if garbage:
        arch, _ = ctx.arch([])
        value = override_for_arch(arch) if arch else None
        lines = _lines_matching(ctx, OVERRIDE)
        return _make("override-wrong", f"{OVERRIDE} holds text, not a version",
                     f"{OVERRIDE} is set to \"{garbage.group(1).strip()}\" (a script's message, not a gfx version): "
                     "the runtime cannot use it",
                     (f"set it to the version for {arch}: {OVERRIDE}={value}" if value else
                      f"set it to a version (X.Y.Z) or unset it: {_OVERRIDE_TABLE}"), [], lines)
    setting = ctx.override()
    if setting is None:
        return None
    value = setting.value.split("=", 1)[1]
    symptoms = ctx.of("gpu-hang", "override-wrong", "arch-missing") + ctx.crashes()
    archs = discrete_archs(ctx.sheet)
    target = _target(value)
    tool = ctx.tool(symptoms)
    if target is None:
        # the GPU, not the gfx name the user wrote into the variable ("=gfx1030" is read as an arch too)
        # (an arch read from a GPU model the same sentence names counts: "my RX 6700 XT ... with =gfx1031")
        gpus = [a for a in archs if any(f.value == a and (f.line_no != setting.line_no or f.detail == "from the gpu")
                                        for f in ctx.sheet.of("arch"))]
        arch = gpus[0] if gpus else None
        good = override_value(arch, tool)[0] if arch else None
        written = re.fullmatch(r"(?i)gfx\w+", value.strip("\"'"))
        if not good and written and not (arch and arch in OFFICIAL_WHEEL_ARCHS):
            good = _version_of(written.group(0).lower())   # the version form of the target they meant
        return _make("override-wrong", f"{OVERRIDE}={value} is not a version",
                     f"the runtime expects X.Y.Z (10.3.0 for gfx1030 code); {value!r} is ignored or rejected",
                     set_variable(OVERRIDE, good, ctx.sheet, tool) if good else f"unset {OVERRIDE}",
                     [setting], symptoms)
    if not archs:
        return _override_in_a_deployment(ctx, setting, value)
    arch = archs[0]
    # two AMD cards of different families where the override suits only one (an RDNA2 card that needs 10.3.0 beside an
    # RDNA4 card that needs none): the plain variable renames every GPU. ROCr reads HSA_OVERRIDE_GFX_VERSION_<node>
    # for one KFD node since ROCm 6.2 (ROCT-Thunk-Interface PR 104, merged into ROCr; AMD's answer in
    # ROCm/ROCm#5069); the node is the agent's "Node:" in rocminfo (the CPU is node 0, so GPUs count from 1)
    fits = [a for a in archs if a.startswith("gfx") and _family_of(a) == _family_of(target)]
    others = [a for a in archs if a.startswith("gfx") and _family_of(a) != _family_of(target)]
    if fits and others and len(discrete_archs(ctx.sheet)) > 1:
        return _make("override-wrong", f"{OVERRIDE}={value} renames every GPU, {others[0]} too",
                     f"the machine has {', '.join(others + fits)}; the plain {OVERRIDE} applies to all of them, so "
                     f"the {others[0]} loads {target} code too and stops working, while only the {fits[0]} needs it",
                     f"set the override for the {fits[0]}'s node only (ROCm 6.2 or newer): unset {OVERRIDE} and set "
                     f"{OVERRIDE}_<node>={value}, where <node> is the {fits[0]}'s Node number in rocminfo (the CPU is "
                     f"node 0; e.g. {OVERRIDE}_2={value}); in Python set it in os.environ before torch is imported; "
                     f"the {others[0]} keeps its own target", [setting, _arch_fact(ctx, fits[0])], symptoms)
    if _family_of(arch) != _family_of(target):
        good, caveat = override_value(arch, tool)
        own = _version_of(arch)
        if arch in OFFICIAL_WHEEL_ARCHS:
            fix = f"unset {OVERRIDE}: the current wheels carry {arch} code, so it runs without any override"
        elif good:
            fix = set_variable(OVERRIDE, good, ctx.sheet, tool) + caveat
        else:
            fix = f"unset {OVERRIDE}" + (f" (or set the card's own {OVERRIDE}={own})" if own else "") + "; " + \
                (rocm_index_for(arch) if arch.startswith("gfx") else "")
        return _make("override-wrong", f"{OVERRIDE}={value} runs another family's code on {arch}",
                     f"the GPU is {arch}; {value} makes it load {target} code, a different instruction set",
                     fix, [setting, _arch_fact(ctx, arch)], symptoms)
    amd = [a for a in ctx.sheet.machine_archs if a.startswith("gfx")]
    families = {_family_of(a) for a in amd}
    if len(families) > 1 and symptoms:
        return _make("override-wrong", f"{OVERRIDE} applies to every GPU, of two families here",
                     f"the machine has {', '.join(amd)}; one override makes all of them run {target} code",
                     f"hide the other GPU (HIP_VISIBLE_DEVICES=<index of the {arch}>) or set the override per GPU: "
                     f"{OVERRIDE}_<KFD node>={value}", [setting], symptoms)
    row = arch_info(arch)
    if symptoms and row is not None and row.override.verdict == "trap" and target != arch:
        return _make("override-wrong", f"{OVERRIDE}={value} is known to fail on {arch}",
                     f"{target} code on {arch}: {row.override.why}",
                     f"unset {OVERRIDE}; {_own_code_for(arch, tool, ctx)}", [setting], symptoms)
    return None


def _own_code_for(arch: str, tool: Optional[str], ctx: Context) -> str:
    """Where code for the card itself comes from once the override is gone: the failing program's own build for it
    (Ollama's, llama.cpp's: arch_builds.yaml, its Windows form on Windows), else torch's index that carries it."""
    if ctx.sheet.is_windows and tool in _WINDOWS_HIP_SDK_PROGRAMS:
        # on Windows these load the HIP SDK's rocBLAS, whose Tensile library is per arch: the card needs its own
        return (f"a rocBLAS built for {arch}: put its rocblas.dll and rocblas\\library into the program's (or the HIP "
                f"SDK's) folder, or use a build of the program that bundles {arch} kernels")
    own = build_fix(tool, arch, windows=ctx.sheet.is_windows) if tool not in (None, "torch") else None
    return own or rocm_index_for(arch)


_WINDOWS_HIP_SDK_PROGRAMS = ("ollama", "llama.cpp", "koboldcpp", "llama-cpp-python", "whisper.cpp", "rocblas")


# where a setting outlives the machine it was written for: a pod spec, a compose file, a unit's Environment=, a
# container's -e; the GPU under it may have changed since
_DEPLOYMENT = re.compile(r"(?i)\bkubernetes\b|\bk8s\b|\bkubectl\b|\bhelm\b|\bpods?\b|\bdeployment\b|"
                         r"\bdocker[- ]compose\b|\bcompose\.ya?ml\b|^\s*environment:|Environment=|\bdocker run\b.*\s-e\s")
_TROUBLE = re.compile(r"(?i)\bproblems?\b|\bissues?\b|\bfail\w*|\berrors?\b|\bcrash\w*|\bcan(?:not|'t)\b|"
                      r"\bdoes(?:n't| not) work|\bbroken\b|\bwrong\b|\bhangs?\b|\bstuck\b")


def _override_in_a_deployment(ctx: Context, setting: Fact, value: str) -> Optional[Diagnosis]:
    """An override carried in a deployment's settings, the GPU under it not named, and the service in trouble with
    no error of another kind: an override matches one family of GPUs only, and one copied from an older machine's
    spec makes any other card run foreign code. Taking it out is the first thing to try."""
    text = _text(ctx)
    if not _DEPLOYMENT.search(text) or any(e.family not in (None, "override-wrong", "gpu-hang") for e in ctx.errors):
        return None
    trouble = _lines_matching(ctx, _TROUBLE)
    if not trouble:
        return None
    target = _target(value)
    return _make("override-wrong", f"{OVERRIDE}={value} in the deployment, for a GPU the paste does not show",
                 f"the override makes every GPU run {target or value} code; it suits that family only (RDNA2 cards "
                 "for 10.3.0, RDNA3 for 11.0.0), and a spec carried over from another machine forces it on whatever "
                 "card serves the pod now",
                 f"remove {OVERRIDE} (and any library pin left with it, such as OLLAMA_LLM_LIBRARY) from the "
                 "deployment, restart, and read the card's own target (rocminfo | grep gfx, or the server's log); set "
                 f"an override again only if that target is one the build lacks: {_OVERRIDE_TABLE}",
                 [setting], trouble[:2], confirmed=False)


def _version_of(arch: str) -> Optional[str]:
    """gfx1010 -> 10.1.0, gfx90c -> 9.0.12: the version an override names for this arch."""
    m = re.fullmatch(r"gfx(\d{1,2}?)(\d)([0-9a-f])", normalise_gfx(arch))
    return f"{int(m.group(1))}.{m.group(2)}.{int(m.group(3), 16)}" if m else None


_BUILD_TARGET = re.compile(r"(?i)\btargets?\b|\b(?:AMDGPU|GPU)_TARGETS\b|\bcmake\b|--offload-arch|PYTORCH_ROCM_ARCH")
_LISTED_PRODUCT = re.compile(r"(?i)^\s*(?:Marketing Name|Board name|Device Name)\s*:")
_LISTED_TARGET = re.compile(r"^\s*Name:\s*(gfx[0-9a-f]{3,4})\b")


def _agents_share_a_target(ctx: Context) -> Optional[Diagnosis]:
    """A runtime listing (rocminfo, clinfo) where GPUs of different chips all report one target: only an override
    in force does that, since each agent otherwise reports its own chip's ISA."""
    targets = {n: m.group(1) for n, line in enumerate(ctx.sheet.lines, 1) if (m := _LISTED_TARGET.match(line))}
    pairs = []
    for n, line in enumerate(ctx.sheet.lines, 1):
        if not targets or not _LISTED_PRODUCT.match(line):
            continue
        # each listed product read on its own (the sheet keeps a product once, and the listing repeats names)
        product = next((Fact(f.kind, f.value, n, line.strip(), f.detail) for f in extract_facts(line).of("gpu")
                        if f.detail.startswith("gfx")), None)
        near = sorted((t for t in targets if abs(t - n) <= 3), key=lambda t: abs(t - n))
        if product is not None and near:
            pairs.append((product, targets[near[0]], near[0]))
    chips = {normalise_gfx(p.detail) for p, _, _ in pairs}
    reported = {t for _, t, _ in pairs}
    if len(pairs) < 2 or len(reported) != 1 or len(chips) < 2 or ctx.override() is not None:
        return None
    target = reported.pop()
    other = next(p for p, _, _ in pairs if normalise_gfx(p.detail) != target)
    lines = [ErrorLine(n, ctx.sheet.lines[n - 1].strip(), None) for _, _, n in pairs]
    found = _make("override-wrong", f"every GPU reports {target}",
                  f"the runtime lists GPUs of different chips ({', '.join(sorted(chips))}) all as {target}; each agent "
                  f"reports its own ISA unless {OVERRIDE} is in force, which applies to every agent, so "
                  f"{other.value} runs {target} code",
                  f"unset {OVERRIDE} (look in ~/.bashrc, /etc/environment, the service unit or the container's "
                  "environment), then check rocminfo lists each GPU's own target; to keep an override for one card "
                  f"only, name it per device ({OVERRIDE}_<node>, the GPU's KFD node: the CPU is node 0, so GPUs count "
                  "from 1)", [other], lines)
    found.rank = 0   # the iGPU reading (hide it) would neither explain nor undo what reaches every agent
    return found


def _override_said_to_rename(ctx: Context) -> Optional[Diagnosis]:
    """Told in words, not a listing: an override in force and a GPU of another chip named beside the override's target
    as what it is reported as ("reports my Radeon 890M iGPU as gfx1100", "lists both as gfx1201"): the override
    applies to every agent, so that GPU runs the target's code."""
    setting = ctx.override()
    target = _target(setting.value.split("=", 1)[1]) if setting is not None else None
    if target is None:
        return None
    said = re.compile(rf"(?i)\bas {target}\b|\b{target}\b.{{0,12}}\b(?:twice|for (?:both|all|every))\b")
    for f in ctx.sheet.of("gpu"):
        if f.detail.startswith("gfx") and _family_of(f.detail) != _family_of(target) and said.search(f.line):
            found = _make("override-wrong", f"every GPU reports {target}",
                          f"{OVERRIDE}={setting.value.split('=', 1)[1]} is in force and applies to every agent, so "
                          f"{f.value} ({f.detail}) is reported as {target} and runs its code",
                          f"unset {OVERRIDE} (look in ~/.bashrc, /etc/environment, the service unit or the container's "
                          "environment), then check rocminfo lists each GPU's own target; to keep an override for one "
                          f"card only, name it per device ({OVERRIDE}_<node>, the GPU's KFD node: the CPU is node 0, so "
                          "GPUs count from 1)", [f, setting], [ErrorLine(f.line_no, f.line, None)])
            found.rank = 0   # as the listing's reading: hiding the iGPU would not undo what reaches every agent
            return found
    return None


@rule("override-hidden")
def override_hidden(ctx: Context) -> Optional[Diagnosis]:
    """The GPU reports another chip's target than its product is (an MI210 named gfx1030): an override set somewhere
    the paste does not show."""
    shared = _agents_share_a_target(ctx)
    if shared is not None:
        return shared
    products = [f for f in ctx.sheet.of("gpu") if f.detail.startswith("gfx")]
    # a card named in a library's support statement ("FlashAttention only supports AMD MI200 GPUs or newer") is no GPU
    # of this machine
    products = [p for p in products if not re.search(r"(?i)\bonly supports?\b|\bor newer\b|\bor later\b",
                                                     ctx.sheet.lines[p.line_no - 1])]
    reported = [f for f in ctx.sheet.of("arch") if f.detail == "machine"]
    # an arch said on a line that names a card of that arch belongs to that card ("Radeon R9 Fury X / Fiji gfx803"
    # beside an MI100 table is a second machine, not an override)
    reported = [arch for arch in reported if not any(
        p.line_no == arch.line_no and _family_of(p.detail) == _family_of(arch.value) for p in products)]
    # an arch named as a build's target ("ROCm 6.3's CMake adds the invalid target gfx1153", AMDGPU_TARGETS=...) is a
    # compiler's list, not the runtime naming this GPU
    reported = [arch for arch in reported if not _BUILD_TARGET.search(arch.line) and not re.search(
        r"(?i)\btarget ?id\b|\b(?:invalid|unknown|無效|无效)\W{0,3}(?:\w+\W{1,3}){0,2}target|\bcmake\b|_TARGETS\b",
        ctx.sheet.lines[arch.line_no - 1])]
    for product in products:
        for arch in reported:
            # an arch of another GPU named in the paste (a Ryzen's iGPU beside its card: rocminfo lists both) is that
            # GPU's own, not an override of this one
            if any(other is not product and _family_of(other.detail) == _family_of(arch.value) for other in products):
                continue
            if abs(product.line_no - arch.line_no) <= 3 and _family_of(product.detail) != _family_of(arch.value) \
                    and ctx.override() is None:
                symptoms = ctx.of("gpu-hang", "arch-missing", "override-wrong") + ctx.crashes()
                found = _make("override-wrong", f"{product.value} reports {arch.value}",
                              f"{product.value} is {product.detail}, but the runtime names it {arch.value}: an "
                              f"{OVERRIDE} left from another card is in force and makes it run the wrong code",
                              f"unset {OVERRIDE} (look in ~/.bashrc, /etc/environment, the service unit or the "
                              "container's environment); to keep an override for one card only, name it per device "
                              f"({OVERRIDE}_<node>, the GPU's KFD node: the CPU is node 0, so GPUs count from 1)", [product, arch], symptoms)
                return found
    return None


_OVERRIDE_TABLE = (f"{OVERRIDE}=10.3.0 for RDNA2 (gfx1031-gfx1036), {OVERRIDE}=11.0.0 for RDNA3 (gfx1101-gfx1103, "
                   f"gfx1151), {OVERRIDE}=10.1.0 for the other RDNA1 chips (gfx1011, gfx1013: gfx1010 code), "
                   f"{OVERRIDE}=9.0.0 for the Vega APUs (gfx902, gfx90c)")
