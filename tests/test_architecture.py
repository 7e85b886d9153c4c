"""The house rules of docs/architecture.md, held against the code: no import circle between modules, every import
between parts allowed by the page's table, every folder saying what it owns, few top-level rooms.

Imports are read from the source with `ast` (inside functions too: an import hidden in a function is still a
dependency), so nothing is imported to check them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "steadytune"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
FLOOR = ("errors", "config", "steadytune")   # "floor" in the table: the floor modules and the package root
# The entries a newcomer meets at the top of steadytune/. It grows by a decision, not by drift: 20 until issue 58
# gave the hyperparameter search a folder of its own (tune/, out of recipes/) and LLaMA-Factory's v1 schema a module
# beside config.py (config_lf_v1.py).
TOP_LEVEL_ENTRIES = 22


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The steadytune modules `path` imports anywhere in it; `from pkg import sub` counts as importing pkg.sub."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("steadytune"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("steadytune"))
    return {m for m in found if m in known}


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(path, known) - {name} for name, path in mods.items()}


def part_of(module: str) -> str:
    """steadytune.training.loss -> training; steadytune.train -> train; steadytune -> steadytune."""
    bits = module.split(".")
    return bits[1] if len(bits) > 1 else bits[0]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def read_rules(text: str) -> dict[str, set[str]]:
    """The table between the import-rules markers: part -> the parts it may import ("floor" expanded)."""
    block = re.search(r"<!-- import-rules.*?-->(.*?)<!-- /import-rules -->", text, re.S)
    assert block, f"{ARCHITECTURE}: the import-rules table is missing"
    rules = {}
    for line in block.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or cells[0] in ("part", "") or set(cells[0]) <= set("-"):
            continue
        allowed = set()
        for name in filter(None, (c.strip() for c in cells[1].split(","))):
            allowed.update(FLOOR if name == "floor" else (name,))
        rules[cells[0]] = allowed
    return rules


def forbidden_imports(graph: dict[str, set[str]], rules: dict[str, set[str]]) -> list[str]:
    bad = []
    for module, targets in sorted(graph.items()):
        part = part_of(module)
        if part in ("steadytune", "__main__"):   # the package root (its version) and `python -m steadytune`
            continue
        for target in sorted(targets):
            other = part_of(target)
            if other != part and other not in rules.get(part, set()):
                bad.append(f"{module} -> {target} ({part} may not import {other})")
    return bad


def test_no_module_imports_itself_back_through_others():
    found = cycles(import_graph())
    assert not found, "import circles (move what one module takes from the other): " + "; ".join(
        " <-> ".join(c) for c in found)


def test_every_import_between_parts_is_allowed_by_the_architecture_page():
    rules = read_rules(ARCHITECTURE.read_text(encoding="utf-8"))
    parts = {part_of(m) for m in modules()} - {"steadytune", "__main__"}
    assert parts <= set(rules), f"parts missing from docs/architecture.md's table: {sorted(parts - set(rules))}"
    assert not forbidden_imports(import_graph(), rules)


def test_the_checks_catch_a_circle_and_a_forbidden_arrow():
    """The two checks above must be able to fail."""
    graph = {"steadytune.data.a": {"steadytune.model.b"}, "steadytune.model.b": {"steadytune.data.a"}}
    assert cycles(graph) == [["steadytune.data.a", "steadytune.model.b"]]
    rules = read_rules("<!-- import-rules -->\n| part | may import |\n|---|---|\n| data | floor |\n"
                       "| model | floor, data |\n<!-- /import-rules -->")
    assert rules["model"] == {"errors", "config", "steadytune", "data"}
    assert forbidden_imports(graph, rules) == [
        "steadytune.data.a -> steadytune.model.b (data may not import model)"]


def test_every_folder_says_what_it_owns_and_the_top_level_stays_small():
    folders = [p for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"]
    for folder in folders:
        if not list(folder.glob("*.py")):
            continue   # data only (recipes/, report/templates/)
        init = folder / "__init__.py"
        assert init.is_file(), f"{folder} has no __init__.py"
        assert ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))), f"{init} has no docstring"
    top = [p for p in PACKAGE.iterdir() if p.name not in ("__init__.py", "__main__.py", "__pycache__")]
    assert len(top) <= TOP_LEVEL_ENTRIES, f"{len(top)} entries at the top of steadytune/: {sorted(p.name for p in top)}"


@pytest.mark.parametrize("package", ["data", "doctor", "hardware", "model", "training", "eval", "stages",
                                     "distributed", "infer", "serve", "report", "bench", "tune"])
def test_a_package_face_holds_a_docstring_only(package):
    """Names come from the module that defines them, so a reader (and the import check) sees the real arrow."""
    tree = ast.parse((PACKAGE / package / "__init__.py").read_text(encoding="utf-8"))
    code = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    assert not code or package == "stages", f"steadytune/{package}/__init__.py holds code: move it into a module"


def test_imports_of_our_own_modules_sit_at_the_top_unless_a_comment_says_why():
    """An import inside a function hides an arrow and a load-time cost; where one is needed (doctor and `--help` must
    not load torch), a comment beside it or on the line above says so ('lazy: ...')."""
    unexplained = []
    for name, path in modules().items():
        lines = path.read_text(encoding="utf-8").splitlines()
        tree = ast.parse("\n".join(lines))
        for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for node in ast.walk(function):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("steadytune"):
                    nearby = " ".join(lines[max(0, node.lineno - 2):node.end_lineno])
                    if "lazy" not in nearby and "inside the try" not in nearby:
                        unexplained.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module} import ...")
    assert not unexplained, "imports inside functions without a reason: " + "; ".join(unexplained)


def test_no_module_binds_a_top_level_name_twice():
    """A second `_PATTERN = ...` further down a module silently replaces the first for every function that reads it
    at call time (a rule module once had two `_INIT_FAILS`, and the first rule matched the second one's lines)."""
    twice = []
    for path in sorted((ROOT / "steadytune").rglob("*.py")):
        seen: dict[str, int] = {}
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            else:
                continue
            for name in names:
                if name in seen and name != "_":
                    twice.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name} (first at line {seen[name]})")
                seen.setdefault(name, node.lineno)
    assert not twice, "; ".join(twice)


def test_no_source_file_holds_a_control_character():
    """A regex written through a tool that unescaped `\\b` once left raw backspace characters in a rule's pattern:
    `r"\\x08nerfstudio\\x08"` matches nothing a user pastes, so two programs were never recognised and no test
    noticed. Tabs, newlines and carriage returns are the only control characters a source or data file needs."""
    control = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
    found = []
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix not in (".py", ".yaml", ".yml", ".json", ".md", ".txt") or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if control.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}")
    assert not found, ", ".join(found)
