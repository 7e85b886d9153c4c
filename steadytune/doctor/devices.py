"""Which GPUs a process gets, from the visibility variables and the machine's cards, live and for saved outputs alike:
ROCR_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES stacked so that nothing is left (ROCR filters first and re-indexes from
0, so `ROCR=1 HIP=1` selects no GPU: unslothai/unsloth #6118, #6175; mcmonkeyprojects/SwarmUI #565), an integrated
GPU enumerated first that the wheel has no code for ('device kernel image is invalid': unslothai/unsloth #7669,
#7776; ROCm/TheRock #3392), and mixed cards where one needs HSA_OVERRIDE_GFX_VERSION and the other must not have it:
the override then goes per KFD node, HSA_OVERRIDE_GFX_VERSION_<node> (libhsakmt topology.c reads it before the plain
variable; the CPU is node 0, so GPUs count from 1: tkamucheka.github.io, "Running Ollama on Mixed AMD GPUs").

A card here is anything with index, arch, integrated, uuid and kfd_node attributes (a GpuRecord from saved outputs,
or `Card` for the live machine's KFD topology).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

from steadytune.doctor.findings import Finding
from steadytune.hardware.gpu_facts import arch_info, normalise_gfx, override_for_arch

VISIBILITY = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")


@dataclass
class Card:
    index: int
    arch: Optional[str]
    kfd_node: Optional[int] = None
    uuid: Optional[str] = None
    integrated: bool = False
    name: Optional[str] = None


def visible_list(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _label(card) -> str:
    return f"GPU {card.index}" + (f" ({card.arch})" if getattr(card, "arch", None) else "")


def _select(cards: Sequence, value: str) -> str:
    """A ROCR_VISIBLE_DEVICES value that selects these cards: their UUIDs where known (stable across reboots and the
    same at every layer), else their indices."""
    uuids = [c.uuid for c in cards if c.uuid and c.uuid.startswith("GPU-") and not c.uuid.endswith("XX")]
    return ",".join(uuids) if len(uuids) == len(cards) else value


def visibility_findings(env: Mapping[str, str], flavour: str, cards: Sequence = ()) -> list[Finding]:
    """Rows 6-7 of research/rocm.md: the visibility variables, how they stack, and what is left of `cards`."""
    findings: list[Finding] = []
    set_vars = {n: env[n] for n in VISIBILITY if n in env}
    if not set_vars:
        return findings
    findings.append(Finding.info("visibility", "set: " + ", ".join(f"{k}={v!r}" for k, v in set_vars.items())))
    for name, value in set_vars.items():
        entries = visible_list(value)
        if not entries or entries[0] == "-1":
            findings.append(Finding.warn("visibility", f"{name}={value!r} hides every GPU", "training would run on the CPU",
                                         f"unset {name}, or list the GPUs to use (e.g. {name}=0)"))
    rocr, hip, cuda = (set_vars.get(n) for n in VISIBILITY[:3])
    if flavour == "rocm":
        if rocr is not None and (hip is not None or cuda is not None):
            findings += _stacked(rocr, hip, cuda, cards)
        if hip is not None and cuda is not None and visible_list(hip) != visible_list(cuda):
            findings.append(Finding.warn("visibility", f"HIP_VISIBLE_DEVICES={hip!r} and CUDA_VISIBLE_DEVICES={cuda!r} disagree",
                                         "on ROCm torch uses HIP_VISIBLE_DEVICES and ignores CUDA_VISIBLE_DEVICES",
                                         "export HIP_VISIBLE_DEVICES only"))
        elif cuda is not None and hip is None and rocr is None:
            findings.append(Finding.info("visibility", "CUDA_VISIBLE_DEVICES is set on ROCm",
                                         "HIP honours it today, but newer HIP docs list only HIP_VISIBLE_DEVICES",
                                         f"export HIP_VISIBLE_DEVICES={cuda}"))
    elif flavour == "cuda" and (rocr is not None or hip is not None):
        findings.append(Finding.info("visibility", "ROCR/HIP_VISIBLE_DEVICES are ignored by a CUDA build of torch",
                                     fix="use CUDA_VISIBLE_DEVICES on NVIDIA"))
    return findings


def _stacked(rocr: str, hip: Optional[str], cuda: Optional[str], cards: Sequence) -> list[Finding]:
    """ROCR_VISIBLE_DEVICES with HIP_ (or CUDA_) VISIBLE_DEVICES: ROCR filters, HIP then counts from 0 among what is left."""
    second_name = "HIP_VISIBLE_DEVICES" if hip is not None else "CUDA_VISIBLE_DEVICES"
    second = visible_list(hip if hip is not None else cuda or "")
    first = visible_list(rocr)
    wanted = ",".join(first)
    by_index = {str(c.index): c for c in cards}
    chosen = [by_index[i] for i in first if i in by_index]
    one_layer = (f"unset {second_name}{' CUDA_VISIBLE_DEVICES' if hip is not None and cuda is not None else ''}; "
                 f"export ROCR_VISIBLE_DEVICES={_select(chosen, wanted) if len(chosen) == len(first) else wanted}   "
                 "(one layer: HIP then numbers the chosen GPUs from 0)")
    if len(second) > len(first):
        return [Finding.error(
            "visibility", f"{second_name} lists {len(second)} devices but ROCR_VISIBLE_DEVICES only {len(first)}",
            "ROCR filters first and HIP indexes what is left; torch raises "
            "'HIP_VISIBLE_DEVICES contains more devices than ROCR_VISIBLE_DEVICES'.", one_layer)]
    out_of_range = [i for i in second if i.isdigit() and int(i) >= len(first)]
    if out_of_range:
        return [Finding.error(
            "visibility", f"ROCR_VISIBLE_DEVICES={rocr!r} then {second_name}={','.join(second)!r} selects no GPU: after "
                          f"ROCR's filter the GPUs are numbered 0..{len(first) - 1}, and {','.join(out_of_range)} is past them",
            "the two layers stack; the same index at both (what a launcher does when it copies one value into every "
            "variable) hides the card: torch.cuda.is_available() is False and training falls back to the CPU "
            "(unslothai/unsloth #6118, #6175); the first GPU call raises 'No HIP GPUs are available'", one_layer)]
    effective = [first[int(i)] for i in second if i.isdigit() and int(i) < len(first)]
    return [Finding.warn(
        "visibility", f"two visibility layers set: ROCR_VISIBLE_DEVICES={rocr!r} then {second_name}={','.join(second)!r}"
                      f" -> physical devices {effective}",
        "ROCR is applied first, HIP re-indexes the survivors; launchers (Ray, verl) refuse this mix.",
        "set one layer only")]


def igpu_shadow(cards: Sequence, wheel_archs: Optional[Iterable[str]] = None) -> Optional[tuple[str, str, str]]:
    """Row 5, when GPU 0 is integrated and a discrete GPU follows: -> (what, why, fix) with this machine's values."""
    if not (cards and cards[0].integrated and any(not c.integrated for c in cards)):
        return None
    discrete = [c for c in cards if not c.integrated]
    igpu = cards[0]
    indices = ",".join(str(c.index) for c in discrete)
    why = "tools that take device 0 (and every rank of a multi-GPU launch) would run on the iGPU"
    archs = {normalise_gfx(a) for a in wheel_archs} if wheel_archs is not None else None
    if archs is not None and igpu.arch and normalise_gfx(igpu.arch) not in archs:
        why += (f"; this torch has no code for {igpu.arch}, so work placed there fails with 'device kernel image is "
                "invalid' (hipErrorInvalidImage; unslothai/unsloth #7669, ROCm/TheRock #3392)")
    selector = _select(discrete, indices)
    fix = f"export HIP_VISIBLE_DEVICES={indices}"
    if selector != indices:
        fix = f"export ROCR_VISIBLE_DEVICES={selector}   (by UUID: the same cards at every layer; or HIP_VISIBLE_DEVICES={indices})"
    else:
        fix += "   (or ROCR_VISIBLE_DEVICES=<dGPU UUID>: rocminfo | grep -m4 Uuid)"
    return f"GPU 0 is an integrated GPU ({getattr(igpu, 'name', None) or '?'}, {igpu.arch}); the discrete GPU is {indices}", why, fix


