"""The suite's two markers, held against the tests themselves (tests/conftest.py says what each is for):

- a test that reads ../shared (through conftest's SHARED, LF_FIXTURES or SMI_FIXTURES, directly, through a
  module-level name or helper built from them) carries `needs_shared`, or CI's fresh clone fails on it and the
  in-place pass (`-m 'shared and not gpu'`) never selects it;
- a test that starts two training processes (`--nproc 2`, two nodes, two ranks of a script) carries
  `two_processes`, or two of them can run at once on CI's two cores as four processes.

Read from the source with `ast`, as tests/test_architecture.py reads the imports; nothing is run."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SHARED_NAMES = {"SHARED", "LF_FIXTURES", "SMI_FIXTURES"}
# Ways a test starts two processes of its own: the launcher (or tune's workers) asked for two, or a process (a
# script, a node of a several-nodes launch) started once per rank, two or more. Launch plans and early refusals of
# two-node flags start none.
TWO = re.compile(r'"--nproc",\s*"2"|nproc="2"')   # train's launcher, tune's workers
PER_RANK = re.compile(r"\b(Popen|start_node)\(")
TWO_RANKS = re.compile(r"for \w+ in (range\([2-9]\)|\(0, 1\))")


def suite_files() -> list[Path]:
    return sorted(p for p in TESTS.glob("test_*.py") if p.name != Path(__file__).name)


def names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def module_level(tree: ast.Module) -> dict[str, ast.AST]:
    """Top-level assignments and non-test functions, by the names they define."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            out.update({t.id: node for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("test_"):
            out[node.name] = node
    return out


def reaching(tree: ast.Module, seeds: set[str]) -> set[str]:
    """The module-level names built from `seeds`, however many steps away."""
    defs, found = module_level(tree), set(seeds)
    changed = True
    while changed:
        changed = False
        for name, node in defs.items():
            if name not in found and names_in(node) & found:
                found.add(name)
                changed = True
    return found


def marked(src: str, test: ast.FunctionDef, marker: str, module_marks: str) -> bool:
    decorators = " ".join(ast.get_source_segment(src, d) or "" for d in test.decorator_list)
    return marker in decorators or marker in module_marks


def collected_tests(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
            yield node


def module_marks(src: str) -> str:
    found = re.search(r"^pytestmark\s*=.*$", src, re.M)
    return found.group(0) if found else ""


def conftest_names(tree: ast.Module) -> set[str]:
    return {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "conftest"
            for a in n.names}


def unmarked_shared_readers(path: Path) -> list[str]:
    src = path.read_text(encoding="utf-8")
    tree = ast.parse(src)
    seeds = SHARED_NAMES & conftest_names(tree)
    if not seeds:
        return []
    shared, defs, out = reaching(tree, seeds), module_level(tree), []
    for test in collected_tests(tree):
        if marked(src, test, "needs_shared", module_marks(src)):
            continue
        body = set().union(*(names_in(n) for n in test.body)) | {a.arg for a in test.args.args}
        cases = set().union(set(), *(names_in(d) for d in test.decorator_list)) & shared
        # pytest.param(..., marks=needs_shared) marks the cases that read ../shared, not the test: those are covered.
        unmarked_cases = [n for n in cases if "needs_shared" not in (ast.get_source_segment(src, defs[n]) or "")]
        if body & shared or unmarked_cases:
            out.append(f"{path.name}:{test.lineno} {test.name}")
    return out


def unmarked_two_process_tests(path: Path) -> list[str]:
    src = path.read_text(encoding="utf-8")
    tree = ast.parse(src)
    defs = module_level(tree)
    out = []
    for test in collected_tests(tree):
        pieces = [ast.get_source_segment(src, test) or ""]
        pieces += [ast.get_source_segment(src, defs[n]) or "" for n in names_in(test) if n in defs]
        text = "\n".join(pieces)
        two = TWO.search(text) or (PER_RANK.search(text) and TWO_RANKS.search(text))
        if two and not marked(src, test, "two_processes", module_marks(src)):
            out.append(f"{path.name}:{test.lineno} {test.name}")
    return out


def test_every_test_that_reads_shared_carries_needs_shared():
    missing = [m for path in suite_files() for m in unmarked_shared_readers(path)]
    assert not missing, "tests that read ../shared without @needs_shared (conftest.py):\n" + "\n".join(missing)


def test_every_test_that_starts_two_processes_carries_two_processes():
    missing = [m for path in suite_files() for m in unmarked_two_process_tests(path)]
    assert not missing, ("tests that start two processes without @two_processes (conftest.py):\n"
                         + "\n".join(missing))


def test_the_readers_find_both_kinds(tmp_path):
    """The checks above pass on an empty finding too: these guard the readers themselves."""
    sample = tmp_path / "test_sample.py"
    sample.write_text('from conftest import SHARED, needs_shared\n'
                      'FILES = SHARED / "fixtures"\n'
                      'def rows():\n    return list(FILES.iterdir())\n'
                      'def test_reads():\n    assert rows()\n'
                      '@needs_shared\ndef test_reads_marked():\n    assert rows()\n'
                      'def test_two(tmp_path):\n    run_cli(["train", "x.yaml"] + ["--nproc", "2"])\n'
                      'def test_ranks(tmp_path):\n'
                      '    ps = [subprocess.Popen(["python", str(rank)]) for rank in range(2)]\n'
                      '    for rank in range(2):\n        pass\n'
                      'def test_one(tmp_path):\n    run_cli(["train", "x.yaml"])\n'
                      'CASES = [pytest.param(FILES, marks=needs_shared), pytest.param(tmp_path)]\n'
                      'BARE = [FILES]\n'
                      '@pytest.mark.parametrize("folder", CASES)\ndef test_cases(folder):\n    assert folder\n'
                      '@pytest.mark.parametrize("folder", BARE)\ndef test_bare(folder):\n    assert folder\n')
    assert unmarked_shared_readers(sample) == ["test_sample.py:5 test_reads", "test_sample.py:24 test_bare"]
    assert unmarked_two_process_tests(sample) == ["test_sample.py:10 test_two", "test_sample.py:12 test_ranks"]
