"""The spec and the search: a study's search space (space.py) and its cost before it runs
(plan.py); what to try next, a setting per cell at random or from the cell's Optuna study
(searchers.py), as one typed trial (trial.py); and which trials to stop early (scheduler.py).
Nothing here runs a trial or writes to MLflow."""
