"""A GRPO roll-out's rows as episodes: one generated turn (a plain completion), or several with tool calls between.

Multi-turn tool episodes (`tools`: the user's functions; TRL's `max_tool_calling_iterations`): the policy completes
its prompt; where a turn ends with its stop token and reads as tool calls in the template's own format
(data/tools.read_calls: `<tool_call>` JSON for Qwen, `Action:` / `Action Input:` for the default format, ...), each
call runs (`Toolbox.call`) and the results go back to the model as the template writes a tool result (its
observation slot, LLaMA-Factory's tool-role tokens: data/templates.Template.tool_result_parts), after what the
function slot writes past the stop token; the model then takes its next turn from there. The episode ends at a turn
that calls no tool, at max_tool_calling_iterations tool turns, or when max_completion_length tokens (the model's and
the tool results' together, as TRL counts them) are spent. The row's completion is the whole episode; the tool
results and the template's text around them are marked as not the model's (`trained`), so they are left out of the
loss, as TRL's tool_mask does. Rewards are computed once per episode, on its text.

Tools are the user's code, under the rules of reward functions (stages/user_code.py): named in the user's own config
or command line (never a run folder's files: training/folder_config.py), called in the main thread within
`tool_timeout` seconds. A call that fails is the model's business (a wrong argument, an unknown name): the model sees
`{"error": "<exception type>: <message>"}` as the result, as TRL answers a failed call, the step counts it
(tools/failure_frequency), and the run says once per tool and exception type which call failed and why.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from steadytune.config import ConfigError
from steadytune.data.control_text import ClientText, UnsafeText
from steadytune.data.templates import Template
from steadytune.data.tools import read_calls
from steadytune.errors import RunInterrupted, UserError
from steadytune.model.decode.sampling import mix_key
from steadytune.stages.user_code import (UserCodeTimeout, deadline, find_module, find_user_entry, load_module,
                                         load_user_function, public_functions)


@dataclass
class Generated:
    """What a roll-out generated, per row: its tokens after the prompt, and which of them the model wrote."""
    ids: list[list[int]]
    truncated: list[bool]                  # no stop token within max_completion_length
    nonfinite: list[bool]                  # a token was drawn from logits that were not finite
    trained: Optional[list[list[bool]]] = None   # per token: the model's (None: every token is)
    tool_calls: list[int] = field(default_factory=list)      # per row (tool episodes)
    tool_failures: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, completions) -> "Generated":
        """From the decoder's Completions (model/decode/complete.py): one turn, every token the model's."""
        n = len(completions.ids)
        return cls(list(completions.ids), list(completions.truncated),
                   list(completions.nonfinite or [False] * n))

    def model_tokens(self, i: int) -> int:
        return len(self.ids[i]) if self.trained is None else sum(self.trained[i])


# ---------------------------------------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------------------------------------

@dataclass
class Toolbox:
    functions: dict[str, Callable]
    timeout: float = 0.0
    _said: set = field(default_factory=set)
    _speaks: bool = field(default_factory=lambda: int(os.environ.get("RANK", "0")) == 0)

    def call(self, name: str, arguments: Any, where: str) -> tuple[str, bool]:
        """-> (the result as the model reads it, whether the call failed)."""
        f = self.functions.get(name)
        if f is None:
            return self.failed(name, "LookupError", f"no tool named {name!r}; the tools are "
                                f"{', '.join(sorted(self.functions))}", where)
        if not isinstance(arguments, dict):
            return self.failed(name, "TypeError", f"arguments must be a JSON object, got {type(arguments).__name__}",
                                where)
        try:
            with deadline(self.timeout, f"tool {name}", "tool_timeout"):
                result = f(**arguments)
        except UserCodeTimeout:
            return self.failed(name, "TimeoutError", f"did not return within {self.timeout:g} s", where)
        except RunInterrupted:
            raise
        except (Exception, SystemExit) as e:   # noqa: BLE001 - the user's code: whatever it raised is the result
            return self.failed(name, type(e).__name__, _message(e), where)
        try:
            return as_text(result), False
        except (Exception, SystemExit) as e:   # noqa: BLE001 - the user's object: its __str__ or __repr__ failed
            return self.failed(name, "TypeError", f"returned a {type(result).__name__} that is neither text nor JSON "
                                f"({type(e).__name__}: {_message(e)}); return a str, or a dict or list of them",
                                where)

    def failed(self, name: str, kind: str, message: str, where: str) -> tuple[str, bool]:
        if (name, kind) not in self._said and self._speaks:
            self._said.add((name, kind))
            print(f"warning: grpo: tool {name} at {where}: {kind}: {message} (the model reads it as the call's result; "
                  "tools/failure_frequency counts failed calls; said once per tool and error)", file=sys.stderr,
                  flush=True)
        return json.dumps({"error": f"{kind}: {message}"}, ensure_ascii=False), True

    def check_definitions(self, tools_json: Optional[str]) -> None:
        """A prompt's tool definitions (its `tools` column) must name functions of the toolbox: the model would call
        them, and every call would fail."""
        if not tools_json:
            return
        try:
            listed = json.loads(tools_json)
        except ValueError:
            return   # the data layer has refused invalid JSON already
        functions = [t.get("function", t) if isinstance(t, dict) else None for t in
                     (listed if isinstance(listed, list) else [listed])]
        names = [f.get("name") for f in functions if isinstance(f, dict)]
        missing = [n for n in names if isinstance(n, str) and n and n not in self.functions]
        if missing:
            raise UserError(f"tools: the prompts' tool definitions name {', '.join(missing)}, which the tools given "
                            f"({', '.join(sorted(self.functions)) or 'none'}) do not have")


def as_text(result: Any) -> str:
    """A tool's return value as the model reads it: text as it is, anything else as JSON (TRL's rule), objects JSON
    has no form for by their str. Lone surrogates (text decoded with errors="surrogateescape") become U+FFFD: the
    tokenizer cannot encode them."""
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
    return _SURROGATES.sub("\ufffd", text)


_SURROGATES = re.compile("[\ud800-\udfff]")


def _message(error: BaseException) -> str:
    """An exception's message on one line, cut to 200 characters (its own __str__ may fail: the user's class)."""
    try:
        return " ".join(str(error).split())[:200]
    except Exception:   # noqa: BLE001
        return "(its message cannot be shown)"


def check_tools_found(entries: Any) -> None:
    """`tools` before the data and the weights load: each entry a module or file that exists (not yet imported: its
    code runs once, in load_toolbox)."""
    if not entries:
        return
    for entry in [e.strip() for e in entries.split(",")] if isinstance(entries, str) else list(entries):
        entry = str(entry)
        if ":" in entry and not _is_windows_path(entry):
            find_user_entry(entry, "tools")
        else:
            find_module(entry, "tools", entry)


def load_toolbox(entries: Any, timeout: float) -> Optional[Toolbox]:
    """`tools`: a list (or comma list) of `module`, `path/file.py` (every public function it defines) or
    `module:function` / `path/file.py:function`. None when unset."""
    if not entries:
        return None
    entries = [e.strip() for e in entries.split(",")] if isinstance(entries, str) else list(entries)
    functions: dict[str, Callable] = {}
    for entry in entries:
        entry = str(entry)
        if ":" in entry and not _is_windows_path(entry):
            found = {entry.rpartition(":")[2].split(".")[-1]: load_user_function(entry, "tools")}
        else:
            found = public_functions(load_module(entry, "tools", entry))
            if not found:
                raise ConfigError(f"tools: {entry!r} defines no public function")
        for name, f in found.items():
            if name in functions and functions[name] is not f:
                raise ConfigError(f"tools: two tools are named {name!r}")
            functions[name] = f
    return Toolbox(functions, timeout)


def _is_windows_path(entry: str) -> bool:
    return len(entry) > 2 and entry[1] == ":" and entry[2] in "\\/" and entry.count(":") == 1


# ---------------------------------------------------------------------------------------------------------
# Episodes
# ---------------------------------------------------------------------------------------------------------

GenerateTurn = Callable[[list[list[int]], int, list[int]], Any]   # (contexts, max new tokens, keys) -> Completions


def longest_token(tokenizer: Any) -> int:
    """The most characters one token stands for (its vocabulary entry's length bounds it: a byte-level entry holds a
    character per byte, a byte-fallback one `<0x0A>` six for one): a text longer than n times this is over n tokens."""
    return max(map(len, tokenizer.get_vocab()), default=1) or 1


def encode_result(untrusted: ClientText, template: Template, after: list, content: str, toolbox: Toolbox,
                  where: str) -> list[int]:
    """What follows a tool-call turn, its results marked as untrusted text -> ids. A result that this tokenizer can
    only encode as a control token, even as plain text, reaches the model as an error instead."""
    try:
        return untrusted.encode_parts(after + template.tool_result_parts(untrusted.mark(content)))
    except UnsafeText:   # (its message quotes the control token: not a text to hand the model)
        error, _ = toolbox.failed("results", "ValueError", "a result holds text that this tokenizer encodes as a "
                                   "control token even as plain text", where)
        return untrusted.encode_parts(after + template.tool_result_parts(error))


def turn_key(key: int, turn: int) -> int:
    """The noise key of a row's turn: its own key for the first turn (a one-turn episode is the plain completion)."""
    return key if turn == 0 else mix_key(key, turn)


