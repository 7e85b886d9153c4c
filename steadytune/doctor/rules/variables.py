"""Rules about variables: set where the process does not start (a service, sudo, a container, a notebook)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.facts import Fact
from steadytune.doctor.fixes import where_process_starts, set_variable
from steadytune.doctor.rules.base import (Context, Diagnosis, NOT_DETECTED, OVERRIDE, _lines_matching, _make, _text,
                                          rule)

# a GPU left unused, in the user's words: "it's not using it / the GPU", "uses only the CPU", 只用CPU
_GPU_UNUSED = (r"(?i)\bnot (?:using|use|utili[sz]ing) (?:it|the GPU|my GPU|the card)\b|\b(?:uses?|using|runs?|running) only "
               r"(?:on )?(?:the )?CPU\b|\bonly (?:uses?|using|runs? on|on) (?:the )?CPU\b|只(?:用|使用)了?\s*CPU")


# ---------------------------------------------------------------------------------------------------------
# A variable set where the process does not start
# ---------------------------------------------------------------------------------------------------------

@rule("env-not-applied")
def env_not_applied(ctx: Context) -> Optional[Diagnosis]:
    sheet = ctx.sheet
    symptoms = ctx.of("arch-missing", "visibility", "gpu-hang") + ctx.crashes() + ctx.no_gpu()
    override = ctx.override()
    if override is not None and not re.fullmatch(r"\d+\.\d+\.\d+", override.value.split("=", 1)[1].strip("\"'` ")):
        return None   # a value the runtime rejects (10.3, gfx1030): passing it on would not help (override-wrong)
    tool = ctx.tool(symptoms)
    # the user's words that the GPU is not used ("it's not using it", "uses only the CPU"): the symptom in prose
    unused = _lines_matching(ctx, NOT_DETECTED) or _lines_matching(ctx, _GPU_UNUSED)
    symptoms_or_said = symptoms or unused
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
        if asked and not served and (symptoms or unused) and tool == "ollama" and \
                asked[-1].detail in ("export", "prefix") and name == OVERRIDE and sheet.has("platform", "systemd"):
            value = asked[-1].value.split("=", 1)[1]
            return _make("env-not-applied", f"{name} is exported in a shell, but Ollama runs as a systemd service",
                         "a service does not read the shell's exports (.bashrc, a terminal session): the server "
                         f"runs without {name}", set_variable(name, value, sheet, tool), [asked[-1]],
                         symptoms_or_said)
    dropped = _dropped_by_sudo(ctx, symptoms) or _not_passed_to_container(ctx, symptoms)
    if dropped is not None:
        return dropped
    # Ollama names a GPU "not supported" only when no override reached its server: one set elsewhere did not arrive
    refused = [e for e in ctx.of("arch-missing") if re.search(r"amdgpu is not supported", e.line)]
    wanted = [f for f in sheet.of("env") if f.value.split("=", 1)[0] == OVERRIDE and f.detail != "server"
              and f.value.split("=", 1)[1]]
    if refused and wanted and tool == "ollama" and not sheet.is_windows and not any(
            f.detail == "server" and f.value.split("=", 1)[1] for f in sheet.of("env")):
        value = wanted[-1].value.split("=", 1)[1]
        where = where_process_starts(sheet, tool)
        if wanted[-1].detail == "docker":
            # it is in the container's settings already: the running container predates them, or docker read it as
            # the program's argument
            fix = (f"recreate the container so it takes {OVERRIDE}={value}: docker compose up -d --force-recreate "
                   f"(docker run: remove the old container and run again, with -e {OVERRIDE}={value} before the image "
                   "name; after it, -e goes to the program, not the container); check: docker exec <container> env")
        else:
            fix = set_variable(OVERRIDE, value, sheet, tool) if where == "container" else (
                f"put it in the service: sudo systemctl edit ollama.service, under [Service] Environment=\"{OVERRIDE}="
                f"{value}\", then sudo systemctl daemon-reload && sudo systemctl restart ollama (a hand-started "
                f"`ollama serve` reads only its own shell: export {OVERRIDE}={value} there)")
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


# the variables that decide which GPU code runs and which GPUs a process sees: the ones whose loss shows as a GPU
# failure (a symptom), so a symptom beside their loss is read as that loss
_GPU_VARIABLES = re.compile(r"^(?:HSA_OVERRIDE_GFX_VERSION(?:_\d+)?|HIP_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES|"
                            r"CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL)$")
# a command run under sudo that keeps the caller's environment (-E, --preserve-env) or sets the variable itself
_SUDO_RUN = re.compile(r"(?:^|[\s$#>])sudo\s+(?!-E\b|--preserve-env)(?!-\w*E)(?:-\w+\s+)*(?!\w+=)(\S+)")
_NOT_RUNS = ("usermod", "apt", "apt-get", "dnf", "yum", "pacman", "zypper", "modprobe", "dmesg", "reboot", "systemctl",
             "tee", "cat", "amdgpu-install", "dkms", "update-grub", "chmod", "chown", "ln", "cp", "mv", "rm", "mkdir",
             "gpasswd", "ldconfig", "journalctl", "lspci", "nano", "vim", "vi", "echo", "sh", "bash", "su", "-i", "-s",
             "docker", "podman")   # a container gets its variables from -e, whoever starts it (the container reading)


def _exported(ctx: Context) -> list:
    """Variables set in the user's shell (export, fish's set -x, a profile): what a child started from it inherits."""
    return [f for f in ctx.sheet.of("env") if f.detail in ("export", "fish") and f.value.split("=", 1)[1]
            and _GPU_VARIABLES.match(f.value.split("=", 1)[0])]


def _dropped_by_sudo(ctx: Context, symptoms: list) -> Optional[Diagnosis]:
    """Exported in the shell, then the program run with sudo: sudo's env_reset starts it with a clean environment,
    so the variable never reaches it (unless -E / --preserve-env or `sudo NAME=value cmd`)."""
    if not symptoms:
        return None
    for fact in _exported(ctx):
        name, value = fact.value.split("=", 1)
        runs = [(n, line) for n, line in enumerate(ctx.sheet.lines, 1) if n > fact.line_no
                and (m := _SUDO_RUN.search(line)) and m.group(1).split("/")[-1] not in _NOT_RUNS
                and f"{name}=" not in line]
        if runs:
            number, line = runs[0]
            return _make("env-not-applied", f"{name} is exported, but the program runs under sudo",
                         f"sudo starts the command with a reset environment (env_reset): {name}={value} from the "
                         "shell never reaches it",
                         f"pass it through: sudo {name}={value} <command> (or sudo --preserve-env={name} <command>); "
                         "better, run it without sudo: sudo usermod -aG render,video $USER, then log in again",
                         [fact, Fact("command", "sudo", number, line.strip())], symptoms)
    return None


def _not_passed_to_container(ctx: Context, symptoms: list) -> Optional[Diagnosis]:
    """Exported on the host, then the program run in a container started without it (no -e NAME): a container gets
    only the environment its run command or compose file gives it."""
    if not symptoms or not ctx.sheet.has("platform", "container"):
        return None
    given = {f.value.split("=", 1)[0] for f in ctx.sheet.of("env") if f.detail in ("docker", "systemd", "printed")}
    starts = [(n, line) for n, line in enumerate(ctx.sheet.lines, 1)
              if re.search(r"\b(?:docker|podman) run\b", line)]
    for fact in _exported(ctx):
        name, value = fact.value.split("=", 1)
        if name in given or not starts or any(name in line for _, line in starts):
            continue
        number, line = starts[0]
        return _make("env-not-applied", f"{name} is exported on the host, not in the container",
                     f"the container gets only the environment its run command gives it; {name}={value} exported in "
                     "the host's shell does not reach the program inside",
                     set_variable(name, value, ctx.sheet, ctx.tool(symptoms)),
                     [fact, Fact("command", "container", number, line.strip())], symptoms)
    return None


# ---------------------------------------------------------------------------------------------------------
# The ranks a launcher starts, without the environment of the shell that started the launcher
# ---------------------------------------------------------------------------------------------------------

# the process group asked for NCCL (or a rank's CUDA init) and the rank saw no GPU at all
_RANK_NO_GPU = re.compile(r"(?i)ProcessGroupNCCL is only supported with GPUs, no GPUs found|"
                          r"NCCL (?:backend )?(?:is )?(?:only supported|requires) (?:with )?GPUs")
# the process is one rank of a launched job: its log prefix, or the launcher named
_LAUNCHED = re.compile(r"(?i)\[rank\s*[=:]?\s*\d+\]|\brank\s*\d+\b|\bdeepspeed\b|\btorchrun\b|\btorch\.distributed\.run\b|"
                       r"\bpdsh\b|\bmpirun\b|\bsrun\b|\baccelerate launch\b|\bdetermined\b")


@rule("env-not-applied")
def launched_ranks_without_the_environment(ctx: Context) -> Optional[Diagnosis]:
    """A rank that finds no GPU when the process group starts: the job's ranks are started by a launcher (DeepSpeed's
    pdsh/MPI runners, a scheduler, ssh), whose children get the launcher's own environment, not the shell's. DeepSpeed's
    multi-node runner passes on only the variables named NCCL*, PYTHON*, UCX*, MV2* and MLFLOW* and those listed in a
    .deepspeed_env file (in $HOME or the working folder; deepspeed/launcher/constants.py): without LD_LIBRARY_PATH
    the ranks do not find the CUDA libraries, and torch in them counts no GPU."""
    lines = _lines_matching(ctx, _RANK_NO_GPU)
    text = "\n".join(ctx.sheet.lines)
    if not lines or not _LAUNCHED.search(text) or re.search(r"\+cpu\b|CUDA_VISIBLE_DEVICES=(?:\s|$|\"\"|'')", text):
        return None   # a CPU torch or an emptied mask is its own reading (torch-build, visibility)
    return _make("env-not-applied", "the launched ranks do not get the environment that finds the GPU",
                 "the rank that sets up the NCCL process group sees no GPU, while the machine has them: a launcher "
                 "starts the ranks with its own environment, not the shell's (DeepSpeed's multi-node runner passes "
                 "only NCCL*, PYTHON*, UCX*, MV2* and MLFLOW* variables and those in .deepspeed_env; pdsh, ssh and "
                 "a scheduler start clean shells), so LD_LIBRARY_PATH with the CUDA libraries (or CUDA_VISIBLE_DEVICES) "
                 "does not reach them",
                 "pass the variables to the ranks: for DeepSpeed write them to .deepspeed_env in $HOME or the "
                 "working folder (echo \"LD_LIBRARY_PATH=$LD_LIBRARY_PATH\" >> ~/.deepspeed_env, the same for PATH "
                 "and CUDA_VISIBLE_DEVICES where set); for mpirun -x LD_LIBRARY_PATH; for a scheduler export them in "
                 "the job script; then check in a rank: python -c 'import os, torch; print(torch.cuda.device_count(), "
                 "os.environ.get(\"LD_LIBRARY_PATH\"))' started by the same launcher",
                 [ctx.line_fact(lines[0])], lines)


# A framework's start-up variable set in a notebook where the framework never reads it
# ---------------------------------------------------------------------------------------------------------

# variables a framework reads once, when it is imported or first touches the GPU, and the import that reads them
# (JAX's GPU memory docs: XLA_PYTHON_CLIENT_PREALLOCATE / _MEM_FRACTION / _ALLOCATOR "must be set before JAX is
# imported"; TensorFlow's TF_FORCE_GPU_ALLOW_GROWTH and TF_CPP_MIN_LOG_LEVEL; torch's allocator reads
# PYTORCH_CUDA_ALLOC_CONF / PYTORCH_HIP_ALLOC_CONF at its first CUDA allocation)
_STARTUP_VARIABLES = (("XLA_PYTHON_CLIENT_", "jax"), ("XLA_FLAGS", "jax"), ("TF_", "tensorflow"),
                      ("PYTORCH_CUDA_ALLOC_CONF", "torch"), ("PYTORCH_HIP_ALLOC_CONF", "torch"))
_STARTUP_NAME = re.compile(r"\b(XLA_PYTHON_CLIENT_[A-Z_]+|XLA_FLAGS|TF_[A-Z_]+|PYTORCH_(?:CUDA|HIP)_ALLOC_CONF)\b")
# a notebook's shell escape: `!export NAME=value` runs in a throwaway subshell, the kernel never sees it
_SHELL_ESCAPE = re.compile(r"!\s*export\s+(?:XLA_|TF_|PYTORCH_)\w+=")
_IGNORED = re.compile(r"(?i)\b(?:is|are|was|were|gets?|got|being|seems?(?: to be)?) (?:completely |totally |simply )?"
                      r"ignored\b|\b(?:has|have|had) no effect\b|\bdoes(?:n.t| not) (?:work|take effect|apply|change)\b|"
                      r"\bnot (?:respected|honou?red|applied|taking effect)\b")
_NOTEBOOK = re.compile(r"(?i)\bcolab\b|\bjupyter\b|\bnotebook\b|\bipython\b|\bkaggle\b|\.ipynb\b")


@rule("env-not-applied")
def notebook_startup_variable(ctx: Context) -> Optional[Diagnosis]:
    """A framework's start-up variable said to be ignored in a notebook, or set there with `!export`: a `!` line runs
    in a subshell that ends at once, and os.environ set after the framework's import comes too late for it."""
    text = "\n".join(ctx.sheet.lines)
    escape = _lines_matching(ctx, _SHELL_ESCAPE)
    ignored = _lines_matching(ctx, _IGNORED) if _NOTEBOOK.search(text) else []
    said = escape or [e for e in ignored if _STARTUP_NAME.search(e.line)] or (
        ignored if _STARTUP_NAME.search(text) else [])
    if not said:
        return None
    name = _STARTUP_NAME.search(said[0].line) or _STARTUP_NAME.search(text)
    variable = name.group(1)
    framework = next(f for prefix, f in _STARTUP_VARIABLES if variable.startswith(prefix))
    value = re.search(re.escape(variable) + r"""\W{0,3}\s*=\s*["']?([\w.:,-]+)""", text)
    value = value.group(1) if value else "<value>"
    return _make("env-not-applied", f"{variable} is set where {framework} does not read it",
                 f"{framework} reads {variable} once, when it is imported (or first uses the GPU); in a notebook a "
                 "`!export` runs in a subshell that ends with that line, and an os.environ change after the import "
                 "(or in a runtime that already imported it) comes too late",
                 f"set it in Python before the first import: import os; os.environ[\"{variable}\"] = \"{value}\" as "
                 f"the first cell, above import {framework} (restart the runtime / kernel first so nothing has "
                 f"imported {framework} yet); %env {variable}={value} works the same way",
                 [], said[:1], confirmed=bool(escape))


