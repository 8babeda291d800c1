"""Every run of an experiment that a filter matches, page after page: MLflow answers a search
with one page of at most 50,000 runs, so a single call cuts a larger sweep short without a
word."""

from mlflow.tracking import MlflowClient

PAGE = 50_000  # the largest page MLflow's stores and server give


def all_runs(client: MlflowClient, experiment_id: str, filter_string: str, *, page: int = PAGE):
    """The runs of EXPERIMENT_ID matching FILTER_STRING, every page of PAGE runs read."""
    runs, token = [], None
    while True:
        found = client.search_runs(
            [experiment_id], filter_string, max_results=page, page_token=token
        )
        runs.extend(found)
        token = found.token
        if not token:
            return runs
