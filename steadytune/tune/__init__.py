"""`steadytune tune`: the hyperparameter search, a recipe as train, evaluate and demo are (it runs trainings and
evaluates the final model), in a few modules:

- `command.py` is `steadytune tune`'s command line;
- `search.py` is the driver and its phases (the search's folder, the task, the space, the study, the workers) and
  the final model trained from the best trial and scored once on the test split;
- `search_space.py` says what is searched, per task, and reads the YAML that changes it;
- `trials.py` is one trial: its config, its training with the pruner at each evaluation, a failure recorded;
- `study.py` is Optuna's side: SQLite storage in the search's folder, TPE and the pruner, the trial loop, resume,
  results.

The embedded YAML recipes it may start from (the demo's) stay in `recipes/`, as data.
"""