# ---------------------------------------------------------------------------------------------------------
# A variable set in the service's unit, and the server started by hand
# ---------------------------------------------------------------------------------------------------------

# a model server started by hand in a terminal, the way its own CLI does it
_HAND_SERVE = re.compile(r"(?i)\b(ollama|vllm|lms|llamafile|local-ai|localai)\s+serve\b")
# the unit's own settings, or its file, named: where the user put the variable
_UNIT_SAID = re.compile(r"(?i)/etc/systemd/system/[\w@.-]+\.service|\bsystemctl edit\b|^\s*Environment=|\[Service\]|"
                        r"\b[\w-]+\.service\b|override\.conf\b", re.M)
_NOT_STARTED_BY_SYSTEMD = re.compile(r"(?i)\bsystemctl (?:start|restart|enable --now)\b")
# a variable named with its value, also with spaces around the = as prose writes it ("OLLAMA_HOST = 0.0.0.0:11434")
_NAMED_SETTING = re.compile(r"\b([A-Z][A-Z0-9]*_[A-Z0-9_]+)\s*=\s*[\"']?([^\s\"']+)")


@rule("env-not-applied")
def unit_variable_hand_started_server(ctx: Context) -> Optional[Diagnosis]:
    """The variable is in the service's unit (/etc/systemd/system/NAME.service, an Environment= line, systemctl edit),
    but the server that runs was started by hand (`ollama serve` in a terminal): systemd hands a unit's Environment=
    only to the process it starts itself (systemd.exec(5), "Environment="), so the hand-started server runs without it;
    the same variable exported in that shell works. Ollama's FAQ ("Setting environment variables on Linux") sets
    them with systemctl edit and then restarts the service for that reason."""
    text = "\n".join(ctx.sheet.lines)
    # (a unit's ExecStart= line or the journal names the same command systemd runs: not a hand-started one)
    serve = next((m for line in ctx.sheet.lines if not re.search(r"(?i)ExecStart|systemd\[|/bin/", line)
                  for m in [_HAND_SERVE.search(line)] if m), None)
    unit = _UNIT_SAID.search(text)
    if not serve or not unit or _NOT_STARTED_BY_SYSTEMD.search(text):
        return None
    tool = serve.group(1).lower()
    # the variable: one the unit or the user names with a value, the longest value said for it
    values: dict[str, str] = {}
    for m in _NAMED_SETTING.finditer(text):
        name, value = m.group(1), m.group(2).rstrip(".,;)")
        if len(value) > len(values.get(name, "")):
            values[name] = value
    prefix = {"ollama": "OLLAMA_", "vllm": "VLLM_", "lms": "LMS_"}.get(tool, "")
    names = [n for n in values if prefix and n.startswith(prefix)] or list(values)
    if not names:
        return None
    name = names[0]
    value = values[name]
    said = _lines_matching(ctx, re.escape(name)) or _lines_matching(ctx, _HAND_SERVE)
    service = re.search(r"(?i)/etc/systemd/system/([\w@.-]+)\.service", text)
    unit_name = service.group(1) if service else ("ollama" if tool == "ollama" else "<the service>")
    diagnosis = _make("env-not-applied", f"{name} is in the service's unit, but the server was started by hand",
                      f"{name}={value} is set for the systemd service ({unit_name}.service); systemd passes a unit's "
                      f"Environment= only to the process it starts itself, and a `{serve.group(0)}` typed in a "
                      "terminal reads the shell's environment instead, so it runs without it",
                      f"stop the hand-started server and let systemd run it with the unit's setting: sudo systemctl "
                      f"daemon-reload && sudo systemctl restart {unit_name} (check: systemctl show {unit_name} "
                      f"--property=Environment, journalctl -u {unit_name}); or, to start it by hand, export it in that "
                      f"shell first: export {name}={value}, then {serve.group(0)}", [ctx.line_fact(said[0])] if said
                      else [], said)
    diagnosis.rank = 0   # the setting never reached the running server: the symptoms (WSL, no GPU) come after it
    return diagnosis


