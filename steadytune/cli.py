"""`steadytune` command line: one entry point, one subcommand per job.

Each subcommand lives in its own module with two functions, `add_arguments(parser)` and `run(args) -> int`;
this file only wires them up, importing a module when its subcommand is used (so `doctor` starts fast even
where torch is slow to import).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
import warnings

from steadytune import __version__
from steadytune.errors import RunInterrupted, UserError, describe_os_error

# subcommand -> (module, one-line help)
SUBCOMMANDS = {
    "train": ("steadytune.train", "fine-tune a model (LoRA or full) from a LLaMA-Factory-style YAML"),
    "demo": ("steadytune.demo", "the embedded default: Gemma 3 270M learns Chinese review sentiment, accuracy before/after"),
    "doctor": ("steadytune.doctor.command", "diagnose this machine (ROCm, CUDA or CPU), or saved tool outputs, and print the fix"),
    "eval": ("steadytune.evaluate", "evaluate a trained adapter: accuracy, macro-F1, baselines, confusion matrix"),
    "tune": ("steadytune.tune.command", "hyperparameter search (Optuna) on a validation split, then the best config trained and evaluated on the test split"),
    "export": ("steadytune.infer.export", "merged Hugging Face folder, GGUF for llama.cpp, or the adapter archive of a run"),
    "chat": ("steadytune.infer.chat", "talk to a trained run in the terminal (streams; reads stdin when piped)"),
    "predict": ("steadytune.infer.predict", "batch inference over a jsonl/json/csv file: labels with probabilities, or generated text"),
    "serve": ("steadytune.serve.command", "serve a trained run (and more adapters) behind the OpenAI HTTP API, with dynamic batching"),
    "bench": ("steadytune.bench.command", "measure tokens/s, MFU and memory against the plain transformers + peft recipe"),
    "report": ("steadytune.report.command", "one self-contained HTML report of one or more runs (curves, results, data, config)"),
    "studio": ("steadytune.studio.command", "the browser UI over a folder of runs: configure, launch, watch, evaluate, chat, export"),
}

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="steadytune",
        description="LoRA fine-tuning of decoder LLMs on AMD ROCm, NVIDIA CUDA and CPU: "
                    "one YAML in, a working adapter and an honest evaluation out.")
    parser.add_argument("--version", action="version", version=f"steadytune {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = _chosen_subcommand(sys.argv[1:] if argv is None else argv)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(_module=module_name)
        # Only the chosen subcommand's module is imported: `steadytune doctor` must run (and diagnose) even
        # where torch itself fails to import, and `steadytune --help` should not wait for torch.
        if name == chosen:
            module = _load(module_name)
            if module is not None and hasattr(module, "add_arguments"):
                module.add_arguments(sub)
            else:  # not built yet: take any arguments, so main() can say so instead of a usage error
                sub.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def _chosen_subcommand(argv: list[str]) -> str | None:
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in SUBCOMMANDS else None
    return None


def _load(module_name: str):
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name == module_name:  # that subcommand is not built yet
            return None
        raise


def _version() -> str:
    return __version__


def main(argv: list[str] | None = None) -> int:
    # peft calls a transformers property that transformers 5 deprecates; the warning is about their code, not the
    # user's run, and would otherwise be printed at every start.
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    parser = build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:
        # argparse cannot take positionals after options (`chat RUN --greedy max_new_tokens=4`): key=value words
        # left over are the subcommand's config overrides wherever they stand.
        if hasattr(args, "overrides") and all("=" in a and not a.startswith("-") for a in extra):
            args.overrides = list(args.overrides or []) + extra
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    module = _load(args._module)
    if module is None or not hasattr(module, "run"):
        print(f"steadytune {args.command}: not available in this build", file=sys.stderr)
        return EXIT_USAGE
    try:
        code = int(module.run(args) or 0)
        sys.stdout.flush()   # a reader that went away (`| head`) is found here, not in the interpreter's exit
        return code
    except BrokenPipeError:
        # `steadytune doctor --score-cases train | head`: the reader has all it wanted; say nothing, and point stdout
        # at /dev/null so the exit's own flush cannot fail again. 141 is the shell's status for SIGPIPE.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except RunInterrupted as e:
        print(str(e), file=sys.stderr)
        return e.exit_code
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return getattr(e, "exit_code", EXIT_ERROR)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except OSError as e:
        # The machine's faults (disk full, permission denied, read-only file system) are not bugs: one line each.
        print(f"error: {describe_os_error(e, f'steadytune {args.command}')}", file=sys.stderr)
        _print_likely_cause(module, e)
        return EXIT_ERROR
    except Exception as e:
        # A failure the command did not foresee: its traceback, then, where the command's module can say it (train,
        # serve, export: the error catalogue), one line with the likely cause and the fix for this machine.
        if not callable(getattr(module, "explain_failure", None)):
            raise
        traceback.print_exc()
        _print_likely_cause(module, e)
        return EXIT_ERROR


def _print_likely_cause(module, error: BaseException) -> None:
    explain = getattr(module, "explain_failure", None)
    line = explain(error) if callable(explain) else None
    if line:
        print(line, file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
