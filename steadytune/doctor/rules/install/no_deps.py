"""A package upgraded with pip's --no-deps, then an import that fails: --no-deps installs the new release alone, so
the dependencies stay at the releases the old one needed; when the new release needs newer ones (or a module that
moved), its imports fail. The paste's own install line is the evidence, and the fix is the same install without
--no-deps (then the packages its instructions pin without dependencies, if any)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.packages import read_import_failure
from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


# "pip install --upgrade --no-deps "unsloth[colab-new] @ git+https://..."", "!pip install -U --no-deps pkg==1.2"
_NO_DEPS_INSTALL = re.compile(r"(?i)\bpip3? install\b(?=[^\n]*--no-deps)[^\n]*")
_OPTION = re.compile(r"^-")


def _installed_by(line: str) -> Optional[str]:
    """The first package a pip install line names (its distribution name, without extras, pin or URL)."""
    words = line.split(" install", 1)[1].split()
    for word in words:
        word = word.strip("\"'`")
        if not word or _OPTION.match(word) or word == "@":
            continue
        if "://" in word:   # git+https://github.com/huggingface/trl.git: the repository's name
            repository = re.search(r"/([A-Za-z0-9][\w.-]*?)(?:\.git)?(?:@[\w.-]+)?/?$", word.split("#")[0])
            if repository:
                return repository.group(1)
            continue
        name = re.match(r"[A-Za-z0-9][\w.-]*", word)
        if name:
            return name.group(0)
    return None


@rule("wheel-platform")
def upgraded_without_dependencies(ctx: Context) -> Optional[Diagnosis]:
    """An import failure after an upgrade with --no-deps: the upgraded package's dependencies were left behind."""
    if "--no-deps" not in _text(ctx):
        return None
    installs = _lines_matching(ctx, _NO_DEPS_INSTALL)
    upgrades = [line for line in installs if re.search(r"(?i)\s(?:-U|--upgrade|--force-reinstall)\b|git\+", line.line)]
    failure = read_import_failure(ctx.sheet.lines)
    if not upgrades or failure is None:
        return None
    package = _installed_by(_NO_DEPS_INSTALL.search(upgrades[0].line).group(0))
    if package is None:
        return None
    gone = f"{failure.name} from {failure.module}" if failure.name else failure.module
    return _make("wheel-platform", f"{package} was upgraded without its dependencies",
                 f"pip install --no-deps upgraded {package} alone: the packages it depends on stayed at the releases "
                 f"the old {package} needed, and the new one needs others (its import of {gone} fails)",
                 f"install {package} again without --no-deps so pip brings its dependencies to the releases it needs "
                 f"(the same pip install line, --no-deps left out), then pip check; where {package}'s instructions pin "
                 "some packages with --no-deps (pip install --no-deps trl peft accelerate), run that line after it; or "
                 f"install the missing dependency itself (pip install -U {failure.module.split('.')[0]})",
                 [ctx.line_fact(upgrades[0])], upgrades[:1] + [ErrorLine(failure.line_no, failure.line, None)])