# ---------------------------------------------------------------------------------------------------------
# A server program's variable put in a shell's start-up file, while the program runs as a service
# ---------------------------------------------------------------------------------------------------------

# programs whose Linux install runs them as a systemd service, never from the user's shell: the unit, and the prefix
# of the variables the server itself reads. Ollama's install.sh creates ollama.service (its FAQ: "Setting environment
# variables on Linux" uses systemctl edit ollama.service); LocalAI's install.sh creates local-ai.service (its variables
# also in /etc/localai.env); dockerd pulls images itself, so the proxy variables a pull needs go to docker.service
# (Docker's "Configure the daemon to use a proxy": a drop-in under docker.service.d)
_SERVICES = {"ollama": ("ollama", r"OLLAMA_\w+"),
             "local-ai": ("local-ai", r"LOCALAI_\w+"),
             "docker": ("docker", r"(?:HTTPS?_PROXY|NO_PROXY|https?_proxy|no_proxy)")}
_PROGRAM_NAMED = {"ollama": r"(?i)\bollama\b", "local-ai": r"(?i)\blocal-?ai\b",
                  "docker": r"\bdocker (?:pull|push|login)\b|\bdockerd\b"}
# the GPU variables any of these servers reads too (which GPUs, the override), set the same wrong way
_GPU_NAMES = r"HSA_OVERRIDE_GFX_VERSION|HIP_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES|CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL"
# a shell's start-up file, or an export in a shell: what a service never reads
_SHELL_FILE = re.compile(r"(?i)(?:~/|\$HOME/)?\.?\b(?:bashrc|bash_profile|zshrc|zprofile)\b|(?:~/|\$HOME/|(?<!\S))\.profile\b|"
                         r"/etc/profile\b|\bconfig\.fish\b")
