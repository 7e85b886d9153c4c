"""MIOpen's kernels: its performance database, its solvers and their compiled kernels."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import (_catalogue, Context, Diagnosis, _lines_matching, _make, _restate, rule,
                                          _symptom_lines, _vendor)


# MIOpen's system performance database is one file per arch and compute-unit count (<arch>_<CUs>.cd.pdb.txt); a card
# whose CU count has no file gets the "unreadable" warning and untuned defaults. The counts MIOpen's source ships
# (src/kernels of ROCm/MIOpen: gfx803_36, gfx803_64, gfx900_64); the same arch's nearest count is the closest tuning.
_PERF_DB_UNREADABLE = re.compile(r"(?i)File is unreadable:\s*(\S*/)?(gfx\w+?)_(\d+)\.cd\.pdb\.txt")
_SHIPPED_PERF_DB = {"gfx803": (36, 64), "gfx900": (64,)}


def _perf_db_missing(ctx: Context) -> Optional[Diagnosis]:
    """MIOpen warns that the system perf-db of this arch and CU count is unreadable: none ships for this count; the
    same arch's file for the nearest count, copied under this name, gives it tuned parameters (a warning, not a
    failure)."""
    said = _lines_matching(ctx, _PERF_DB_UNREADABLE.pattern)
    if not said:
        return None
    folder, arch, cus = _PERF_DB_UNREADABLE.search(said[0].line).groups()
    folder = folder or "/opt/rocm/share/miopen/db/"
    shipped = _SHIPPED_PERF_DB.get(arch)
    if shipped:
        nearest = min(shipped, key=lambda n: abs(n - int(cus)))
        source = f"{arch}_{nearest}.cd.pdb.txt"
        how = f"sudo cp {folder}{source} {folder}{arch}_{cus}.cd.pdb.txt"
    else:
        source = f"{arch}_<the nearest CU count listed there>.cd.pdb.txt"
        how = f"ls {folder} | grep {arch}; sudo cp {folder}{source} {folder}{arch}_{cus}.cd.pdb.txt"
    return _make("miopen-kernel", f"MIOpen ships no perf-db for {arch} with {cus} CUs",
                 f"MIOpen's system performance database has one file per arch and compute-unit count; none ships for "
                 f"{arch} with {cus} CUs, so it warns and uses untuned kernel parameters (the run goes on)",
                 f"give it the same arch's tuning: {how} (the {source} file is the closest shipped); or ignore the "
                 "warning (MIOpen still runs, its user perf-db in ~/.config/miopen learns with MIOPEN_FIND_ENFORCE=3)",
                 [], said, severity="warning")


@rule("miopen-kernel")
def miopen(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: MIOpen's own errors (a kernel build, its databases, a handle), or MIOpen named beside a run that is
    slow where it should not be (its exhaustive kernel search on each new convolution shape)."""
    errors = ctx.of("miopen-kernel")
    slow = [f for f in ctx.sheet.of("complaint") if f.value == "slow"]
    if not errors and slow and re.search(r"(?i)\bMIOpen\b|\bVAE\b|\bconv(?:olution)?s?\b",
                                         "\n".join(ctx.sheet.lines)) and _vendor(ctx) == "amd":
        errors = _symptom_lines(ctx, slow[:1])
        return _make("miopen-kernel", "MIOpen searches for its convolution kernels",
                     "on AMD GPUs MIOpen benchmarks every solver the first time it meets a convolution shape (a VAE "
                     "decode has many), which is what makes the first run slow", "export MIOPEN_FIND_MODE=2 (FAST: "
                     "takes the first good solver), and keep ~/.config/miopen between runs so what it found is reused",
                     [slow[0]], errors, confirmed=False)
    perf_db = _perf_db_missing(ctx)
    if perf_db is not None:
        return perf_db
    if not errors:
        return None
    text = " ".join(e.line for e in errors)
    if re.search(r"(?i)MIOPEN_FIND_MODE", text):
        return _make("miopen-kernel", "MIOpen's search for the best kernel takes too long",
                     "in its default find mode MIOpen benchmarks every solver for each new convolution size; on large "
                     "ones (a VAE decode) that runs into the driver's timeout",
                     "export MIOPEN_FIND_MODE=2 (FAST: takes the first good solver) before starting the program",
                     [ctx.line_fact(errors[0])], errors)
    kdb = re.search(r"(?i)Missing system database file:?\s*(gfx\w+?)_\d*\.kdb", text)
    if kdb and not re.search(r"(?i)miopen.*(?:Code object build failed|Error)", text):
        return _make("miopen-kernel", f"MIOpen has no precompiled kernels for {kdb.group(1)}",
                     "a warning: MIOpen's kernel database (the .kdb of precompiled kernels) for this GPU is not "
                     "installed, so it compiles each kernel at first use: slower first runs, not a failure",
                     f"install the kernels package: sudo apt install miopen-hip-{kdb.group(1)}kdb (where the ROCm "
                     "release has one for this GPU), or leave it: the compiled kernels are cached in ~/.cache/miopen; "
                     "the error that stopped the run, if any, is another line", [ctx.line_fact(errors[0])], errors,
                     severity="warning")
    if re.search(r"(?i)could not create miopen handle", text):
        return _make("miopen-kernel", "MIOpen cannot start on this GPU",
                     "the MIOpen installed cannot create a handle: the OpenCL flavour (miopen-opencl) instead of the "
                     "HIP one that ROCm's frameworks need, or a build without this GPU",
                     "sudo apt remove miopen-opencl; sudo apt install miopen-hip (the HIP backend), and check that "
                     "its release lists this GPU", [ctx.line_fact(errors[0])], errors)
    if re.search(r"(?i)No invoker was registered|\bWas find executed\b", text):
        # MIOpen's immediate-mode convolutions need the Find step first in the same process: Find compiles the
        # solution and registers its invoker; a program that calls the convolution straight away (or reloads a
        # compiled module that ran Find in another process, apache/tvm#16154) finds none
        return _make("miopen-kernel", "a convolution called without MIOpen's Find step",
                     "MIOpen registers the invoker of a convolution when its Find step (miopenFindConvolution*Algorithm) "
                     "runs in the same process; this convolution was called without Find having run there, so no "
                     "invoker exists",
                     "call the Find step first: miopenFindConvolutionForwardAlgorithm (BackwardData / BackwardWeights "
                     "for those directions) in the same process, before miopenConvolutionForward; a framework that "
                     "skips it (a precompiled module reloaded): a release that runs Find at load (TVM: apache/tvm "
                     "PR 16190)", [ctx.line_fact(errors[0])], errors)
    hit = _catalogue(errors)
    if hit is not None and not re.search(r"naive_conv", text):
        return _restate("miopen-kernel", hit, errors)
    if re.search(r"naive_conv", text):
        return _make("miopen-kernel", "MIOpen cannot build its naive convolution kernel",
                     "MIOpen's fallback (naive) convolution solver fails to compile on this stack",
                     "export MIOPEN_DEBUG_CONV_DIRECT_NAIVE_CONV_FWD=0 MIOPEN_DEBUG_CONV_DIRECT_NAIVE_CONV_BWD=0 "
                     "MIOPEN_DEBUG_CONV_DIRECT_NAIVE_CONV_WRW=0; where the build still fails (hipRTC on a Windows or "
                     "self-built stack), export MIOPEN_FIND_MODE=2 (fast find: MIOpen takes a solution from its "
                     "database instead of compiling and timing every solver, slower kernels at times)",
                     [ctx.line_fact(errors[0])], errors)
    return _make("miopen-kernel", "MIOpen failed to build or find a kernel",
                 "MIOpen compiles kernels at first use and caches them; a stale or unwritable cache or a solver "
                 "without code for the arch fails here",
                 "rm -rf ~/.cache/miopen; export MIOPEN_USER_DB_PATH=/tmp/miopen-$USER MIOPEN_FIND_MODE=FAST; if "
                 "every solver still fails, run the convolutions without MIOpen: torch.backends.cudnn.enabled = False",
                 [ctx.line_fact(errors[0])], errors)
