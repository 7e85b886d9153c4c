"""Every command shown in README.md and docs/ still works, every link resolves, and the README stays a front page.

The convention (docs/README.md, "Commands in these pages are tested"):
- a fenced block whose info string is `bash cpu-test` holds commands cheap enough to run on a CPU: each runs here as
  `python -m steadytune ...` in a temporary folder and must exit 0 (doctor: 0 or 1, its answer when the machine has
  an error) without a traceback; `needs=PKG[,PKG]` in the info string skips it where a package is missing;
- every other `steadytune ...` command in a fenced block (every line of a shell block; `$ `-lines of an output
  block) must parse: its subcommand exists, its flags are that subcommand's options, and argparse takes the words
  (`key=value` words are config overrides). So must inline code that starts with `steadytune SUBCOMMAND ARGS`.
  `python -m steadytune.X` must name a module; `python benchmarks/X.py --flag` / `python tools/X.py --flag` a script
  that exists and defines the flag; `bash benchmarks/X.sh` a script that exists;
- a `yaml cpu-test` block must load as a run config; `from steadytune... import NAME` in a Python block must import;
- relative links (and their #anchors) resolve; repository paths quoted in code exist, and none names a module file
  of the package (the docs name concepts; docs/architecture.md alone names files, and they must exist).

Everything runs on a CPU with no network and no GPU, and does not need ../shared.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import re
import shlex
import subprocess
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import pytest


def _repo_root() -> Path:
    for folder in Path(__file__).resolve().parents:
        if (folder / "pyproject.toml").is_file() and (folder / "steadytune").is_dir():
            return folder
    raise RuntimeError("repository root not found above " + __file__)


ROOT = _repo_root()
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "measured").glob("*.md"))]
README_MAX_LINES = 300
README_MAX_CELL = 200          # characters of one table cell on the front page: one short sentence, details in docs/
README_HEADLINE_ROWS = 10      # the "Speed and quality" table fits one screen
# The page that names the package's files (every other page names concepts, so a moved module breaks no doc).
ARCHITECTURE = ROOT / "docs" / "architecture.md"
# The only paths inside the package the docs may quote: files that stay where they are.
ALLOWED_PACKAGE_PATHS = {"steadytune/recipes/gemma3_270m_sentiment.yaml"}
REPO_PREFIXES = ("steadytune/", "tests/", "benchmarks/", "tools/", "docs/", ".ci/")
SHELL_LANGS = {"bash", "sh", "shell", "console", "zsh"}
OPERATORS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "2>&1", "(", ")"}
RUN_TIMEOUT_S = 60
# scoring every mined case (about 1,200 pastes, ~30 s of one core) outgrows the minute on a shared 2-core runner
SCORE_TIMEOUT_S = 180


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# ---------------------------------------------------------------------------------------------------------- markdown

@dataclass
class Block:
    page: Path
    line: int          # 1-based line of the opening fence
    lang: str          # first word of the info string
    tags: list[str]    # the other words of the info string
    lines: list[str]


def fenced_blocks(page: Path) -> list[Block]:
    blocks, open_fence = [], None
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        if open_fence is None:
            m = re.match(r"^(`{3,}|~{3,})\s*(.*)$", stripped)
            if m and "`" not in m.group(2):
                words = m.group(2).split()
                open_fence = (m.group(1), Block(page, number, words[0] if words else "", words[1:], []))
        elif re.match("^" + re.escape(open_fence[0][0]) + "{%d,}\\s*$" % len(open_fence[0]), stripped):
            blocks.append(open_fence[1])
            open_fence = None
        else:
            open_fence[1].lines.append(line)
    assert open_fence is None, f"{rel(page)}:{open_fence[1].line}: a fenced block is never closed"
    return blocks


def prose(page: Path) -> str:
    """The page without its fenced blocks (their lines left empty, so line numbers hold)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    for block in fenced_blocks(page):
        for i in range(block.line - 1, block.line + len(block.lines) + 1):
            lines[i] = ""
    return "\n".join(lines)


CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)


