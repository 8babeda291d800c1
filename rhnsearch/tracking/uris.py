"""The MLflow tracking store: where it is by default, its URI made absolute, and a check
that it answers (shared by sweeps, results and analysis; imports neither Ray nor torch)."""

import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from mlflow.tracking import MlflowClient

from ..errors import UserError, first_line

DEFAULT_STORE = "results/mlflow.db"


def resolve_tracking_uri(uri: str | None) -> str:
    """The user's URI, else $MLFLOW_TRACKING_URI, else the sqlite store under results/;
    relative sqlite paths are made absolute so that every process of the sweep writes to the
    same file. Nothing is created (`open_store` makes a sqlite store's folder)."""
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{DEFAULT_STORE}"
    path = sqlite_path(uri)
    if path is not None and not path.is_absolute():
        uri = f"sqlite:///{path.resolve()}"
    server_settings(uri)
    return uri


def server_settings(uri: str):
    """MLflow's client set for a server's URI, where the environment does not set otherwise:
    - no retries: the client retries a request that timed out, POSTs included, so one that
      reached the server could create a second run; the sweep's sender retries the records
      it can tell apart;
    - no links printed: each time the client ends a run on a server it reads the whole run
      back and prints two lines of links (40,000 lines and 20,000 requests a 20,000-trial
      sweep)."""
    if is_server(uri):
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")


def is_server(uri: str) -> bool:
    """Whether URI is an MLflow server's (http:// or https://)."""
    return uri.startswith(("http://", "https://"))


def sqlite_path(uri: str) -> Path | None:
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def open_store(uri: str | None) -> str:
    """The store a sweep writes to, resolved and checked: a sqlite store is made where it is
    missing (its folder first)."""
    uri = resolve_tracking_uri(uri)
    if sqlite_path(uri):
        sqlite_path(uri).parent.mkdir(parents=True, exist_ok=True)
    check_store(uri)
    return uri


def existing_store(uri: str | None) -> str:
    """The store a reading command reads, resolved and checked; a sqlite store that is not
    there is a one-line UserError, and nothing is made."""
    uri = resolve_tracking_uri(uri)
    if sqlite_path(uri) and not sqlite_path(uri).is_file():
        raise UserError(
            f"no MLflow store at {sqlite_path(uri)}: run a sweep first, or pass "
            "--tracking-uri of an existing store"
        )
    check_store(uri)
    return uri


def artifact_root(uri: str, experiment: str) -> str | None:
    """Artifacts of a sqlite store live beside it (results/artifacts/EXPERIMENT)."""
    if sqlite_path(uri):
        return (sqlite_path(uri).parent / "artifacts" / experiment).as_uri()
    return None


def check_store(uri: str):
    """Fail early, in one line, if the tracking store cannot be reached, refuses the login or
    cannot be read. A server's credentials come from MLflow's variables, never the URI (the
    URI is recorded with the sweep). A resumed sweep's URI comes here unresolved: the
    client is set for a server here too (`server_settings`)."""
    server_settings(uri)
    url = urlparse(uri)
    if url.scheme in ("http", "https") and (url.username or url.password):
        raise UserError(
            f"the tracking URI {url.scheme}://{url.hostname}:{url.port or ''} "
            "carries a user or password: set MLFLOW_TRACKING_USERNAME and "
            "MLFLOW_TRACKING_PASSWORD instead (a URI is recorded with the sweep)"
        )
    if url.scheme in ("http", "https"):
        try:
            socket.create_connection((url.hostname, url.port or 80), timeout=5).close()
        except OSError as exc:
            raise UserError(
                f"MLflow tracking store {uri} is not reachable "
                f"({exc.strerror or exc}): start it (mlflow server --host "
                "127.0.0.1) or pass a working --tracking-uri"
            ) from None
    try:
        MlflowClient(uri).search_experiments(max_results=1)
    except Exception as exc:  # the store's own error types vary by backend
        if getattr(exc, "error_code", None) in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
            user = os.environ.get("MLFLOW_TRACKING_USERNAME")
            raise UserError(
                f"MLflow at {uri} refused the login"
                f"{f' of user {user!r}' if user else ''} ({exc.error_code}): set "
                "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD to an "
                "account of that server"
            ) from None
        raise UserError(
            f"{uri} is not a working MLflow tracking store ({first_line(exc)}): "
            "start the MLflow server there or pass a working --tracking-uri "
            "(http://HOST:PORT or sqlite:///PATH)"
        ) from None


def get_experiment(client: MlflowClient, uri: str, name: str) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    return client.create_experiment(name, artifact_location=artifact_root(uri, name))
