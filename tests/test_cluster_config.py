"""jobs/: the cluster-launcher example validates against the schema Ray ships, and the Ray Job
runtime_env ships the project without its results; the driver's process settings."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
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


ARENAS = """
import ctypes, os, sys, tempfile, threading
from rhnsearch.cluster.malloc import limit_malloc_arenas
print(limit_malloc_arenas() if sys.argv[1] == "limit" else "-")
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.fopen.restype = ctypes.c_void_p, ctypes.c_void_p
libc.free.argtypes, libc.malloc_info.argtypes = [ctypes.c_void_p], [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
together = threading.Barrier(8)
def allocate():  # eight threads alive at once, each allocating
    block = libc.malloc(1000); together.wait(); libc.free(block)
threads = [threading.Thread(target=allocate) for _ in range(8)]
[t.start() for t in threads]; [t.join() for t in threads]
path = os.path.join(tempfile.mkdtemp(), "malloc.xml")
out = libc.fopen(path.encode(), b"w"); libc.malloc_info(0, out); libc.fclose(out)
print(open(path).read().count("<heap nr="))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_the_drivers_threads_share_two_malloc_arenas():
    """A sweep's driver caps glibc's malloc arenas (each keeps what its threads freed): eight
    threads allocating at once get two, not eight; $MALLOC_ARENA_MAX, where set, decides."""

    def arenas(*args, env=None) -> list[str]:
        proc = subprocess.run(
            [sys.executable, "-c", ARENAS, *args],
            capture_output=True,
            text=True,
            check=True,
            env={k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | (env or {}),
        )
        return proc.stdout.split()

    assert arenas("limit") == ["True", "2"]
    assert int(arenas("none")[1]) > 2
    assert arenas("limit", env={"MALLOC_ARENA_MAX": "4"}) == ["False", "4"]