def run_episodes(generate_turn: GenerateTurn, prompts: Sequence[Sequence[int]], keys: Sequence[int],
                 template: Template, tokenizer: Any, toolbox: Toolbox, budget: int,
                 max_iterations: Optional[int], where: str) -> Generated:
    """Every prompt's episode (module docstring): turns generated for all open rows at once, tools called between."""
    n = len(prompts)
    ids: list[list[int]] = [[] for _ in range(n)]
    trained: list[list[bool]] = [[] for _ in range(n)]
    truncated, nonfinite = [False] * n, [False] * n
    calls, failures = [0] * n, [0] * n
    stop_ids = set(template.stop_token_ids())
    after = template.after_call_parts()
    # A tool's result is text from outside (a web page, a file): its control-token strings are encoded as text, as
    # serve encodes a client's (data/control_text.py), so a result holding "<|im_end|><|im_start|>assistant" cannot
    # end its turn and write the model's.
    untrusted = ClientText(tokenizer, template)
    longest = longest_token(tokenizer)
    active, turn = list(range(n)), 0
    while active:
        room = [budget - len(ids[i]) for i in active]
        done = generate_turn([list(prompts[i]) + ids[i] for i in active], max(room),
                             [turn_key(keys[i], turn) for i in active])
        still = []
        for j, i in enumerate(active):
            made = list(done.ids[j])
            cut = len(made) > room[j]
            made = made[:room[j]]
            ids[i] += made
            trained[i] += [True] * len(made)
            nonfinite[i] = nonfinite[i] or bool(done.nonfinite and done.nonfinite[j])
            stopped = bool(made) and made[-1] in stop_ids and not cut
            if not stopped or nonfinite[i]:
                truncated[i] = not stopped
                continue
            if max_iterations is not None and turn >= max_iterations:
                continue   # the last turn TRL allows: whatever it says is the answer
            text = tokenizer.decode(made[:-1], skip_special_tokens=False)
            parsed = read_calls(template.function_format, text)
            if parsed is None:
                continue   # an answer: the episode is over
            results = []
            for name, arguments in parsed:
                result, failed = toolbox.call(name, arguments, where)
                results.append(result)
                calls[i] += 1
                failures[i] += failed
            content = "\n".join(results)
            if len(content) > (budget - len(ids[i])) * longest:
                continue   # more tokens than are left, however it is cut (a huge result is not tokenised: seconds a MB)
            suffix = encode_result(untrusted, template, after, content, toolbox, where)
            if suffix and suffix[0] == made[-1]:
                suffix = suffix[1:]   # GLM-4: the stop token the model ended with opens the tool result
            if len(ids[i]) + len(suffix) >= budget:
                continue   # no room for the results and a turn after them: the episode ends here (TRL drops them)
            ids[i] += suffix
            trained[i] += [False] * len(suffix)
            still.append(i)
        active, turn = still, turn + 1
    return Generated(ids, truncated, nonfinite, trained, calls, failures)