_EXPORT = re.compile(r"\b(?:export|set -\w*x\w*)\s+([A-Za-z][A-Za-z0-9_]*)[= ][\"'`]?([^\"'`\s]+)")
# the user's words that the setting is not taken ("doesnt work", "is ignored", "still stores them in ...")
_NOT_TAKEN = re.compile(r"(?i)\bdoes\s?n[o'’]?t (?:seem to )?(?:work|take|apply|use|stor\w*|sav\w*|chang\w*|pick|read|"
                        r"respect|listen|see)\w*|\b(?:is|are|gets?) (?:being )?ignored\b|\bno effect\b|\bnot (?:working|"
                        r"taking effect|applied|respected|picked up)\b|\bstill (?:being |gets? )?(?:use[sd]?|stor\w*|sav\w*|"
                        r"listen\w*|download\w*|go\w*|put\w*|writ\w*|bind\w*|load\w*)\b|\bdon'?t work\b|\bcan'?t get\b|\bnot (?:stored|saved) (?:there|in)\b")
# per variable: what else the service needs once the variable reaches it
_AFTER = {"OLLAMA_MODELS": "; the service runs as the ollama user, which must own the folder: sudo chown -R "
                           "ollama:ollama {value}",
          "OLLAMA_HOST": "; check where it listens: ss -ltnp | grep ollama"}


