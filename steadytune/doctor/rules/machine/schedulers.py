"""GPUs a scheduler hides from a task that did not ask for them (visibility): Ray and SLURM confine each task to the
GPUs of its own request, so a task that asked for none sees none, whatever the machine, the node or the placement
group holds.

  Ray     a task or actor gets GPUs only through num_gpus (Ray's docs, "Accelerator support" / "Placement groups":
          a bundle reserves the GPU, and a task scheduled into it still gets CUDA_VISIBLE_DEVICES set to its own
          num_gpus, '' for none; ray-project/ray#50180); Ray Train asks through ScalingConfig(use_gpu=True), Tune
          through tune.with_resources, Serve through ray_actor_options
  SLURM   a job step sees the node's GPUs only through --gres=gpu:N (or --gpus / --gpus-per-node): with
          ConstrainDevices=yes in cgroup.conf a job without them is given no GPU device (Slurm's gres.conf and
          cgroup.conf docs)

Kubernetes' resource limits are the device-access reading of access/device_files (a pod without the device plugin's
GPU has no device at all).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _ahead_of, _first, _lines_matching, _make, rule, _text, _vendor

# Ray's task API in the paste: its decorator, its init, a placement group, a framework driving it
_RAY_TASKS = re.compile(r"@ray\.remote\b|\bray\.(?:init|get|remote)\b|\bray\.util\.placement_group\b|"
                        r"\bplacement_group\(|\bimport ray\b|\bray\.(?:train|tune|serve)\b|"
                        # a task's own failure as Ray reports it (ray::<actor>.<method>() in a RayTaskError, a Tune
                        # trial's error), and Ray's libraries named in prose ("using Ray Tune")
                        r"\bray::\w+|\bRayTaskError\b|\bray\.exceptions\b|(?i:\bRay (?:Tune|Train|Serve)\b)")
# a GPU asked for: Ray's own argument in any of its forms (num_gpus=1, "num_gpus": 1, {"gpu": 1}, use_gpu=True)
_RAY_ASKED = re.compile(r"\bnum_gpus\W{0,3}[:=]\s*[\"']?(?:0\.\d*[1-9]|[1-9])|\buse_gpu\s*=\s*True\b|"
                        r"[\"']gpu[\"']\s*:\s*[1-9]")
# the task's own view: no GPU, CUDA_VISIBLE_DEVICES empty or absent, device_count 0
_NONE_SEEN = re.compile(r"(?i)No (?:CUDA|HIP) GPUs are available|torch\.cuda\.is_available\(\)\W{0,20}False|"
                        r"is_available\(\)\s*(?:returns?|is|gives|==)\s*False|device_count\(\)\W{0,20}\b0\b|"
                        r"\bCUDA_VISIBLE_DEVICES\b.{0,80}(?:returns?|is|was|gives?|==|->|#)\s*(?:''|\"\"|empty|"
                        r"not set|unset|None)|(?:returns?|gives?)\s*(?:''|\"\")|\bKeyError: '(?:CUDA|HIP)_VISIBLE_DEVICES'|"
                        r"no (?:GPU|CUDA device)s? (?:found|detected|available|visible)|"
                        r"(?:doesn.t|does not|can.t|cannot|not) (?:see|find|get|use)\w* (?:the |any |a )?GPUs?\b|"
                        r"No devices were found")
# torch's check answering False on another line than the call ("# prints False", "-> False")
_FALSE_ANSWER = re.compile(r"(?i)(?:#|->|=>)\s*(?:prints?|returns?|gives?|is|=)?\s*False\b|\b(?:prints?|returns?|gives?) "
                           r"False\b")

_SLURM = re.compile(r"(?i)#SBATCH\b|\bsbatch\b|\bsrun\b|\bsalloc\b|\bslurm\b")
_SLURM_ASKED = re.compile(r"(?i)--gres[= ]\S*gpu|--gpus(?:-per-(?:node|task|socket))?[= ]|--gpus-per-node|"
                          r"\bgres\s*=\s*\S*gpu|--G\s*\d|(?<![\w-])-G\s*\d")


def _none_seen(ctx: Context, text: str) -> list:
    """The lines where the task says it has no GPU."""
    said = _lines_matching(ctx, _NONE_SEEN)
    if not said and re.search(r"is_available\(\)|device_count\(\)", text):
        said = _lines_matching(ctx, _FALSE_ANSWER)
    return said


def _ray_without_num_gpus(ctx: Context, text: str) -> Optional[Diagnosis]:
    said = _none_seen(ctx, text)
    if not (_RAY_TASKS.search(text) and said) or _RAY_ASKED.search(text):
        return None
    bundle = re.search(r"(?i)placement_group|PlacementGroupSchedulingStrategy|bundle", text)
    name = "HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES" if _vendor(ctx) == "amd" else "CUDA_VISIBLE_DEVICES"
    # ahead of the visibility variables' own reading of "No CUDA GPUs are available": Ray set the variable, not the user
    return _ahead_of(_make("visibility", "the Ray task asked for no GPU, so Ray gives it none",
                 f"Ray sets {name} in each task and actor to the GPUs that task requested with num_gpus; a task that "
                 "requests none gets an empty list and sees no GPU"
                 + ("; scheduling it into a placement group's bundle reserves the GPU but does not hand it to the task"
                    if bundle else ""),
                 ("a Tune trial gets GPUs only through its trainable's resources: tune.Tuner(tune.with_resources("
                  "trainable, {\"gpu\": 1}), ...) (each trial then holds one GPU; fractions such as 0.5 share one); "
                  if re.search(r"(?i)\btune\b|trial", text) else "")
                 + "request the GPU on the task itself: @ray.remote(num_gpus=1) (or f.options(num_gpus=1).remote(); an "
                 "actor the same)" + (", with the placement group strategy as well, num_gpus no more than the "
                                      "bundle's GPU" if bundle else "")
                 + "; Ray Train: ScalingConfig(num_workers=..., use_gpu=True); Tune: tune.with_resources(trainable, "
                 "{\"gpu\": 1}); Serve: ray_actor_options={\"num_gpus\": 1}; then ray.get_gpu_ids() in the task lists "
                 "it", [], said[:1]), "visibility")


def _slurm_without_gres(ctx: Context, text: str) -> Optional[Diagnosis]:
    said = _none_seen(ctx, text)
    if not (_SLURM.search(text) and said) or _SLURM_ASKED.search(text):
        return None
    if re.search(r"\b(?:CUDA|HIP|ROCR)_VISIBLE_DEVICES\s*=\s*[\"']?\d", text):
        return None   # a mask the job sets itself: the visibility variables' reading
    per_node = re.search(r"(?i)\b([1-8])\s*[x×]?\s*(?:GPUs|(?:A100|H100|H200|V100|MI\d{3}X?)\b)", text)
    count = per_node.group(1) if per_node else "<GPUs per node>"
    script = bool(re.search(r"(?m)^\s*#SBATCH\b", text))   # the job's own script shown: its request is known
    diagnosis = _make("visibility", "the SLURM job asked for no GPU, so it is given none",
                 "SLURM hands a job the node's GPUs only through its GPU request (--gres=gpu:N, --gpus); where the "
                 "cluster constrains devices (cgroup.conf ConstrainDevices=yes) a job without it sees no GPU and "
                 "CUDA_VISIBLE_DEVICES is left unset",
                 f"ask for the GPUs in the job: #SBATCH --gres=gpu:{count} (or --gpus-per-node={count}; the "
                 "partition's GPU type if it has several: --gres=gpu:<type>:N), and start the steps with srun inside "
                 "that allocation; nvidia-smi -L (rocm-smi) in the job then lists them", [], said[:1],
                 confirmed=script)
    return _first(diagnosis) if script else diagnosis


@rule("visibility")
def scheduler_gave_no_gpu(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the scheduler the paste drives (Ray's task API, SLURM's commands), the task's own view of the GPUs
    (none, an empty CUDA_VISIBLE_DEVICES) and whether the paste asks the scheduler for a GPU at all."""
    if any(e.family not in (None, "visibility") for e in ctx.errors):
        return None
    text = _text(ctx)
    return _ray_without_num_gpus(ctx, text) or _slurm_without_gres(ctx, text)