def code_spans(page: Path) -> list[tuple[int, str]]:
    text = prose(page)
    return [(text.count("\n", 0, m.start()) + 1, " ".join(m.group(2).split())) for m in CODE_SPAN.finditer(text)]


def github_slug(heading: str) -> str:
    text = heading.strip().lower()
    kept = "".join(ch for ch in text if ch in " -" or unicodedata.category(ch)[0] in "LMN" or unicodedata.category(ch) == "Pc")
    return kept.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    for line in prose(page).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = github_slug(m.group(1))
            seen[slug] = seen.get(slug, -1) + 1
    out = set()
    for slug, count in seen.items():
        out.add(slug)
        out.update(f"{slug}-{i}" for i in range(1, count + 1))
    return out


# ----------------------------------------------------------------------------------------------------------- shell

def command_lines(block: Block) -> list[tuple[int, str]]:
    """(line number, logical command line) of a block: every line of a shell block, `$ ` lines elsewhere; backslash
    continuations and lines with an open quote are joined."""
    shell = block.lang in SHELL_LANGS
    out, i = [], 0
    while i < len(block.lines):
        raw, number = block.lines[i].strip(), block.line + 1 + i
        i += 1
        if raw.startswith("$ "):
            raw = raw[2:]
        elif not shell:
            continue
        while (raw.endswith("\\") or _open_quote(raw)) and i < len(block.lines):
            raw = (raw[:-1] + " " if raw.endswith("\\") else raw + "\n") + block.lines[i].strip()
            i += 1
        if raw:
            out.append((number, raw))
    return out


def _open_quote(line: str) -> bool:
    try:
        split_words(line)
    except ValueError:
        return True
    return False


def split_words(line: str) -> list[str]:
    line = re.sub(r"\$\([^)]*\)", "X", line)          # $(command substitution) -> one word
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def simple_commands(line: str) -> list[list[str]]:
    """The words of each simple command of a line (split at | && ; > ...), environment assignments dropped."""
    commands, current = [], []
    for word in split_words(line):
        if word in OPERATORS or set(word) <= set("|&;<>()"):
            commands.append(current)
            current = []
        else:
            current.append(word)
    commands.append(current)
    out = []
    for words in commands:
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words = words[1:]
        if words:
            out.append(words)
    return out


@dataclass
class Invocation:
    where: str
    kind: str          # steadytune | module | script
    target: str        # subcommand / module name / script path
    args: list[str]
    strict: bool       # full argparse check, or flags only (inline code naming a subcommand)


def invocations(words: list[str], where: str, strict: bool) -> list[Invocation]:
    head = Path(words[0]).name
    if head == "steadytune":
        return [Invocation(where, "steadytune", "", words[1:], strict)]
    if "-m" in words:
        i = words.index("-m")
        if i + 1 < len(words):
            module = words[i + 1]
            if module == "steadytune":
                return [Invocation(where, "steadytune", "", words[i + 2:], strict)]
            if module.startswith("steadytune."):
                return [Invocation(where, "module", module, words[i + 2:], strict)]
    if head in ("python", "python3", "bash", "sh") and len(words) > 1 and words[1].startswith(("benchmarks/", "tools/")):
        return [Invocation(where, "script", words[1], words[2:], strict)]
    return []


def fenced_invocations() -> list[Invocation]:
    out = []
    for page in PAGES:
        for block in fenced_blocks(page):
            if block.lang in ("python", "py", "yaml", "yml", "json"):
                continue
            for number, line in command_lines(block):
                for words in simple_commands(line):
                    out.extend(invocations(words, f"{rel(page)}:{number}", strict=True))
    return out


def inline_invocations() -> list[Invocation]:
    out = []
    for page in PAGES:
        for number, span in code_spans(page):
            if not re.search(r"(^|\s)(steadytune\s|python3? |bash )", span):
                continue
            try:
                commands = simple_commands(span)
            except ValueError:
                continue
            for words in commands:
                # `steadytune eval` alone names a subcommand in prose; with arguments it is a command, parsed in full
                for inv in invocations(words, f"{rel(page)}:{number} (inline)", strict=len(words) > 2):
                    if inv.kind != "steadytune" or (inv.args and not inv.args[0].startswith("-") and
                                                   re.match(r"^[a-z]+$", inv.args[0])):
                        out.append(inv)
    return out


