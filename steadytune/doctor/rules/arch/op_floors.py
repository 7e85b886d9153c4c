"""DeepSpeed's ops with a compute-capability floor of their own: each op builder keeps only the targets its kernels
support (filter_ccs), and a GPU below that leaves nothing to build ("Unable to load ragged_device_ops op due to no
compute capabilities remaining after filtering"). No rebuild brings the op to the card: the inference-v2 ops behind
DeepSpeed-MII's pipeline (FastGen) need compute capability 8.0, so a T4 or a V100 runs MII's legacy path or another
engine, or the job moves to a newer GPU."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.fixes import dotted
from steadytune.doctor.rules.base import Context, Diagnosis, _first, _make, rule

# deepspeedai/DeepSpeed op_builder/*.py, filter_ccs(): the oldest major each op keeps (ragged_ops.py builds
# "ragged_device_ops", inference_cutlass_builder.py "cutlass_ops", ragged_utils.py "ragged_ops")
_OP_FLOORS = {"ragged_device_ops": 80, "cutlass_ops": 80, "fp_quantizer": 80, "evoformer_attn": 70,
              "inference_core_ops": 60, "ragged_ops": 60, "transformer_inference": 60}
# the inference-v2 ops DeepSpeed-MII's pipeline and serve (FastGen) load; MII-Legacy (mii.deploy) runs without them
# (DeepSpeed-MII README; deepspeedai/DeepSpeed-MII#273)
_MII_OPS = ("ragged_device_ops", "ragged_ops", "inference_core_ops", "cutlass_ops")
_NO_TARGETS = re.compile(r"(?i)Unable to load (\w+) op due to no compute capabilities remaining after filtering")
_ARCH_LIST = re.compile(r"TORCH_CUDA_ARCH_LIST=[\"']?([\d.;, +PTX]+)")


@rule("gpu-unsupported")
def op_below_floor(ctx: Context) -> Optional[Diagnosis]:
    errors = [e for e in ctx.of("gpu-unsupported") if _NO_TARGETS.search(e.line)]
    if not errors:
        return None
    op = _NO_TARGETS.search(errors[0].line).group(1)
    floor = _OP_FLOORS.get(op)
    arch, where = ctx.arch(errors)
    cc = int(arch[3:]) if arch and re.fullmatch(r"sm_\d{2,3}", arch) else None
    listed = _ARCH_LIST.search("\n".join(ctx.sheet.lines))
    gpu = next((g.value for g in ctx.sheet.of("gpu") if g.detail == arch), None) if arch else None
    card = f"the {gpu} ({dotted(cc)})" if gpu and cc else f"compute capability {dotted(cc)}" if cc else "this GPU"
    if floor is None:
        return None
    if listed and (cc is None or cc >= floor):
        # the targets were given by hand and all fall under the floor: the GPU itself may be fine
        return _first(_make("gpu-unsupported", f"TORCH_CUDA_ARCH_LIST leaves {op} nothing to build",
                            f"DeepSpeed builds {op} only for compute capability {dotted(floor)} and newer; "
                            f"TORCH_CUDA_ARCH_LIST={listed.group(1).strip()} names none of them",
                            f"set TORCH_CUDA_ARCH_LIST to the GPU's own capability{' (' + dotted(cc) + ')' if cc else ''} "
                            f"(or unset it so DeepSpeed reads the GPU) and build again",
                            [f for f in (where, ctx.line_fact(errors[0])) if f], errors))
    other = ("; for DeepSpeed-MII, its pipeline and server (FastGen, inference v2) need these ops: on this GPU use "
             "MII-Legacy (mii.deploy, deepspeed-mii's legacy API, which runs older GPUs) or another engine "
             "(vLLM, transformers)" if op in _MII_OPS else "")
    return _first(_make("gpu-unsupported", f"DeepSpeed's {op} needs compute capability {dotted(floor)} or newer",
                        f"DeepSpeed's {op} op builder keeps only compute capability {dotted(floor)} and newer (its "
                        f"kernels use instructions older GPUs lack); {card} is below that, so no target is left",
                        f"run it on a GPU of compute capability {dotted(floor)} or newer (A100, A10G, L4, RTX 30/40 "
                        f"series for 8.0+){other}; no build of {op} runs on {card}",
                        [f for f in (where, ctx.line_fact(errors[0])) if f], errors))
