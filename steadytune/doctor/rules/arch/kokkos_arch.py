"""Kokkos (and what is built on it: Trilinos, LAMMPS' KOKKOS package) warning at start-up that its kernels were compiled
for another compute capability than the GPU's: "running kernels compiled for compute capability 3.5 on device with
compute capability 3.7". Kokkos chooses the arch at build time through its own options, not through flags handed to
nvcc beside it (CUDA_NVCC_FLAGS' -gencode does not reach the C++ sources Kokkos compiles with its nvcc_wrapper), so the
build must name the GPU's arch the Kokkos way. Sources: kokkos/kokkos#602 (the developer: nvcc_wrapper as the C++
compiler and -arch=sm_37 in CMAKE_CXX_FLAGS, which nvcc_wrapper hands to nvcc); the Kokkos_ARCH_<NAME><NN> option
names from own_cuda_builds' table of Kokkos' arch names (the same names Gentoo's kokkos ebuild maps: 3x KEPLER, 5x
MAXWELL, 60/61 PASCAL, 70/72 VOLTA, 75 TURING, 80/86 AMPERE, 89 ADA, 90 HOPPER). The refusal form ("initialize ERROR")
stays own_cuda_builds' reading."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.arch.own_cuda_builds import _KOKKOS_ARCH
from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule
from steadytune.doctor.fixes import dotted


# the warning form only (kernels that still run, older code): the refusal ("initialize ERROR: ... is not supported") is
# own_cuda_builds' reading, with the Makefile's KOKKOS_ARCH too
_WARNING = re.compile(r"(?i)WARNING:?\s*running kernels compiled for compute capability (\d)\.(\d) on (?:a )?device with "
                      r"compute capability (\d)\.(\d)")


def _option(major: str, minor: str) -> Optional[str]:
    name = _KOKKOS_ARCH.get(f"{major}{minor}")   # Kokkos' own arch names (own_cuda_builds' table)
    return f"-DKokkos_ARCH_{name.upper()}=ON" if name else None


@rule("arch-missing")
def kokkos_compiled_for_other_arch(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: Kokkos' own warning, which names both compute capabilities."""
    lines = _lines_matching(ctx, _WARNING)
    if not lines:
        return None
    built_major, built_minor, major, minor = _WARNING.search(lines[0].line).groups()
    if (built_major, built_minor) == (major, minor):
        return None
    sm = f"sm_{major}{minor}"
    option = _option(major, minor)
    cmake = f"; with Kokkos' CMake build (Kokkos 3 and later) say it as {option} instead" if option else ""
    return _first(_make(
        "arch-missing", f"Kokkos was built for compute capability {built_major}.{built_minor}, the GPU is {major}.{minor}",
        f"Kokkos' kernels were compiled for sm_{built_major}{built_minor} (its default when no arch reaches it); flags "
        "given to nvcc beside Kokkos (CUDA_NVCC_FLAGS' -gencode) do not reach the C++ sources Kokkos compiles through "
        "its nvcc_wrapper, so the GPU runs older code (or none)",
        f"build with Kokkos' nvcc_wrapper as the C++ compiler (CMAKE_CXX_COMPILER=<kokkos>/bin/nvcc_wrapper, or "
        f"OMPI_CXX=nvcc_wrapper under mpicxx) and pass the GPU's arch to it: CMAKE_CXX_FLAGS=\"-arch={sm}\" (nvcc_wrapper "
        f"hands it to nvcc){cmake}; then rebuild from a clean build folder",
        [ctx.line_fact(lines[0])], lines[:1]))


# a Kokkos arch option the build names: "-DKokkos_ARCH_VOLTA72=ON", "KOKKOS_ARCH=Volta72", "kokkos+cuda cuda_arch=72"
_OPTION_NAMED = re.compile(r"(?i)Kokkos_ARCH_([A-Z]+)(\d{2,3})\b|KOKKOS_ARCH\s*[=:]\s*\"?([A-Z]+)(\d{2,3})\b")


@rule("arch-missing")
def kokkos_option_for_another_gpu(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a Kokkos arch option in the paste whose two digits (the compute capability Kokkos builds for) are not
    the named GPU's. The digits are the compute capability, so a family name alone misleads: VOLTA72 is the Jetson
    Xavier (7.2), a V100 is VOLTA70; AMPERE86 is a GeForce RTX 30, an A100 is AMPERE80 (kokkos/kokkos#6092: V100 built
    with VOLTA72, "likely mismatch of architecture"; Kokkos' CMake keyword list names each with its capability)."""
    lines = _lines_matching(ctx, _OPTION_NAMED)
    archs = [a for a in ctx.sheet.machine_archs if a.startswith("sm_")]
    if not lines or len(set(archs)) != 1:
        return None
    m = _OPTION_NAMED.search(lines[0].line)
    family, digits = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
    cc = archs[0][3:]
    if digits == cc or cc not in _KOKKOS_ARCH:
        return None
    option = _option(cc[:-1], cc[-1])
    named = f"Kokkos_ARCH_{family.upper()}{digits}"
    return _first(_make(
        "arch-missing", f"{named} builds for compute capability {dotted(int(digits))}, the GPU is {dotted(int(cc))}",
        f"the two digits of a Kokkos arch option are the compute capability it compiles for: {named} makes sm_{digits} "
        f"code, which the {dotted(int(cc))} GPU cannot run, so Kokkos::Cuda::initialize stops on the arch mismatch",
        f"configure with {option} instead of -D{named}=ON (one NVIDIA arch per build; in a Makefile build KOKKOS_ARCH = "
        f"{_KOKKOS_ARCH[cc]}; Spack: cuda_arch={cc}), delete the build folder and rebuild Kokkos and the application",
        [ctx.line_fact(lines[0])], lines[:1]))
