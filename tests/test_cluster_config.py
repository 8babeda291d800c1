"""jobs/: the cluster-launcher example validates against the schema Ray ships, and the Ray Job
runtime_env ships the project without its results."""

import json
from pathlib import Path

import jsonschema
import ray
import yaml

from conftest import ROOT

SCHEMA = Path(ray.__file__).parent / "autoscaler" / "ray-schema.json"


def test_cluster_yaml_validates_against_rays_schema():
    config = yaml.safe_load((ROOT / "jobs" / "cluster.yaml").read_text())
    jsonschema.validate(config, json.loads(SCHEMA.read_text()))
    # the example is for the studies' GPU trials: GPU workers, an MLflow server on the head
    workers = config["available_node_types"]["gpu_worker"]["node_config"]["InstanceType"]
    assert workers.startswith(("g", "p"))
    assert any("mlflow server" in cmd for cmd in config["head_start_ray_commands"])
    # every node starts Ray with token authentication, the token copied to it
    starts = [
        c
        for key in ("head_start_ray_commands", "worker_start_ray_commands")
        for c in config[key]
        if "ray start" in c
    ]
    assert len(starts) == 2 and all("RAY_AUTH_MODE=token" in c for c in starts)
    assert "/home/ubuntu/.ray/auth_token" in config["file_mounts"]


def test_a_broken_cluster_yaml_is_caught():
    """The check above can fail: the schema rejects a field Ray does not know."""
    config = yaml.safe_load((ROOT / "jobs" / "cluster.yaml").read_text())
    config["max_wokers"] = 8
    try:
        jsonschema.validate(config, json.loads(SCHEMA.read_text()))
    except jsonschema.ValidationError as exc:
        assert "max_wokers" in exc.message
    else:
        raise AssertionError("the schema took an unknown field")


def test_runtime_env_ships_the_project_without_results():
    env = yaml.safe_load((ROOT / "jobs" / "runtime_env.yaml").read_text())
    assert env["working_dir"] == "." and "/results/" in env["excludes"]  # not rhnsearch/results
