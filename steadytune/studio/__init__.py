"""`steadytune studio`: the browser UI for the whole loop, over a folder of run folders: configure, launch, watch,
evaluate, chat, export.

- command: the subcommand (arguments, the API-key rule for addresses other than this machine's, uvicorn).
- app: the FastAPI app (pages, JSON routes, the key, the Content-Security-Policy, bounded uploads).
- runs: the run folders of RUNS_DIR and the state of each (report/rundata.py's status from the manifest and lock,
  and what the studio launched there).
- jobs: the processes it starts (train, eval, predict, export, doctor): each in its own session, its output in a
  file in the run folder (never a pipe the UI must drain), recorded beside the log so a studio started later finds
  it; stop is SIGTERM (the training saves a checkpoint and exits 143).
- grants: what a run's own config asks for that only the user grants (code, credentials, writes elsewhere), shown
  with checkboxes and passed on the command line; what the user granted in this session.
- stopping: which pid Stop may signal (its own child, or a confirmed steadytune training of this user and host).
- writes: every file the studio writes stays inside the run folder, never through a symbolic link.
- schema: the JSON API as an OpenAPI document (GET /openapi.json), which the fuzz test reads.
- form: the New run form, generated from config.py's typed sections (every key with its default and help),
  validated by the config's own loader, key by key; the YAML it writes and the `steadytune train` command.
- chat: a finished run in this process (infer/chat.py's session: template, sampling, stop tokens, label scores),
  answers streamed, beside the base model (the adapter switched off).
- pages: the Jinja2 templates (autoescaped), studio.js and studio.css in templates/, plotly.js from the plotly
  package: the pages fetch nothing outside the studio.
Nothing heavy is imported here: `steadytune studio --help` answers at once.
"""
