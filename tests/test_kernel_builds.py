"""Every Triton kernel steadytune ships, compiled for every target without a GPU (issue 62: the interpreter stays for
numerics, the compiler decides what ships; issue 64: what builds decides what runs on each AMD arch).

The catalogue (steadytune/model/kernel_catalogue.py) lists each @triton.jit kernel with its signature and the
configurations its launcher can choose on each arch; model/kernel_builds.py compiles them with
`triton.compile(ASTSource(...), target=GPUTarget(...))` for sm_80, sm_90, gfx90a, gfx942, gfx950, gfx1100, gfx1151 and
gfx1201. One test per target (pytest-xdist spreads them over the cores; Triton's cache is empty on CI: ~25 s of CPU
a target): every configuration whose feature runs there builds, none spills registers to memory (NVIDIA: unless a
GPU measurement chose it with the spill), none overflows the LDS, and the committed record
(steadytune/model/kernel_builds.json, which refuses features before a run starts and fills docs/rocm.md's resource
table) is what compiles today."""

from __future__ import annotations

import ast
import importlib
import os
import textwrap
from pathlib import Path

import pytest

from steadytune.model import kernel_builds as kb
from steadytune.model.kernel_catalogue import (
    AMD_TARGETS,
    FEATURES,
    HASH_CONSTANTS,
    KERNELS,
    LDS_LIMIT,
    SPILL_MEASURED,
    TARGETS,
    Config,
    Kernel,
    _args,
    attention_blocks,
    family,
    fp8_format,
    grouped_blocks,
    kernels_of,
)

ROOT = Path(__file__).resolve().parents[1]
triton_missing = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                    reason="Triton is not installed (CPU torch wheels do not bring it; the dev extra "
                                           "does on Linux)")


