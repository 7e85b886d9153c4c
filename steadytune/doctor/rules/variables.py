"""Rules about variables: set where the process does not start (a service, sudo, a container, a notebook)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.fixes import where_process_starts, set_variable
from steadytune.doctor.rules.base import Context, Diagnosis, OVERRIDE, _make, rule


# ---------------------------------------------------------------------------------------------------------
# A variable set where the process does not start
# ---------------------------------------------------------------------------------------------------------

@rule("env-not-applied")
def env_not_applied(ctx: Context) -> Optional[Diagnosis]:
    sheet = ctx.sheet
    symptoms = ctx.of("arch-missing", "visibility", "gpu-hang") + ctx.crashes() + ctx.no_gpu()
    tool = ctx.tool(symptoms)
    for fact in sheet.of("env"):
        name, value = fact.value.split("=", 1)
        if fact.detail == "fish-unexported":
            return _make("env-not-applied", f"{name} is set but not exported",
                         f"fish's `set -U {name} {value}` makes a universal variable that is not exported, so the "
                         "programs the shell starts never see it",
                         f"export {name}={value} (in fish: set -Ux {name} {value})", [fact], symptoms)
    for name in sorted({f.value.split("=", 1)[0] for f in sheet.of("env")}):
        settings = [f for f in sheet.of("env") if f.value.split("=", 1)[0] == name]
        served = [f for f in settings if f.detail == "server"]
        asked = [f for f in settings if f.detail not in ("server", "printed", "said") and f.value.split("=", 1)[1]]
        if served and asked and not served[-1].value.split("=", 1)[1]:
            value = asked[-1].value.split("=", 1)[1]
            return _make("env-not-applied", f"{name} never reached the {tool or 'server'} process",
                         f"{name}={value} is set ({asked[-1].detail}), but the server's own environment shows it "
                         "empty: the process that runs the model never received it",
                         set_variable(name, value, sheet, tool), [asked[-1], served[-1]], symptoms)
        if asked and not served and symptoms and tool == "ollama" and asked[-1].detail in ("export", "prefix") \
                and name == OVERRIDE and sheet.has("platform", "systemd"):
            value = asked[-1].value.split("=", 1)[1]
            return _make("env-not-applied", f"{name} is exported in a shell, but Ollama runs as a systemd service",
                         "a service does not read the shell's exports (.bashrc, a terminal session): the server "
                         f"runs without {name}", set_variable(name, value, sheet, tool), [asked[-1]], symptoms)
    # Ollama names a GPU "not supported" only when no override reached its server: one set elsewhere did not arrive
    refused = [e for e in ctx.of("arch-missing") if re.search(r"amdgpu is not supported", e.line)]
    wanted = [f for f in sheet.of("env") if f.value.split("=", 1)[0] == OVERRIDE and f.detail != "server"
              and f.value.split("=", 1)[1]]
    if refused and wanted and tool == "ollama" and not sheet.is_windows and not any(
            f.detail == "server" and f.value.split("=", 1)[1] for f in sheet.of("env")):
        value = wanted[-1].value.split("=", 1)[1]
        where = where_process_starts(sheet, tool)
        fix = set_variable(OVERRIDE, value, sheet, tool) if where == "container" else (
            f"put it in the service: sudo systemctl edit ollama.service, under [Service] Environment=\"{OVERRIDE}="
            f"{value}\", then sudo systemctl daemon-reload && sudo systemctl restart ollama (a hand-started `ollama "
            f"serve` reads only its own shell: export {OVERRIDE}={value} there)")
        return _make("env-not-applied", f"{OVERRIDE} never reached the Ollama server",
                     f"{OVERRIDE}={value} is set ({wanted[-1].detail}), yet the server still calls the GPU not "
                     "supported, which it does only when no override is in its own environment",
                     fix, [wanted[-1], ctx.line_fact(refused[0])], refused + symptoms)
    # a notebook or script that sets the variable after torch (or HIP) has already started
    imported = next((f for f in sheet.of("tool") if f.value == "torch" and re.search(r"^\s*import torch|^\s*from torch",
                                                                                       f.line)), None)
    late = [f for f in sheet.of("env") if f.detail == "python" and imported and f.line_no > imported.line_no]
    if late and symptoms:
        name, value = late[0].value.split("=", 1)
        return _make("env-not-applied", f"{name} is set after torch was imported",
                     "HIP reads its variables once, when torch first initialises the GPU; a later os.environ change "
                     "does nothing in that process",
                     f"set it before the import: os.environ[\"{name}\"] = \"{value}\" above import torch (restart "
                     "the kernel), or export it before starting Python", [imported, late[0]], symptoms)
    return None