@rule("env-not-applied")
def service_reads_no_shell_profile(ctx: Context) -> Optional[Diagnosis]:
    """A server program's variable exported in a shell or put in ~/.bashrc (~/.profile, ~/.zshrc), said not to take
    effect, where the program's Linux install runs it as a systemd service: systemd starts a service with the
    environment of its unit, never a login shell's start-up files, so the running server never sees the export (a
    server started by hand in that shell would). On macOS the Ollama app likewise reads launchctl's environment."""
    text = _text(ctx)
    program = next((p for p, named in _PROGRAM_NAMED.items() if re.search(named, text)), None)
    if program is None:
        return None
    if program != "docker" and (ctx.sheet.has("platform", "container") or
                                re.search(r"(?i)\bdocker (?:run|compose)\b|\s-e [A-Z]", text)):
        return None   # the server in a container gets its variables from -e / environment: (the container reading)
    unit, own = _SERVICES[program]
    names = re.compile(rf"^(?:{own}|{_GPU_NAMES})$")
    exported = [(m.group(1), m.group(2).rstrip(".,;)")) for line in ctx.sheet.lines for m in _EXPORT.finditer(line)
                if names.match(m.group(1))]
    said = _lines_matching(ctx, _NOT_TAKEN)
    if not exported or not said:
        return None
    if not _SHELL_FILE.search(text) and not any(f.detail in ("export", "fish") for f in ctx.sheet.of("env")) and \
            not re.search(r"(?m)^\W*export\s", text):
        return None
    # a server started by hand in that shell does get the export: not this reading
    if re.search(rf"(?i)\b{re.escape(program)}\s+serve\b|\blocal-ai run\b|\bdockerd\s", text) and \
            not re.search(r"(?i)address already in use", text):
        return None
    name, value = exported[-1]
    if name == "OLLAMA_HOST" and not re.match(r"(?:0\.0\.0\.0|\[?::\]?)?(?::\d+)?$", value):
        return None   # another machine's address: the client side's variable (the CLI reads it from the shell)
    where = _SHELL_FILE.search(text)
    found = where.group(0) if where else ""
    source = ("~/.config/fish/config.fish" if found.endswith("fish") else "~/." + found.lstrip(".")
              if re.match(r"\.?\w", found) else found) if where else "the shell"
    if ctx.sheet.has("os", "macos") or re.search(r"(?i)\bmacOS\b|\bmac ?book\b|\bon (?:a )?mac\b", text):
        fix = (f"set it for the app: launchctl setenv {name} {value}, then quit and restart the {program} app "
               "(it reads launchctl's environment, not the shell's)")
    else:
        after = _AFTER.get(name, "").format(value=value)
        fix = (f"set it on the service: sudo systemctl edit {unit}.service and add under [Service] "
               f"Environment=\"{name}={value}\", then sudo systemctl daemon-reload && sudo systemctl restart {unit}"
               f"{after}; check with systemctl show {unit} --property=Environment (the export in {source} reaches "
               f"only programs started from that shell, such as a hand-run `{program} serve`)"
               if program != "docker" else
               f"give it to the daemon: sudo systemctl edit docker.service and add under [Service] "
               f"Environment=\"{name}={value}\", then sudo systemctl daemon-reload && sudo systemctl restart docker "
               f"(check: systemctl show docker --property=Environment); the pull is done by dockerd, which never "
               f"reads {source}")
    return _make("env-not-applied", f"{name} is set in {source}, but {program} runs as a systemd service",
                 f"on Linux {program} runs as the systemd service {unit}.service; systemd starts it with its unit's "
                 f"environment and never reads a shell's start-up files or exports, so {name}={value} never reaches "
                 "the running server", fix, [], said[:1])


