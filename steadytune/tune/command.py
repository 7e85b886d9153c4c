"""`steadytune tune CONFIG [key=value ...] --trials N`: the command line of the hyperparameter search (search.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from steadytune.errors import UserError
from steadytune.tune.search import make_search, run_search, run_worker
from steadytune.tune.trials import METRICS


def add_arguments(parser) -> None:
    parser.add_argument("config", nargs="?", help="run config (YAML, LLaMA-Factory keys); its output_dir becomes the "
                                                   "search's folder")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="override config keys, as for train")
    parser.add_argument("--trials", type=int, default=20, help="trials to score (complete or pruned; default 20); a "
                        "resumed search counts those it has")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="seconds of search: no trial starts after it (the one running finishes)")
    parser.add_argument("--metric", choices=sorted(METRICS), default=None,
                        help="what the trials are scored by on the validation split (default: accuracy for "
                             "classification, eval_loss otherwise)")
    parser.add_argument("--space", metavar="FILE", help="YAML that changes the default search space (see docs/tune.md)")
    parser.add_argument("--val-size", type=float, default=0.2, metavar="V",
                        help="validation split held out of the training rows: a share (0-1) or a count (default 0.2)")
    parser.add_argument("--evaluations", type=int, default=4, metavar="K",
                        help="evaluations per trial, evenly spread: where the pruner may stop it (default 4)")
    parser.add_argument("--pruner", choices=("median", "halving", "none"), default="median",
                        help="median (stop a trial below the median of the others at the same share of its run), "
                             "halving (successive halving) or none")
    parser.add_argument("--nproc", metavar="N", default="1",
                        help="trials in parallel: N worker processes, one per GPU (auto = every visible GPU)")
    parser.add_argument("--seed", type=int, default=None, help="the sampler's seed (default: the config's seed)")
    parser.add_argument("--fresh", action="store_true", help="start over: remove the earlier search in output_dir")
    parser.add_argument("--no-final", action="store_true", help="stop after the search (no final model)")
    parser.add_argument("--force", action="store_true", help="train even when the start-up checks report errors")
    parser.add_argument("--worker", metavar="SPEC:K", help=argparse.SUPPRESS)   # a --nproc worker process


def run(args) -> int:
    if args.worker:
        spec, _, index = args.worker.rpartition(":")
        return run_worker(Path(spec), int(index))
    if args.config is None:
        raise UserError("steadytune tune needs a config file: steadytune tune my_run.yaml --trials 20 "
                        "(or `steadytune demo --tune` for the embedded recipe)")
    search = make_search(args.config, args.overrides, trials=args.trials, timeout=args.timeout, metric=args.metric,
                         val_size=args.val_size, evaluations=args.evaluations, pruner=args.pruner, seed=args.seed,
                         force=args.force)
    run_search(search, space_file=args.space, nproc=args.nproc, fresh=args.fresh, final=not args.no_final)
    return 0
