"""The recipes' own parts: the embedded YAML recipes (the demo's), and `steadytune tune`, the hyperparameter search.

tune is a recipe as train, evaluate and demo are (it runs trainings and evaluates the final model), in a few modules:
tune (the command and its phases, and the final model), search_space (what is searched, per task, and the YAML that
changes it), trials (one trial: its config, its training with the pruner at each evaluation, a failure recorded),
study (Optuna: SQLite storage in the search's folder, TPE and the pruner, the trial loop, resume, results).
"""