def runnable_commands() -> list[tuple[str, list[str], list[str]]]:
    """(where, steadytune arguments, packages needed) of every command in a `bash cpu-test` block."""
    out = []
    for page in PAGES:
        for block in fenced_blocks(page):
            if "cpu-test" not in block.tags or block.lang not in SHELL_LANGS:
                continue
            needs = [p for tag in block.tags if tag.startswith("needs=") for p in tag[6:].split(",") if p]
            for number, line in command_lines(block):
                commands = simple_commands(line)
                assert len(commands) == 1 and Path(commands[0][0]).name == "steadytune", (
                    f"{rel(page)}:{number}: a cpu-test block holds plain `steadytune ...` commands only: {line!r}")
                out.append((f"{rel(page)}:{number}", commands[0][1:], needs))
    return out


# ------------------------------------------------------------------------------------------------------------ CLI

def subcommand_parser(name: str) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    from steadytune import cli

    parser = cli.build_parser([name])
    sub_action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, sub_action.choices[name]


def is_flag(word: str) -> bool:
    return word.startswith("-") and word != "-" and not re.match(r"^-\d", word)


def check_steadytune(inv: Invocation) -> str | None:
    from steadytune import cli

    args = inv.args
    if not args:
        return None
    if is_flag(args[0]):
        return None if args[0] in ("-h", "--help", "--version") else f"{args[0]}: not an option of steadytune"
    name = args[0]
    if name not in cli.SUBCOMMANDS:
        return f"steadytune {name}: no such subcommand (there are: {', '.join(cli.SUBCOMMANDS)})"
    parser, sub = subcommand_parser(name)
    if any(a.dest == "rest" for a in sub._actions):
        return f"steadytune {name}: its module did not load (argparse has only the stand-in 'rest' argument)"
    options = set(sub._option_string_actions)
    unknown = [w for w in args[1:] if is_flag(w) and w.split("=", 1)[0] not in options]
    if unknown:
        return f"steadytune {name}: {', '.join(unknown)} not among its options {sorted(options)}"
    if not inv.strict:
        return None
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            parsed, extra = parser.parse_known_args(args)
        except SystemExit as e:
            return None if e.code == 0 else f"steadytune {name}: argparse refuses it: {err.getvalue().strip()}"
    leftover = [w for w in extra if not ("=" in w and not w.startswith("-"))]
    if leftover or (extra and not hasattr(parsed, "overrides")):
        return f"steadytune {name}: unrecognized arguments {extra}"
    return None


def check_module(inv: Invocation) -> str | None:
    import importlib.util

    try:
        found = importlib.util.find_spec(inv.target)
    except ModuleNotFoundError:
        found = None
    return None if found is not None else f"python -m {inv.target}: no such module"


def check_script(inv: Invocation) -> str | None:
    """The script exists and each flag shown is defined in it, or in a module of ours it imports (a script may take
    `steadytune bench`'s own options): read, not run, so no script's heavy imports happen here."""
    import importlib.util

    path = ROOT / inv.target
    if not path.is_file():
        return f"{inv.target}: no such file"
    source = path.read_text(encoding="utf-8")
    sources = [source]
    for module in re.findall(r"^\s*from\s+(steadytune[\w.]*)\s+import", source, re.M):
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            spec = None
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            sources.append(Path(spec.origin).read_text(encoding="utf-8"))
    missing = [w for w in (w.split("=", 1)[0] for w in inv.args if is_flag(w))
               if not any(f'"{w}"' in s or f"'{w}'" in s for s in sources)]
    return f"{inv.target}: does not define {', '.join(missing)}" if missing else None


CHECKS = {"steadytune": check_steadytune, "module": check_module, "script": check_script}


# ----------------------------------------------------------------------------------------------------------- tests