def _override_value(arch: str) -> Optional[str]:
    return override_for_arch(arch)


def _node_of(card, position: int) -> tuple[int, bool]:
    """(KFD node, known?): the card's own, else its position + 1 (the CPU is node 0 on one-socket machines)."""
    node = getattr(card, "kfd_node", None)
    return (node, True) if node is not None else (position + 1, False)


def mixed_arch_findings(env: Mapping[str, str], cards: Sequence, wheel_archs: Iterable[str],
                        check: str = "hsa-override") -> list[Finding]:
    """Mixed cards: some run the wheel's code natively, others only under an HSA override. A plain
    HSA_OVERRIDE_GFX_VERSION changes them all; the per-node form changes one."""
    archs = {normalise_gfx(a) for a in wheel_archs}
    amd = [c for c in cards if c.arch and c.arch.startswith("gfx") and not c.integrated]
    if len({normalise_gfx(c.arch) for c in amd}) < 2:
        return []
    native = [c for c in amd if normalise_gfx(c.arch) in archs]
    needing = [(c, _override_value(c.arch)) for c in amd if normalise_gfx(c.arch) not in archs]
    needing = [(c, v) for c, v in needing if v]
    if not native or not needing:
        return []
    nodes = {id(c): _node_of(c, i) for i, c in enumerate(amd)}
    per_node = " ".join(f"HSA_OVERRIDE_GFX_VERSION_{nodes[id(c)][0]}={v}" for c, v in needing)
    guessed = [c for c, _ in needing if not nodes[id(c)][1]]
    check_nodes = ("   (node numbers guessed as GPU index + 1, the CPU being node 0: check with "
                   "rocminfo | grep -E '^  (Name|Node):')") if guessed else ""
    hide = _select(native, ",".join(str(c.index) for c in native))
    native_text = ", ".join(_label(c) for c in native)
    needing_text = ", ".join(f"{_label(c)} needs {v}" for c, v in needing)
    plain = env.get("HSA_OVERRIDE_GFX_VERSION")
    if plain:
        return [Finding.error(check, f"HSA_OVERRIDE_GFX_VERSION={plain} applies to every GPU: {native_text} would run "
                                     f"{_override_target(plain)} code instead of its own",
                              f"a mixed machine ({needing_text}; the wheel has {native_text}'s code): the other cards fail "
                              "with HSA_STATUS_ERROR_INVALID_ISA or 'invalid device function'",
                              f"unset HSA_OVERRIDE_GFX_VERSION; export {per_node}{check_nodes}; or train on "
                              f"{native_text} alone: export ROCR_VISIBLE_DEVICES={hide}")]
    if all(f"HSA_OVERRIDE_GFX_VERSION_{nodes[id(c)][0]}" in env for c, _ in needing):
        return [Finding.info(check, f"mixed cards with per-node overrides set: {needing_text}; {native_text} run natively")]
    return [Finding.warn(check, f"mixed cards: {needing_text} (this torch has no code for it), {native_text} "
                                f"run{'s' if len(native) == 1 else ''} natively",
                         "a plain HSA_OVERRIDE_GFX_VERSION would change every card, breaking the native ones; without "
                         "one the others fail with 'invalid device function'",
                         f"export {per_node}{check_nodes} (per KFD node); or use only {native_text}: "
                         f"export ROCR_VISIBLE_DEVICES={hide}")]