# ---------------------------------------------------------------------------------------------------------
# A shell variable, not an environment variable: `NAME=value && command`
# ---------------------------------------------------------------------------------------------------------

# `NAME=value && cmd` or `NAME=value; cmd` at the start of a command (a shell line, a Dockerfile's RUN, after another
# `&&`): POSIX shells make a bare assignment a shell variable of that shell, which a later command does not inherit
# unless it is exported; only `NAME=value cmd` (one simple command) or `export NAME=value` hands it on (POSIX shell
# command language, "Simple Commands"; bash's manual, "Environment"). Build switches read by setup.py or CMake
# (FORCE_CUDA, TORCH_CUDA_ARCH_LIST, CUDA_HOME, CMAKE_ARGS, MAX_JOBS) are the usual losses.
_SHELL_LOCAL = re.compile(r"(?:^|\bRUN\s+|&&\s*|;\s*|^\s*[$#>]\s*)(?<!export )(?<!ENV )([A-Z][A-Z0-9_]{2,})=(\"[^\"]*\"|'[^']*'|"
                          r"[^\s;&|]+)\s*(?:&&|;)\s*(?!export\b|set\b|echo\b|env\b|printenv\b)"
                          r"((?:sudo\s+)?[\w./-]+(?:\s+[^\s;&|]+){0,3})")
