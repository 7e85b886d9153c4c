"""`make setup` never replaces a ROCm torch, and doctor names the requirement that replaced one (issue 31, problem 1).

The real pip resolver runs against a real virtual environment holding a fake ROCm torch: its dist-info (the metadata pip
reads to decide what is installed), no code. The package index is a folder of wheels built from the metadata of the
packages installed in this test run's own environment (their real names, versions and requirements), plus two torch
wheels standing in for PyPI's CPU/CUDA builds. pip then resolves steadytune[demo,dev] exactly as on a user's machine,
offline. Scenarios: a stable ROCm torch, a TheRock pre-release, a ROCm torch below steadytune's floor (setup must
refuse, where plain pip replaces it), no torch at all; and unsloth 2026.7.4's `torch<2.11.0` pin (its real
requirement, unslothai/unsloth PR #7278) really replacing torch 2.11.0+rocm7.13.0, then `doctor` naming it.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from steadytune.doctor.packages import read_installed, torch_replacement_findings

ROOT = Path(__file__).resolve().parent.parent
PY = f"python{sys.version_info.major}.{sys.version_info.minor}"
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _name(dist) -> str:
    return re.sub(r"[-_.]+", "_", dist.metadata["Name"]).lower()


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def build_wheel(folder: Path, name: str, version: str, requires: list[str], files: dict[str, bytes] | None = None) -> Path:
    """A py3-none-any wheel with this metadata (and files): what pip reads from an index."""
    stem = f"{re.sub(r'[-_.]+', '_', name)}-{version}"
    info = f"{stem}.dist-info"
    files = dict(files or {f"{re.sub(r'[-_.]+', '_', name).lower()}_stub/__init__.py": b""})
    files[f"{info}/METADATA"] = ("Metadata-Version: 2.1\n" f"Name: {name}\nVersion: {version}\n"
                                 + "".join(f"Requires-Dist: {r}\n" for r in requires)).encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: steadytune-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = [_record_line(p, d) for p, d in files.items()] + [f"{info}/RECORD,,"]
    path = folder / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for p, d in files.items():
            archive.writestr(p, d)
        archive.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


def install_dist_info(venv: Path, name: str, version: str, requires: list[str] = ()) -> Path:
    """What pip leaves in site-packages for an installed package, without its code."""
    site = venv / "lib" / PY / "site-packages"
    info = site / f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires))
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("".join(f"{info.name}/{f},,\n" for f in ("METADATA", "INSTALLER", "RECORD")))
    return info


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    """Every package this environment has installed, as a wheel of its real metadata (setuptools whole, since it
    builds steadytune), and two PyPI stand-ins for torch."""
    folder = tmp_path_factory.mktemp("wheelhouse")
    seen = set()
    for dist in importlib.metadata.distributions():
        name = _name(dist)
        if name in seen or name in ("steadytune", "torch", "pip"):
            continue
        seen.add(name)
        files = None
        if name == "setuptools":   # the build backend really runs: ship its files and entry points
            skip = ("METADATA", "RECORD", "WHEEL", "INSTALLER", "REQUESTED", "direct_url.json")
            files = {str(f): f.locate().read_bytes() for f in dist.files or []
                     if f.locate().is_file() and "__pycache__" not in str(f) and f.name not in skip}
        build_wheel(folder, dist.metadata["Name"], dist.version, list(dist.requires or []), files)
    torch_requires = [r for r in importlib.metadata.requires("torch") or [] if "extra ==" not in r]
    for version in ("2.10.0", "2.13.0"):    # PyPI's default builds (CUDA on Linux x86_64)
        build_wheel(folder, "torch", version, torch_requires)
    build_wheel(folder, "unsloth", "2026.7.4", ["torch<2.11.0,>=2.4.0"])   # its release requirement (PR #7278)
    return folder


def make_venv(tmp_path: Path, torch_version: str | None, extra: dict[str, str] = {}) -> Path:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    if torch_version:
        install_dist_info(venv, "torch", torch_version)
    for name, version in extra.items():
        install_dist_info(venv, name, version)
    return venv


def pip_env(wheelhouse: Path) -> dict[str, str]:
    """No index but the wheel folder, no config file of this machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def project_copy(tmp_path: Path) -> Path:
    """The files `pip install -e .` reads, in a folder of their own (the build writes its egg-info there)."""
    copy = tmp_path / "project"
    copy.mkdir(parents=True)
    for name in ("Makefile", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, copy / name)
    shutil.copytree(ROOT / "steadytune", copy / "steadytune", ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def make_setup(tmp_path: Path, venv: Path, wheelhouse: Path) -> tuple[subprocess.CompletedProcess, dict | None]:
    report = tmp_path / "report.json"
    python = venv / "bin" / "python"
    done = subprocess.run(["make", "-s", "setup", f"PYTHON={python}",
                           f"PIP={sys.executable} -m pip --python {python}",
                           f"PIP_ARGS=--dry-run --report {report}"],
                          cwd=project_copy(tmp_path), env=pip_env(wheelhouse), capture_output=True, text=True, timeout=300)
    return done, json.loads(report.read_text()) if report.exists() else None


def to_install(report: dict) -> dict[str, str]:
    return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in report["install"]}