def _override_target(value: str) -> str:
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", value.strip())
    return f"gfx{match.group(1)}{match.group(2)}{int(match.group(3)):x}" if match else value


def is_apu(arch: Optional[str]) -> bool:
    row = arch_info(arch)
    return bool(row and row.kind == "apu")


# A saved environment: `env | grep ...`, `export NAME=value` or `declare -x NAME="value"` lines.
_ENV_LINE = re.compile(r"^(?:export\s+|declare -x\s+)?([A-Z_][A-Z0-9_]*)=(.*)$")
_ENV_PROMPT = re.compile(r"^\S*[$#]\s+(?:env|printenv|export|set)\b")
RELEVANT_ENV = re.compile(r"^(ROCR_|HIP_|CUDA_VISIBLE|GPU_DEVICE_ORDINAL|HSA_|NCCL_|RCCL_|TORCH_ROCM_|PYTORCH_|BNB_|"
                          r"TORCH_NCCL|AMD_)")


def parse_env_lines(text: str) -> dict[str, str]:
    """The relevant variables of a saved environment; {} unless every line is a variable (or the prompt)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or _ENV_PROMPT.match(line):
            continue
        match = _ENV_LINE.match(line)
        if not match:
            return {}
        if RELEVANT_ENV.match(match.group(1)):
            found[match.group(1)] = match.group(2).strip().strip("'\"")
    return found


def saved_override_findings(env: Mapping[str, str], cards: Sequence, wheel_archs: Iterable[str],
                            check: str = "hsa-override") -> list[Finding]:
    """HSA_OVERRIDE_GFX_VERSION in a saved environment against the saved cards: mixed cards (per-node fix), an
    override the cards do not need, one from another family."""
    findings = mixed_arch_findings(env, cards, wheel_archs, check)
    value = env.get("HSA_OVERRIDE_GFX_VERSION")
    if findings or not value:
        return findings
    archs = {normalise_gfx(a) for a in wheel_archs}
    target = _override_target(value)
    for card in [c for c in cards if c.arch and c.arch.startswith("gfx")]:
        arch = normalise_gfx(card.arch)
        if not re.fullmatch(r"gfx[0-9a-f]+", target):
            findings.append(Finding.error(check, f"HSA_OVERRIDE_GFX_VERSION={value!r} is not in the form X.Y.Z",
                                          "ROCr ignores a malformed override", "unset it"))
        elif arch in archs:
            findings.append(Finding.warn(check, f"HSA_OVERRIDE_GFX_VERSION={value} is set, but {_label(card)} runs the "
                                                "wheel's own code",
                                         f"the override makes it report {target}; it is a workaround for cards the wheel "
                                         "lacks, and a trap when it names another chip", "unset HSA_OVERRIDE_GFX_VERSION"))
        break
    return findings


def per_node_overrides(cards: Sequence, wheel_archs: Iterable[str]) -> dict[int, str]:
    """On a mixed machine, card index -> the per-node variable name its override must use
    (HSA_OVERRIDE_GFX_VERSION_<node>); {} when the plain variable is safe (every card the same arch)."""
    archs = {normalise_gfx(a) for a in wheel_archs}
    amd = [c for c in cards if c.arch and c.arch.startswith("gfx") and not c.integrated]
    if len({normalise_gfx(c.arch) for c in amd}) < 2 or not any(normalise_gfx(c.arch) in archs for c in amd):
        return {}
    return {c.index: f"HSA_OVERRIDE_GFX_VERSION_{_node_of(c, i)[0]}" for i, c in enumerate(amd)
            if normalise_gfx(c.arch) not in archs}


def use_per_node(findings: list[Finding], variable: Optional[str]) -> list[Finding]:
    """Rewrite 'export HSA_OVERRIDE_GFX_VERSION=' in these findings' fixes to the card's per-node variable."""
    if not variable:
        return findings
    for f in findings:
        f.fix = f.fix.replace("export HSA_OVERRIDE_GFX_VERSION=", f"export {variable}=")
    return findings
