"""The run report: one self-contained HTML file per run (or several runs side by side).

- `rundata.py` reads what a run folder holds, whatever state the run is in (finished, running, stopped by the
  guard, killed mid-write), and says which.
- `record.py` is what `train` calls: the run's command and process at start, its data statistics, and the
  report at the end.
- `charts.py` turns runs into plotly figures; `page.py` renders them into one HTML page (plotly.js inlined,
  every string from a run escaped) with the Jinja2 template in `templates/`.
- `command.py` is `steadytune report RUN_DIR [RUN_DIR ...]`.
"""
