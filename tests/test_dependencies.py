"""Every package the tests import is installed by `make test` on a fresh machine, or the test that needs it skips.

`make setup` installs `.[demo,dev]`; anything else a test imports must be guarded in that test file, so that a clone
with a new virtual environment gets skips with a reason, never an ImportError or a failure (a ZeRO test once failed
on "the deepspeed package is not installed" on a fresh machine; CI was green only because its machine had it).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11's tomllib")

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = ("demo", "dev")  # what `make setup` installs beside the core dependencies

# Import names whose distribution is named otherwise (beyond case and -_. which normalise() folds).
DISTRIBUTION_OF = {
    "yaml": "pyyaml",
    "google.protobuf": "protobuf",
    "PIL": "pillow",
    "sklearn": "scikit-learn",
    "cv2": "opencv-python",
    "attr": "attrs",
    "dateutil": "python-dateutil",
    "bs4": "beautifulsoup4",
    "llama_cpp": "llama-cpp-python",
    "jwt": "pyjwt",
}
OUR_PACKAGE = "steadytune"


def normalise(name: str) -> str:
    """PEP 503: distribution names compare case-insensitively, runs of -_. as one -."""
    return re.sub(r"[-_.]+", "-", name).lower()


def distribution(module: str) -> str:
    for prefix, dist in DISTRIBUTION_OF.items():
        if module == prefix or module.startswith(prefix + "."):
            return normalise(dist)
    return normalise(module.split(".")[0])


def installed_by_setup(pyproject: Path) -> set[str]:
    """Distribution names of [project] dependencies and of the extras `make setup` installs."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    specs = list(project.get("dependencies", []))
    for extra in EXTRAS:
        specs += project.get("optional-dependencies", {}).get(extra, [])
    return {normalise(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec).group(1)) for spec in specs}


def imported_modules(tree: ast.AST) -> list[tuple[str, int]]:
    """(module, line) of every absolute import, at module level and inside functions."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, node.lineno))
    return found


def guarded_modules(tree: ast.AST) -> set[str]:
    """Top-level names the file guards: pytest.importorskip("x..."), importlib.util.find_spec("x...") (a skipif or
    an if), or an import inside a try whose handler catches ImportError / ModuleNotFoundError."""
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if called in ("importorskip", "find_spec"):
                guarded.add(node.args[0].value.split(".")[0])
        elif isinstance(node, ast.Try) and any(catches_import_error(h) for h in node.handlers):
            for module, _ in imported_modules(ast.Module(body=node.body, type_ignores=[])):
                guarded.add(module.split(".")[0])
    return guarded


def catches_import_error(handler: ast.ExceptHandler) -> bool:
    caught = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(t, ast.Name) and t.id in ("ImportError", "ModuleNotFoundError") for t in caught)


def unguarded_imports(test_dir: Path, pyproject: Path) -> list[str]:
    """One line per import of a third-party package that `make setup` does not install and the file does not guard."""
    ours = {OUR_PACKAGE, test_dir.name} | {p.stem for p in test_dir.glob("*.py")}  # conftest, sample_data, test_x ...
    declared = installed_by_setup(pyproject)
    problems = []
    for path in sorted(test_dir.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        guarded = guarded_modules(tree)
        for module, line in imported_modules(tree):
            top = module.split(".")[0]
            if top in sys.stdlib_module_names or top in ours or top in guarded or distribution(module) in declared:
                continue
            problems.append(f"{path.name}:{line} imports {module} (distribution {distribution(module)}): neither a "
                            f"dependency nor in the {'/'.join(EXTRAS)} extra, and not guarded in the file "
                            f"(pytest.importorskip({top!r}, reason=...), or add it to the dev extra)")
    return problems


def test_every_third_party_import_in_tests_is_installed_by_setup_or_guarded():
    problems = unguarded_imports(ROOT / "tests", ROOT / "pyproject.toml")
    assert not problems, "\n".join(problems)


def test_the_check_finds_an_unguarded_import_and_accepts_the_guards(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\ndependencies = ["PyYAML>=6", "torch"]\n'
        '[project.optional-dependencies]\ndev = ["pytest>=8"]\ndemo = ["snow_nlp"]\nserve = ["fastapi"]\n',
        encoding="utf-8")
    (tests / "helper.py").write_text("X = 1\n", encoding="utf-8")
    (tests / "test_a.py").write_text("\n".join([
        "import os, yaml, torch.nn", "import pytest", "from helper import X", "from steadytune.config import load",
        "import snow_nlp",
        "def test_x():",
        "    import fastapi",                                  # line 7: serve extra only, unguarded
        "    from google.protobuf import message",             # line 8: undeclared
        "    from . import sibling",
        "deepspeed = pytest.importorskip('deepspeed.runtime')",
        "import deepspeed",
        "try:",
        "    import pyarrow",
        "except (ModuleNotFoundError, OSError):",
        "    pyarrow = None",
        "import importlib.util",
        "HAS_TRL = importlib.util.find_spec('trl') is not None",
        "def test_y():",
        "    import trl",
        "    import jieba",                                    # line 20: undeclared
    ]) + "\n", encoding="utf-8")
    problems = unguarded_imports(tests, tmp_path / "pyproject.toml")
    assert [p.split(" (")[0] for p in problems] == ["test_a.py:7 imports fastapi", "test_a.py:8 imports google.protobuf",
                                                    "test_a.py:20 imports jieba"]
    assert "distribution protobuf" in problems[1]