def test_readme_is_a_front_page():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the reference belongs in docs/ (at most {README_MAX_LINES})"


def table_rows(text: str) -> list[tuple[int, list[str]]]:
    """(line number, cells) of each body row of each Markdown table in `text` (header and rule rows left out)."""
    out, lines = [], text.splitlines()
    for number, line in enumerate(lines, 1):
        if not line.lstrip().startswith("|"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        is_rule = all(set(c) <= set("-: ") for c in cells)
        is_header = number < len(lines) and re.match(r"^\s*\|[\s:|-]+\|\s*$", lines[number])
        if not is_rule and not is_header:
            out.append((number, cells))
    return out


def test_readme_table_cells_are_one_short_sentence():
    """Issue 58: measurement logs had grown into the README's cells (2,300 characters in one); the figures in full
    belong in docs/speed.md, the front page keeps one short sentence a cell."""
    rows = table_rows(prose(README))
    assert rows, "README.md has no table: the extraction found nothing"
    long = [f"README.md:{number}: {len(cell)} characters: {cell[:80]}..." for number, cells in rows for cell in cells
            if len(cell) > README_MAX_CELL]
    assert not long, (f"README table cells over {README_MAX_CELL} characters (move the detail to docs/):\n"
                      + "\n".join(long))


def test_readme_headline_table_fits_one_screen():
    text = prose(README)
    section = re.search(r"^## Speed and quality\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section, "README.md has no 'Speed and quality' section"
    rows = table_rows(section.group(1))
    assert 0 < len(rows) <= README_HEADLINE_ROWS, (f"the headline table has {len(rows)} rows "
                                                   f"(at most {README_HEADLINE_ROWS})")
    unlinked = [cells[0] for _, cells in rows if not LINK.search(" ".join(cells))]
    assert not unlinked, f"headline rows that link to no measurement: {unlinked}"


def test_readme_counts_llamafactorys_examples_as_the_table_does():
    """The front page's "N of its M examples run" is docs/lf_examples.json's count (tools/run_lf_examples.py writes
    it): the README said 28 of 83 for a wave after the table said 41."""
    import json

    found = re.search(r"(\d+) of its (\d+) examples", prose(README))
    assert found, "README.md no longer says how many of LLaMA-Factory's examples run"
    table = json.loads((ROOT / "docs" / "lf_examples.json").read_text(encoding="utf-8"))
    assert (int(found.group(1)), int(found.group(2))) == (sum(bool(r["runs"]) for r in table), len(table))


def test_the_table_reader_sees_long_cells_and_header_rows():
    rows = table_rows("| a | b |\n|---|---|\n| short | " + "x" * 250 + " |\n| `a \\| b` | c |\n")
    assert [n for n, _ in rows] == [3, 4]
    assert len(rows[0][1][1]) == 250 and rows[1][1] == ["`a \\| b`", "c"]


def test_the_pages_show_commands():
    # guards the extraction itself: a parser that finds nothing would pass every check below
    assert len(fenced_invocations()) > 30
    assert len(runnable_commands()) >= 5
    assert any(inv.kind == "script" for inv in fenced_invocations())


def test_every_fenced_command_parses():
    failures = [f"{inv.where}: {problem}" for inv in fenced_invocations()
                if (problem := CHECKS[inv.kind](inv))]
    assert not failures, "commands in the docs that the code no longer takes:\n" + "\n".join(failures)


def test_every_inline_command_has_real_flags():
    failures = [f"{inv.where}: {problem}" for inv in inline_invocations()
                if (problem := CHECKS[inv.kind](inv))]
    assert not failures, "commands in the docs' inline code that the code no longer takes:\n" + "\n".join(failures)


@pytest.mark.parametrize("where,args,needs", [pytest.param(*c, id=f"{c[0]} {' '.join(c[1])}") for c in runnable_commands()])
def test_runnable_command_runs_on_cpu(where, args, needs, tmp_path):
    for package in needs:
        pytest.importorskip(package)
    for word in args:  # repository files a command reads (tests/captures/...) are linked into the folder
        first = word.split("/", 1)[0]
        if "/" in word and (ROOT / word).exists() and not (tmp_path / first).exists():
            (tmp_path / first).symlink_to(ROOT / first)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    done = subprocess.run([sys.executable, "-m", "steadytune", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=SCORE_TIMEOUT_S if "--score-cases" in args else RUN_TIMEOUT_S)
    allowed = {0, 1} if args[:1] == ["doctor"] else {0}
    assert done.returncode in allowed and "Traceback" not in done.stderr, (
        f"{where}: steadytune {' '.join(args)} exited {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    assert done.stdout.strip(), f"{where}: steadytune {' '.join(args)} printed nothing"


def test_yaml_examples_load_as_configs(tmp_path):
    from steadytune.config import load_config

    blocks = [b for page in PAGES for b in fenced_blocks(page) if b.lang in ("yaml", "yml") and "cpu-test" in b.tags]
    assert blocks, "the README's config example is marked ```yaml cpu-test"
    failures = []
    for i, block in enumerate(blocks):
        path = tmp_path / f"example_{i}.yaml"
        path.write_text("\n".join(block.lines) + "\n", encoding="utf-8")
        try:
            load_config(path)
        except Exception as e:  # ConfigError names the key
            failures.append(f"{rel(block.page)}:{block.line}: {type(e).__name__}: {e}")
    assert not failures, "\n".join(failures)


def test_python_examples_import_what_they_name():
    failures = []
    for page in PAGES:
        for block in fenced_blocks(page):
            if block.lang not in ("python", "py"):
                continue
            for offset, line in enumerate(block.lines, 1):
                m = re.match(r"^\s*from\s+(steadytune[\w.]*)\s+import\s+([\w\s,]+?)\s*(#.*)?$", line)
                if not m:
                    continue
                where = f"{rel(page)}:{block.line + offset}"
                try:
                    module = importlib.import_module(m.group(1))
                except ImportError as e:
                    failures.append(f"{where}: {e}")
                    continue
                for name in (n.split(" as ")[0].strip() for n in m.group(2).split(",")):
                    if not hasattr(module, name):
                        failures.append(f"{where}: {m.group(1)} has no {name}")
    assert not failures, "\n".join(failures)


LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def links() -> list[tuple[Path, int, str]]:
    out = []
    for page in PAGES:
        text = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), prose(page))  # no links inside inline code
        for m in LINK.finditer(text):
            out.append((page, text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


def test_relative_links_resolve():
    failures = []
    for page, number, target in links():
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            failures.append(f"{rel(page)}:{number}: {target}: no such file")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            failures.append(f"{rel(page)}:{number}: {target}: no heading '#{anchor}' in {rel(dest)}")
    assert not failures, "broken links:\n" + "\n".join(failures)


def test_quoted_repository_paths_exist_and_name_no_module_file():
    failures = []
    for page in PAGES:
        spans = code_spans(page)
        for block in fenced_blocks(page):
            if block.lang in SHELL_LANGS:
                spans += [(n, line) for n, line in command_lines(block)]
        for number, span in spans:
            for word in span.split():
                word = word.strip(".,;:()'\"")
                where = f"{rel(page)}:{number}: {word}"
                if word.startswith(REPO_PREFIXES):
                    path = word.split("::")[0]
                    if word.startswith("steadytune/") and path not in ALLOWED_PACKAGE_PATHS and page != ARCHITECTURE:
                        failures.append(f"{where}: names a file inside the package; name the concept (docs/architecture.md has the files)")
                    elif not any(True for _ in ROOT.glob(path.rstrip("/"))):
                        failures.append(f"{where}: no such path in the repository")
                elif re.match(r"^test_\w+\.py(::\w+)?$", word):
                    file_name, _, function = word.partition("::")
                    found = list((ROOT / "tests").rglob(file_name))
                    if not found:
                        failures.append(f"{where}: no such test file under tests/")
                    elif function and not any(f"def {function}(" in f.read_text(encoding="utf-8") for f in found):
                        failures.append(f"{where}: no test {function} in {file_name}")
    assert not failures, "\n".join(failures)
