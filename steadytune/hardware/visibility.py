"""Which GPUs a process gets from the visibility variables, with the arithmetic said in words: ROCR_VISIBLE_DEVICES
filters the machine's GPUs first and the survivors are numbered again from 0; HIP_VISIBLE_DEVICES (or, when it is not
set, CUDA_VISIBLE_DEVICES, which HIP honours the same way) then indexes those survivors. So `ROCR_VISIBLE_DEVICES=1
CUDA_VISIBLE_DEVICES=1` selects nothing: ROCR leaves one GPU, numbered 0, and index 1 is past it
(mcmonkeyprojects/SwarmUI #565; ROCm/ROCR-Runtime #155: "each one will mask GPUs at their respective level").

torch's own reading (torch/cuda/__init__.py `_parse_visible_devices`) counts only ROCR's list when HIP_VISIBLE_DEVICES
is not set, so it may report a device that the HIP runtime then does not give it: the error comes later, as "No HIP
GPUs are available". Used by the error catalogue (a failed run, a pasted command line) and doctor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

LAYERS = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


@dataclass
class MaskReading:
    selected: Optional[list[str]]      # the machine's GPUs the process gets (indices or UUIDs); None: cannot tell
    problem: str = ""                  # why that is not what was meant, in words with the numbers
    fix: str = ""
    layers: dict[str, str] = field(default_factory=dict)   # the variables that are set


def entries(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def stack_masks(env: Mapping[str, str], gpu_count: Optional[int] = None) -> MaskReading:
    """What ROCR_VISIBLE_DEVICES, then HIP_VISIBLE_DEVICES (else CUDA_VISIBLE_DEVICES) leave of `gpu_count` GPUs
    (None: the machine's count is unknown; the stacking alone can still select nothing)."""
    layers = {n: env[n] for n in LAYERS if n in env}
    for name, value in layers.items():
        listed = entries(value)
        if not listed or listed[0] == "-1":
            return MaskReading([], f"{name}={value!r} hides every GPU",
                               f"unset {name}, or list the GPUs to use ({name}=0)", layers)
    rocr = layers.get("ROCR_VISIBLE_DEVICES")
    machine = [str(i) for i in range(gpu_count)] if gpu_count else None
    if rocr is not None:
        survivors = entries(rocr)
        if machine is not None:
            missing = [e for e in survivors if e.isdigit() and int(e) >= gpu_count]
            if missing and len(missing) == len(survivors):
                return MaskReading([], f"ROCR_VISIBLE_DEVICES={rocr} names GPU {','.join(missing)}, but the machine has "
                                       f"{_plural(gpu_count, 'GPU')} (0..{gpu_count - 1})",
                                   f"export ROCR_VISIBLE_DEVICES=<an index below {gpu_count}, or the card's UUID from "
                                   "rocminfo | grep Uuid>", layers)
    else:
        survivors = machine
    second_name = next((n for n in LAYERS[1:] if n in layers), None)
    if second_name is None:
        return MaskReading(survivors, layers=layers)
    second = entries(layers[second_name])
    others = [n for n in LAYERS[1:] if n in layers]
    one_layer = f"unset {' '.join(others)}"
    if survivors is None:
        return MaskReading(None, layers=layers)
    n = len(survivors)
    if rocr is not None and len(second) > n:
        return MaskReading(None, f"{second_name}={layers[second_name]} lists {_plural(len(second), 'GPU')}, but "
                                 f"ROCR_VISIBLE_DEVICES={rocr} leaves {n}",
                           f"{one_layer}; keep ROCR_VISIBLE_DEVICES={rocr} (one layer)", layers)
    picked = [survivors[int(i)] for i in second if i.isdigit() and int(i) < n]
    past = [i for i in second if i.isdigit() and int(i) >= n]
    if rocr is not None:
        left = (f"ROCR_VISIBLE_DEVICES={rocr} leaves {_plural(n, 'GPU')} (the machine's GPU{'' if n == 1 else 's'} {','.join(survivors)}), which "
                f"HIP numbers {'0' if n == 1 else f'0..{n - 1}'}")
        fix = (f"{one_layer}: ROCR_VISIBLE_DEVICES={rocr} alone gives the machine's GPU {','.join(survivors)} as "
               f"{'cuda:0' if n == 1 else f'cuda:0..{n - 1}'}; or keep both with {second_name}="
               f"{','.join(str(i) for i in range(n))}")
    else:
        left = f"the machine has {_plural(n, 'GPU')} (0..{n - 1})"
        fix = f"export {second_name}=<indices below {n}>"
    if not picked:
        return MaskReading([], f"{left}; {second_name}={layers[second_name]} then asks for index "
                               f"{','.join(past)}, past them: no GPU is left", fix, layers)
    if past:
        return MaskReading(picked, f"{left}; {second_name}={layers[second_name]} asks for index {','.join(past)}, "
                                   f"past them: it is dropped and only {','.join(picked)} remain", fix, layers)
    return MaskReading(picked, layers=layers)
