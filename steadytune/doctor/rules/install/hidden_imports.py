"""An import error a package's own __init__ hides: the package imports its classes inside try/except and swallows
what failed, so the program sees only "cannot import name X from the package". What actually failed is another
import beneath it, most often a compiled extension built against another torch. A table, one row per package whose
__init__ does this, with the import that shows the hidden error and the remedy its maintainers give."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule


@dataclass(frozen=True)
class HidingInit:
    module: str        # the module whose __init__ swallows the error
    names: str         # a regex for the names it then lacks
    probe: str         # the import that raises the hidden error
    hidden: str        # what the hidden error most often is
    fix: str
    source: str


HIDING_INITS = (
    # LLaVA's llava/model/__init__.py imports its Llava*ForCausalLM classes in a try/except (haotian-liu/LLaVA issue
    # 1101: "The try-except in the __init__ has hidden the real issues"); its maintainer found the usual hidden error
    # to be flash-attn compiled against another torch, reinstalled with --no-build-isolation --no-cache-dir (issue 1034)
    HidingInit("llava.model", r"Llava\w*(?:ForCausalLM|Config)",
               "python -c 'from llava.model.language_model.llava_llama import LlavaLlamaForCausalLM'",
               "flash-attn's compiled extension built against another torch (an undefined symbol when it loads)",
               "pip uninstall -y flash-attn; pip install flash-attn --no-build-isolation --no-cache-dir (it rebuilds "
               "against the installed torch instead of reusing the cached build)",
               "haotian-liu/LLaVA issues 1034 and 1101"),
)

_CANNOT_IMPORT = re.compile(r"cannot import name ['\"]?(\w+)['\"]? from ['\"]?([A-Za-z_][\w.]*)")


def hidden_import(module: str, name: Optional[str]) -> Optional[HidingInit]:
    """The table's row for a name missing from a module whose __init__ hides its own import errors."""
    return next((row for row in HIDING_INITS if row.module == module and name and re.fullmatch(row.names, name)), None)


@rule("abi-mismatch")
def import_error_hidden_by_init(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a "cannot import name" of a class from a module the table knows to swallow its imports' errors. The
    missing class says nothing by itself; the import beneath it failed, and the table names what that usually is."""
    for line in _lines_matching(ctx, _CANNOT_IMPORT.pattern):
        found = _CANNOT_IMPORT.search(line.line)
        row = hidden_import(found.group(2), found.group(1))
        if row is None:
            continue
        return _make("abi-mismatch", f"{row.module}'s __init__ hides the import that failed",
                     f"{row.module.replace('.', '/')}/__init__.py imports {found.group(1)} inside try/except, so the "
                     f"error of that import is swallowed and only the missing name shows; the hidden error is most "
                     f"often {row.hidden} ({row.source})",
                     f"{row.probe} shows the hidden error; where it is flash-attn's: {row.fix}",
                     [ctx.line_fact(line)], [line])
    return None
