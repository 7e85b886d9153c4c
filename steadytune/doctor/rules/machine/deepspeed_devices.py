"""The deepspeed launcher dropping CUDA_VISIBLE_DEVICES (env-not-applied): its runner turns CUDA_VISIBLE_DEVICES into
--include localhost:<list> only when none of --include / --exclude / --num_gpus / --num_nodes is given; with one of
them it prints "Detected CUDA_VISIBLE_DEVICES=... but ignoring it" and deletes the variable, so the job runs on GPU 0,
1, ... instead of the chosen ones. The user's own command passing such a flag: drop it, or say the GPUs with --include.
No such flag in the user's command: a wrapper passed it -- accelerate launch's DeepSpeed path always passed --num_gpus
before accelerate 0.13.0.

Sources: deepspeed/launcher/runner.py (the message, and args.include = f"localhost:{cuda_visible_devices}" when no
filter is given; newer releases say "Detected VISIBLE_DEVICES="); huggingface/accelerate#663 (fixed by accelerate PR
#626, confirmed by upgrading to accelerate 0.13.0)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule

_IGNORED = re.compile(r"(?i)Detected (?:CUDA_|HIP_)?VISIBLE_DEVICES=(\S+?),? but ignoring it because")
_OWN_FLAG = re.compile(r"(?i)\b(?:deepspeed|ds)\b[^\n]*?(--(?:num_gpus|num_nodes|include|exclude)\b[=\s]?\S*)")


@rule("env-not-applied")
def deepspeed_drops_visible_devices(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the deepspeed runner's own "but ignoring it" line; the user's command (or its absence) picks the fix."""
    said = _lines_matching(ctx, _IGNORED)
    if not said:
        return None
    text = _text(ctx)
    ids = _IGNORED.search(text).group(1).rstrip(",")
    include = f"--include localhost:{ids}"
    own = _OWN_FLAG.search(text)
    if own:
        fix = (f"drop {own.group(1).strip()} from the deepspeed command and say the GPUs with deepspeed's own filter: "
               f"deepspeed {include} <script> (or keep CUDA_VISIBLE_DEVICES={ids} with none of --include / --exclude / "
               "--num_gpus / --num_nodes)")
    else:
        fix = (f"a wrapper passed one of those flags: accelerate launch's DeepSpeed path always passed --num_gpus "
               f"before accelerate 0.13.0, so upgrade it (pip install -U \"accelerate>=0.13.0\") and launch again with "
               f"CUDA_VISIBLE_DEVICES={ids}; or run deepspeed yourself with {include}")
    return _first(_make(
        "env-not-applied", "the deepspeed launcher discards CUDA_VISIBLE_DEVICES",
        f"the deepspeed runner honours CUDA_VISIBLE_DEVICES={ids} only when none of --include / --exclude / --num_gpus "
        "/ --num_nodes is passed; one was, so it deleted the variable and places the ranks on GPU 0, 1, ...",
        fix, [], said[:1]))
