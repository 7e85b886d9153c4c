"""A library refusing a value of one of its own options and listing the values it knows ("Precision 'bf16-true' is
invalid. Allowed precision values: (...)"): the program passes a value a newer release of the library added, so the
installed library is older than the one the program was written for. The library is the one whose file raised it
(the site-packages path of the traceback); the fix installs the release the program pins."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


# "Precision 'bf16-true' is invalid. Allowed precision values: (...)", "Strategy 'fsdp2' is not supported. Supported
# strategies: [...]", "'paged_adamw_8bit' is not a valid OptimizerNames" (an enum's own words)
_REFUSED = re.compile(r"(?i)(?:\b([A-Za-z_]\w{0,40}) )?['\"]([\w.+-]{1,60})['\"] is (?:invalid|not supported|not a valid "
                      r"\w{1,40})\b[.,;:]?\s{0,3}(?:(?:Allowed|Supported|Valid|Available|Expected)\b.{0,40}?(?::|one of|"
                      r"are|values?)|$)")
# the library whose file raised it: the last site-packages folder in the traceback (either slash)
_SITE = re.compile(r"(?i)site-packages[\\/]+([A-Za-z_][\w]*)[\\/]")


@rule("wheel-platform")
def option_value_newer_than_library(ctx: Context) -> Optional[Diagnosis]:
    """A value the installed library does not know, refused by the library's own check: the library is older than the
    program expects."""
    text = _text(ctx)
    if not re.search(r"(?i)\bis (?:invalid|not supported|not a valid)\b", text):
        return None
    lines = _lines_matching(ctx, _REFUSED)
    libraries = _SITE.findall(text)
    if not lines or not libraries:
        return None
    library = libraries[-1].replace("_", "-")
    m = _REFUSED.search(lines[0].line)
    option, value = (m.group(1) or "option").lower(), m.group(2)
    program = next((t for t in ctx.sheet.tools if t not in (library, "python", "torch", "pip")), None)
    caller = program or "the program"
    return _make("wheel-platform", f"the installed {library} is older than {caller} needs",
                 f"{caller} asks {library} for the {option} '{value}', which the installed {library} does not know "
                 f"(its own check lists the values it has): that value came with a newer {library} release than the "
                 "one installed",
                 f"install the {library} release {caller} pins: pip install -r requirements.txt in its folder (or pip "
                 f"uninstall -y {library}; pip install -U {library}), then pip show {library} to check; or pass one "
                 f"of the values the message lists", [ctx.line_fact(lines[0])], lines[:1])
