"""`steadytune report RUN_DIR [RUN_DIR ...] [--output report.html]`: one self-contained HTML file."""

from __future__ import annotations

from pathlib import Path

from steadytune.errors import UserError


def add_arguments(parser) -> None:
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                        help="a run's output_dir (finished, running or stopped); several runs are overlaid and compared; "
                             "a `steadytune tune` folder gets its tune_report.html again")
    parser.add_argument("--output", "-o", default=None,
                        help="where to write the page (default: RUN_DIR/report.html for one run, ./report.html for "
                             "several)")
    parser.add_argument("--force", action="store_true", help="replace an --output file that is not a steadytune report")


def run(args) -> int:
    if len(args.run_dirs) == 1 and args.output is None and (Path(args.run_dirs[0]) / "tune_results.json").is_file():
        return write_search_page(Path(args.run_dirs[0]))
    # lazy: report.page loads plotly; `--help` answers without loading it
    from steadytune.report.page import GENERATOR, write_report

    output = Path(args.output) if args.output else (
        Path(args.run_dirs[0]) / "report.html" if len(args.run_dirs) == 1 else Path("report.html"))
    if output.is_dir():
        raise UserError(f"--output {output} is a folder; name the HTML file to write, e.g. {output / 'report.html'}")
    if output.exists() and not args.force and not _is_report(output, GENERATOR):
        raise UserError(f"--output {output} exists and is not a steadytune report; choose another name, or pass "
                        "--force to replace it")
    path = write_report(args.run_dirs, output)
    size = path.stat().st_size / 2**20
    print(f"report: {path} ({size:.1f} MiB; open it in any browser, no network needed)")
    return 0


def _is_report(path: Path, generator: str) -> bool:
    """A page this command wrote (its generator tag sits in the first lines), which may be replaced."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            head = f.read(2048)
    except OSError:
        return False
    return f'content="{generator}' in head


def write_search_page(folder: Path) -> int:
    """A `steadytune tune` folder: its tune_report.html, again, from tune_results.json."""
    # lazy: report.tuning loads plotly; `--help` answers without loading it
    from steadytune.report.tuning import write_tune_report

    path = write_tune_report(folder)
    if path is None:
        raise UserError(f"{folder / 'tune_results.json'}: the search's page could not be written (see above)")
    print(f"report: {path} ({path.stat().st_size / 2**20:.1f} MiB; the search: trials, history, importance)")
    return 0