def jit_functions() -> dict[tuple[str, str], set[str]]:
    """(module, function) of every @triton.jit function under steadytune/, with the names each one calls."""
    found = {}
    for path in sorted((ROOT / "steadytune").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and any(ast.unparse(d) == "triton.jit" for d in node.decorator_list):
                calls = {n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
                found[(module, node.name)] = calls
    return found


def test_the_catalogue_covers_every_triton_kernel_steadytune_ships():
    """Each @triton.jit function is a catalogue entry, or a helper that an entry of its module calls (a helper is
    compiled into its caller). A new kernel without an entry fails here."""
    found = jit_functions()
    assert len(found) >= 19, sorted(found)
    entries = {(k.module, k.function) for k in KERNELS}
    assert entries <= set(found), sorted(entries - set(found))
    called: set[tuple[str, str]] = set()
    frontier = list(entries)
    while frontier:
        module, name = frontier.pop()
        for callee in found[(module, name)]:
            if (module, callee) in found and (module, callee) not in called:
                called.add((module, callee))
                frontier.append((module, callee))
    orphans = set(found) - entries - called
    assert not orphans, f"@triton.jit functions no catalogue entry compiles: {sorted(orphans)}"
    assert len({k.name for k in KERNELS}) == len(KERNELS)
    assert {k.feature for k in KERNELS} == set(FEATURES)


@triton_missing
def test_each_entry_names_the_kernel_s_arguments_in_order():
    for kernel in KERNELS:
        fn = getattr(importlib.import_module(kernel.module), kernel.function)
        assert [name for name, _ in kernel.args] == fn.arg_names, kernel.name
        for arch in TARGETS:
            for config in kernel.configs(arch):
                constexprs = [name for name, kind in kernel.args if kind == "constexpr"]
                assert set(config.constexprs) == set(constexprs), (kernel.name, arch, config.label)
                assert all("{" not in kind for kind in kernel.signature(config).values())


def test_the_sampling_hash_constants_are_the_torch_sampler_s():
    from steadytune.model.decode import sampling
    assert HASH_CONSTANTS == {"HASH_A": sampling.HASH_A, "HASH_B": sampling.HASH_B, "M32": sampling.M32,
                              "WEYL": sampling.WEYL}


def test_the_launchers_choose_per_family():
    """The configurations differ where the compiled code said so (docs/rocm.md): wave32 RDNA gets narrower tiles and
    more warps, CDNA keeps NVIDIA's timed tiles, an fp32 cache reads fewer columns (its LDS overflowed CDNA's 64 KiB)."""
    assert family("gfx942") == family("gfx90a") == "cdna" and family("gfx1201") == "rdna" and family("sm_90") == "nvidia"
    assert grouped_blocks(2048, 768, "bf16", "sm_90")[1:3] == grouped_blocks(2048, 768, "bf16", "gfx942")[1:3] == (128, 64)
    assert grouped_blocks(2048, 768, "bf16", "gfx1100")[1:] == (64, 32, 8)
    assert attention_blocks(7, 128, 8, "fp32", "gfx942")["BLOCK"] == 32
    assert attention_blocks(7, 64, 8, "bf16", "sm_90") == attention_blocks(7, 64, 8, "bf16", "gfx942")
    assert fp8_format("gfx942") == "fnuz" and fp8_format("gfx950") == fp8_format("gfx1201") == fp8_format("sm_90") == "ocp"
    assert fp8_format("gfx90a") is None and fp8_format("gfx1100") is None and fp8_format("sm_80") is None


# ---------------------------------------------------------------------------------------------------------
# Compiling
# ---------------------------------------------------------------------------------------------------------

def _workers() -> int:
    """One process under pytest-xdist (the targets' tests already fill the cores), else one a core."""
    return 1 if os.environ.get("PYTEST_XDIST_WORKER") else max(1, min(4, os.cpu_count() or 1))


@triton_missing
@pytest.mark.parametrize("arch", TARGETS)
def test_every_kernel_builds_for(arch):
    builds = kb.build_all([arch], workers=_workers())
    running = [b for b in builds if b.runs]
    failed = [f"{b.kernel} [{b.config}]: {b.error}" for b in running if not b.built]
    assert not failed, f"{arch}: " + "; ".join(failed)
    spilled = [f"{b.kernel} [{b.config}]: {b.spills}" for b in running
               if b.spills and (b.kernel, family(arch)) not in SPILL_MEASURED]
    assert not spilled, f"{arch}: chosen configurations spill registers to memory: " + "; ".join(spilled)
    too_big = [f"{b.kernel} [{b.config}]: {b.lds}" for b in running if b.lds > LDS_LIMIT[arch]]
    assert not too_big, f"{arch}: LDS over {LDS_LIMIT[arch]} bytes: " + "; ".join(too_big)
    if family(arch) != "nvidia":
        assert all(b.registers and b.occupancy for b in builds if b.built), "resources not read from the AMDGCN"
    else:
        assert all(b.registers for b in builds if b.built), "registers not read from the cubin"

    # the committed record is what compiles today (the refusals and docs/rocm.md read it): rebuild it with
    # `python -m steadytune.model.kernel_builds --write` after changing a kernel or a launcher's choice
    import triton
    record = {b.key: b for b in kb.load_record() if b.arch == arch}
    assert set(record) == {b.key for b in builds}, "kernel_builds.json lists other configurations than the catalogue"
    for build in builds:
        kept = record[build.key]
        assert (kept.built, kept.runs, kept.error) == (build.built, build.runs, build.error), build.key
        if triton.__version__ == kb.load_meta()["triton"]:
            assert kept == build, f"{build.key}: the record says {kept}, the compiler {build}"


KERNEL_READING_A_GLOBAL = """
import triton
import triton.language as tl

SCALE = 3

@triton.jit
def _scaled(x):
    return x * SCALE

@triton.jit
def scale_kernel(X, Y, N, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + i, _scaled(tl.load(X + i, mask=i < N)), mask=i < N)
"""


@triton_missing
def test_a_kernel_reading_a_module_global_does_not_build(tmp_path, monkeypatch):
    """Issue 62's crash: Triton's interpreter lets a @triton.jit function read a module global, the compiler does
    not ('Cannot access global variable'). The build catches it (sample_triton.py before commit 6977e57 failed the
    same way for every target), and a refusal names it."""
    (tmp_path / "reads_global.py").write_text(textwrap.dedent(KERNEL_READING_A_GLOBAL), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    kernel = Kernel("test.scale", "decode_kernels", "reads_global", "scale_kernel",
                    _args("X:*fp32 Y:*fp32 N:i32 BLOCK:constexpr"),
                    lambda arch: [Config({"BLOCK": 128}, {}, 4, {"dtype": "fp32"})])
    for arch in ("sm_90", "gfx942"):
        build = kb.compile_config(kernel, kernel.configs(arch)[0], arch)
        assert not build.built and "global" in build.error.lower(), build.error
        assert build.problem().startswith("does not build")


# ---------------------------------------------------------------------------------------------------------
# What the record decides
# ---------------------------------------------------------------------------------------------------------

def _clean_builds(arch: str) -> list[kb.Build]:
    return [kb.Build(k.name, c.label, arch, True, runs=c.runs, registers=64, sgprs=32, lds=1024, spills=0,
                     occupancy=8) for k in KERNELS for c in k.configs(arch)]


def test_a_feature_is_refused_on_an_arch_where_one_of_its_configurations_fails():
    builds = _clean_builds("gfx1201")
    assert kb.refusal("decode_kernels", "gfx1201", builds) is None
    target = next(b for b in builds if b.kernel == "decode.attention_split" and "head_dim=256" in b.config)
    target.built, target.error = False, "CompilationError: something the compiler refused"
    why = kb.refusal("decode_kernels", "gfx1201", builds)
    assert "decode.attention_split" in why and "does not build" in why and "gfx1201" in why
    # a run whose shape never picks that configuration is not refused for it
    assert kb.refusal("decode_kernels", "gfx1201", builds, head_dim=128) is None
    assert kb.refusal("decode_kernels", "gfx1201", builds, head_dim=256) is not None
    assert kb.refusal("moe_grouped_mm", "gfx1201", builds) is None
    target.built, target.spills = True, 12
    assert "spills 12 VGPRs" in kb.refusal("decode_kernels", "gfx1201", builds)
    target.spills, target.lds = 0, LDS_LIMIT["gfx1201"] + 1
    assert "LDS" in kb.refusal("decode_kernels", "gfx1201", builds)


def test_a_measured_nvidia_spill_is_not_refused_and_archs_outside_the_targets_are_answered_by_kin_or_not():
    builds = _clean_builds("sm_90")
    for b in builds:
        if b.kernel == "swiglu.backward":
            b.spills = 176
    assert ("swiglu.backward", "nvidia") in SPILL_MEASURED
    assert kb.refusal("fused_swiglu", "sm_90", builds) is None
    ok, why = kb.feature_verdict("decode_kernels", "sm_75")
    assert ok and "not among the targets" in why and "unchecked" in why
    # an AMD arch the record does not answer for is refused (gfx906's tl.dot does not build at all); one sharing a
    # target's code generation is answered by that target's builds
    ok, why = kb.feature_verdict("decode_kernels", "gfx906")
    assert not ok and "no build for gfx906" in why and "--targets gfx906" in why and "torch decode ops" in why
    ok, why = kb.feature_verdict("decode_kernels", "gfx1101")
    assert ok and "built for gfx1100" in why
    with pytest.raises(KeyError):
        kb.refusal("no_such_feature", "gfx942", builds)


def test_the_committed_record_refuses_nothing_a_run_can_choose_on_the_six_amd_archs():
    """Issue 64's done-when: no spill in a chosen configuration. The record's verdicts for every feature and arch,
    with the reason the plan prints."""
    for arch in AMD_TARGETS:
        for feature in FEATURES:
            ok, why = kb.feature_verdict(feature, arch)
            # the fused SwiGLU is not used without fp8 matrix cores; everything that runs is built, nothing refused
            assert ok or (feature == "fused_swiglu" and fp8_format(arch) is None and why.startswith("not used")), why
            assert kernels_of(feature)
    assert {b.arch for b in kb.load_record()} == set(TARGETS)


def test_the_resource_table_in_docs_is_the_record_s():
    """docs/rocm.md's table is generated from the record (`python -m steadytune.model.kernel_builds --write`)."""
    text = (ROOT / "docs" / "rocm.md").read_text(encoding="utf-8")
    table = text.split(kb.TABLE_BEGIN, 1)[1].split(kb.TABLE_END, 1)[0].strip()
    assert table == kb.resource_table(kb.load_record())
    for arch in TARGETS:
        assert f" {arch} " in table.splitlines()[0]


# ---------------------------------------------------------------------------------------------------------
# Refused before the run starts, with the reason, and the fallback taken (the GPU faked: its arch is all they read)
# ---------------------------------------------------------------------------------------------------------

@pytest.fixture
def broken_record(monkeypatch):
    """The committed record with one configuration of each feature failing to build on gfx1201."""
    builds = kb.load_record()
    for name in ("decode.attention_merge", "moe.grouped_mm", "swiglu.backward"):
        build = next(b for b in builds if b.arch == "gfx1201" and b.kernel == name and b.runs)
        build.built, build.error = False, "CompilationError: LLVM ERROR: Cannot select (as a compiler would say)"
    monkeypatch.setattr(kb, "recorded", lambda path=kb.RECORD: builds)
    return builds


def test_the_decode_kernels_fall_back_to_the_torch_ops_on_an_arch_where_one_does_not_build(broken_record, monkeypatch,
                                                                                            caplog):
    import torch

    from steadytune.model.decode import runner
    gpu = torch.device("cuda", 0)
    monkeypatch.setattr(runner.importlib.util, "find_spec", lambda name: object())   # Triton "installed"
    monkeypatch.setattr(runner, "device_arch", lambda device: "gfx942")
    assert runner.choose_kernels(gpu) == "triton"
    monkeypatch.setattr(runner, "device_arch", lambda device: "gfx1201")
    with caplog.at_level("WARNING", logger="steadytune.decode"):
        assert runner.choose_kernels(gpu) == "torch"
    assert "decode.attention_merge" in caplog.text and "does not build" in caplog.text and "gfx1201" in caplog.text


def test_the_moe_grouped_matmul_takes_the_loop_where_the_triton_kernel_is_refused(broken_record, monkeypatch):
    import torch

    from steadytune.errors import UserError
    from steadytune.model.moe import grouped
    gpu = torch.device("cuda", 0)
    monkeypatch.setattr(grouped, "TRITON", True)
    monkeypatch.setattr(grouped, "torch_kernel_status", lambda device, dtype: (False, "ROCm: torch's path is slow"))
    monkeypatch.setattr(grouped, "device_arch", lambda device: "gfx950")
    assert grouped.choose_grouped_backend(gpu, torch.bfloat16)[0] == "triton"
    monkeypatch.setattr(grouped, "device_arch", lambda device: "gfx1201")
    backend, why = grouped.choose_grouped_backend(gpu, torch.bfloat16)
    assert backend == "loop" and "moe.grouped_mm" in why and "gfx1201" in why
    with pytest.raises(UserError, match="does not build"):
        grouped.choose_grouped_backend(gpu, torch.bfloat16, "triton")


def test_the_fused_swiglu_is_refused_above_the_rank_an_arch_takes_and_where_it_does_not_build(broken_record):
    from steadytune.model.fused_swiglu import kernels_blocker
    assert kernels_blocker("gfx942", 128) is None and kernels_blocker("gfx950", 16) is None
    assert "above the 64" in kernels_blocker("gfx1201", 128)
    why = kernels_blocker("gfx1201", 16)
    assert "swiglu.backward" in why and "does not build" in why