# a build or run started by that next command: the program that should have read the variable
_READS = re.compile(r"(?i)^(?:sudo\s+)?(?:pip3?|python3?|conda|cmake|make|ninja|cargo|npm|\./\S+|bash|sh|torchrun|"
                    r"accelerate|deepspeed|ollama|llama-\S+|uv)\b")


@rule("env-not-applied")
def assignment_not_exported(ctx: Context) -> Optional[Diagnosis]:
    """A variable assigned as a shell variable and then a separate command run (`NAME=value && pip install ...`):
    the command never sees it, so the build or run goes on as though it were unset."""
    text = _text(ctx)
    for number, line in enumerate(ctx.sheet.lines, 1):
        m = _SHELL_LOCAL.search(line)
        if m is None or not _READS.match(m.group(3)):
            continue
        name, value, command = m.group(1), m.group(2), m.group(3).strip()
        if re.search(rf"\bexport\s+(?:\w+=\S*\s+)*{name}\b|\bENV\s+{name}\b|\$\{{?{name}\b|\bset -a\b", text):
            continue   # exported elsewhere, set by the Dockerfile, or expanded by the shell itself: it arrives
        rest = line[m.end(2):].strip().lstrip("&;").strip()
        prefix = "RUN " if re.search(r"\bRUN\s", line[:m.start(1)]) else ""
        dockerfile = (f"; in a Dockerfile also ENV {name}={value} before the RUN (the whole image's builds see it)"
                      if prefix else "")
        return _make("env-not-applied", f"{name} is a shell variable: {command.split()[0]} never sees it",
                     f"`{name}={value} && ...` (or `;`) only sets a variable of the shell itself; it is not exported, "
                     f"so {command.split()[0]}, started as a separate command, runs without {name} (a build then "
                     "takes its default, as though the variable were unset)",
                     f"give it to the command itself: {prefix}{name}={value} {rest} (no && between them), or "
                     f"{prefix}export {name}={value} && {rest}{dockerfile}; then rebuild (pip install --no-cache-dir "
                     "--force-reinstall, so pip does not reuse the build made without it)",
                     [Fact("env", f"{name}={value}", number, line.strip())], [ErrorLine(number, line.strip(), None)])
    return None