@needs_make
@pytest.mark.parametrize("rocm_torch", ["2.9.1+rocm6.4", "2.11.0a0+rocm7.10.0a20251120"])
def test_make_setup_keeps_a_rocm_torch(tmp_path, wheelhouse, rocm_torch):
    done, report = make_setup(tmp_path, make_venv(tmp_path, rocm_torch), wheelhouse)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"keeping the installed torch=={rocm_torch}" in done.stdout
    plan = to_install(report)
    assert "torch" not in plan and "steadytune" in plan and "transformers" in plan   # the rest does get installed


@needs_make
def test_make_setup_refuses_where_plain_pip_would_replace_the_rocm_torch(tmp_path, wheelhouse):
    old = "2.3.1+rocm6.0"                        # below steadytune's torch>=2.4
    venv = make_venv(tmp_path, old)
    plain = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                            "--dry-run", "--report", str(tmp_path / "plain.json"), "-e", str(project_copy(tmp_path / "p"))],
                           env=pip_env(wheelhouse), capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    assert to_install(json.loads((tmp_path / "plain.json").read_text()))["torch"] == "2.13.0"   # what pip alone does
    done, report = make_setup(tmp_path, venv, wheelhouse)
    assert done.returncode != 0 and report is None
    assert "ResolutionImpossible" in done.stderr or "conflict" in done.stderr.lower()
    assert f"excludes the installed torch=={old}" in done.stdout and "pip stopped rather than replace it" in done.stdout


@needs_make
def test_make_setup_on_a_machine_without_torch_installs_the_cpu_build(tmp_path, wheelhouse):
    venv = make_venv(tmp_path, None)
    done, report = make_setup(tmp_path, venv, wheelhouse)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "keeping the installed torch==2.13.0" in done.stdout        # TORCH_SPEC went in first, then kept
    assert "torch" not in to_install(report)


def test_a_real_pip_install_replaces_the_rocm_torch_and_doctor_names_the_requirement(tmp_path, wheelhouse):
    """unsloth#7275's install, replayed with the real pip: torch 2.11.0+rocm7.13.0 (with its torchvision/torchaudio)
    installed, then `pip install unsloth`, whose requirement is torch<2.11.0,>=2.4.0."""
    venv = make_venv(tmp_path, "2.11.0+rocm7.13.0",
                     {"torchvision": "0.26.0+rocm7.13.0", "torchaudio": "2.11.0+rocm7.13.0"})
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "unsloth"],
                          env=pip_env(wheelhouse), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Successfully uninstalled torch-2.11.0+rocm7.13.0" in done.stdout
    site = venv / "lib" / PY / "site-packages"
    [finding] = torch_replacement_findings(read_installed([str(site)]))
    assert finding.severity == "error" and "torch 2.10.0" in finding.what and "2.11.0+rocm7.13.0" in finding.what
    assert "torchvision 0.26.0+rocm7.13.0 is still installed" in finding.why
    assert "unsloth 2026.7.4 requires torch<2.11.0,>=2.4.0, which excludes 2.11.0+rocm7.13.0" in finding.why
    assert "torch==2.11.0+rocm7.13.0" in finding.fix and "PIP_CONSTRAINT" in finding.fix and "upgrade unsloth" in finding.fix


def test_a_clean_rocm_environment_and_this_one_get_no_replacement_finding(tmp_path):
    venv = make_venv(tmp_path, "2.9.1+rocm6.4", {"torchvision": "0.24.1+rocm6.4", "pytorch-triton-rocm": "3.5.1",
                                                 "unsloth": "2026.7.4"})
    assert torch_replacement_findings(read_installed([str(venv / "lib" / PY / "site-packages")])) == []
    assert torch_replacement_findings(read_installed()) == []          # this machine: a CPU torch, nothing left over
