"""`steadytune studio [RUNS_DIR] [--host 127.0.0.1] [--port 7860] [--api-key KEY]`: the subcommand."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from steadytune.errors import UserError
from steadytune.serve.command import _is_loopback

DEFAULT_RUNS_DIR, DEFAULT_HOST, DEFAULT_PORT = "saves", "127.0.0.1", 7860


def add_arguments(parser) -> None:
    parser.add_argument("runs_dir", nargs="?", default=DEFAULT_RUNS_DIR, metavar="RUNS_DIR",
                        help=f"the folder of run folders to show, and where new runs go (default {DEFAULT_RUNS_DIR}/; "
                             "made when missing)")
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to listen on (default {DEFAULT_HOST}: this machine only; any other address "
                             "needs --api-key, since the studio starts processes on this machine)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    parser.add_argument("--api-key", default=os.environ.get("API_KEY"), metavar="KEY",
                        help="ask for this key before anything else (the browser signs in once; scripts send "
                             "`Authorization: Bearer KEY`); default: the API_KEY environment variable, which, unlike "
                             "this option, other users cannot see in `ps`")
    parser.add_argument("--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug"),
                        help="server log level (default warning)")


def check_args(args) -> Path:
    """The runs folder, after the rules `serve` keeps for its key, made stricter: a studio reachable from other
    machines without a key would let anyone start processes here, so it does not start."""
    if not 0 < args.port < 65536:
        raise UserError(f"--port must be 1-65535 (got {args.port})")
    if not _is_loopback(args.host) and not args.api_key:
        raise UserError(f"--host {args.host} makes the studio reachable from other machines, and it starts processes "
                        "on this one: set an API key (API_KEY=$(openssl rand -hex 16) in the environment, or "
                        "--api-key KEY), or listen on 127.0.0.1")
    if args.api_key is not None and len(args.api_key.strip()) < 8:
        raise UserError("--api-key: use at least 8 characters (e.g. API_KEY=$(openssl rand -hex 16))")
    runs_dir = Path(args.runs_dir).expanduser()
    if runs_dir.exists() and not runs_dir.is_dir():
        raise UserError(f"RUNS_DIR {runs_dir} is a file, not a folder")
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"RUNS_DIR {runs_dir}: cannot create it ({e.strerror})") from None
    return runs_dir


def run(args) -> int:
    runs_dir = check_args(args)
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError as e:
        raise UserError(f"studio needs FastAPI and uvicorn ({e.name} is missing): pip install 'steadytune[studio]'") \
            from None
    # lazy: studio.app loads plotly, jinja2 and (through the report's charts) torch; `--help` answers without them
    from steadytune.studio.app import StudioSettings, build_app

    settings = StudioSettings(runs_dir=runs_dir, host=args.host, port=args.port, api_key=args.api_key or None)
    app = build_app(settings)
    where = f"http://{f'[{args.host}]' if ':' in args.host else args.host}:{args.port}/"
    print(f"steadytune studio: {runs_dir.resolve()} on {where}"
          + (" (API key required)" if settings.api_key else ""), flush=True)
    sys.stdout.flush()
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0
