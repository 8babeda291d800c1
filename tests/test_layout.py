"""The package reads top to bottom: no import cycles between its modules, argparse and printing
in the command-line modules only, the public API importable, and every module documented."""

import ast
from pathlib import Path

import rhnsearch

PACKAGE = Path(rhnsearch.__file__).parent


def modules() -> dict[str, ast.Module]:
    """Dotted module name -> its syntax tree, for every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = ast.parse(path.read_text(), str(path))
    return found


def is_package(name: str) -> bool:
    return (PACKAGE.parent / name.replace(".", "/") / "__init__.py").exists()


def imports(name: str, tree: ast.Module, known: set) -> set:
    """The package's modules that `name` imports, at the top or inside functions."""
    package = name if is_package(name) else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {t for t in targets if t in known and t != name}
    return found


def cycles(graph: dict) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def is_cli(name: str) -> bool:
    return name == "rhnsearch.cli" or name.startswith("rhnsearch.cli.")


def test_no_import_cycles():
    trees = modules()
    # a package's __init__ re-exporting its own modules is not a cycle of the layers
    graph = {
        name: {m for m in imports(name, tree, set(trees)) if not name.startswith(m + ".")}
        for name, tree in trees.items()
    }
    assert cycles(graph) == []


# The package's layers, bottom first (docs/architecture.md): a module imports its own layer's
# and those below, never one above. A layer is a subpackage or a top-level module.
LAYERS = [
    {"compat", "errors"},
    {"data", "tasks", "models", "budget", "provenance"},
    {"files"},
    {"train"},
    {"search"},
    {"tracking"},
    {"analysis", "results"},
    {"cluster"},
    {"sweep"},
    {"cli"},
]


def part(module: str) -> str:
    """The subpackage or top-level module that a module of the package belongs to."""
    return module.split(".")[1]


def test_every_import_runs_down_the_layers():
    trees = modules()
    rank = {name: level for level, layer in enumerate(LAYERS) for name in layer}
    parts = {part(name) for name in trees if name != "rhnsearch"}
    assert parts == set(rank), f"parts without a layer: {parts - set(rank)}"
    upward = sorted(
        f"{name} -> {target}"
        for name, tree in trees.items()
        if name != "rhnsearch"
        for target in imports(name, tree, set(trees))
        if target != "rhnsearch" and rank[part(target)] > rank[part(name)]
    )
    assert upward == []


def test_no_import_cycles_between_the_parts():
    """Counting imports inside functions too: peers of one layer import each other one way."""
    trees = modules()
    graph = {part(name): set() for name in trees if name != "rhnsearch"}
    for name, tree in trees.items():
        if name != "rhnsearch":
            graph[part(name)] |= {
                part(t) for t in imports(name, tree, set(trees)) if t != "rhnsearch"
            } - {part(name)}
    assert cycles(graph) == []


def test_what_a_sweep_writes_to_mlflow_is_named_in_the_schema_only():
    """tracking/schema.py names the tags and artifacts; results/ reads MLflow, never writes."""
    from rhnsearch.tracking import schema

    names = {
        schema.PARENT_RUN,
        schema.BEST_RUN,
        schema.RESUMED,
        schema.SPACE_ARTIFACT,
        schema.PLAN_ARTIFACT,
        schema.HISTORIES_ARTIFACT,
    }
    writes = {"log_artifact", "log_artifacts", "log_batch", "log_dict", "log_metric"}
    writes |= {"log_param", "set_tag", "create_run", "update_run", "set_terminated"}
    named, written = [], []
    for name, tree in modules().items():
        for node in ast.walk(tree):
            if name != "rhnsearch.tracking.schema" and isinstance(node, ast.Constant):
                if node.value in names:
                    named.append(f"{name}:{node.lineno} {node.value}")
            if name.startswith("rhnsearch.results") and isinstance(node, ast.Attribute):
                if node.attr in writes:
                    written.append(f"{name}:{node.lineno} {node.attr}")
    assert (named, written) == ([], [])


def test_library_modules_neither_print_nor_parse_arguments():
    offenders = []
    for name, tree in modules().items():
        if is_cli(name):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
                offenders.append(f"{name}:{node.lineno} print")
            if (
                isinstance(node, (ast.Import, ast.ImportFrom))
                and any("argparse" in (alias.name or "") for alias in node.names)
                or (isinstance(node, ast.ImportFrom) and node.module == "argparse")
            ):
                offenders.append(f"{name}:{node.lineno} argparse")
    assert offenders == []


def test_library_modules_do_not_import_the_cli():
    trees = modules()
    offenders = [
        name
        for name, tree in trees.items()
        if not is_cli(name) and any(is_cli(m) for m in imports(name, tree, set(trees)))
    ]
    assert offenders == []


def test_every_module_has_a_docstring():
    assert [name for name, tree in modules().items() if not ast.get_docstring(tree)] == []


def test_public_api():
    for name in rhnsearch.__all__:
        assert getattr(rhnsearch, name) is not None, name


def test_only_the_tasks_module_branches_on_a_task_name():
    offenders = []
    for name, tree in modules().items():
        if name == "rhnsearch.tasks":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(
                isinstance(side, ast.Constant) and side.value in ("jsb", "ptb")
                for side in [node.left, *node.comparators]
            ):
                offenders.append(f"{name}:{node.lineno}")
    assert offenders == []


def test_every_import_of_the_package_is_a_declared_dependency():
    """Each library the package imports (at the top or in a function) is named by a
    distribution in pyproject.toml's dependencies, so that `pip install .` brings it."""
    import importlib.metadata
    import re
    import sys
    import tomllib

    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]
    declared = {
        re.split(r"[\[<>=!~; ]", d, maxsplit=1)[0].lower().replace("_", "-")
        for d in project["dependencies"]
    }
    providers = importlib.metadata.packages_distributions()
    imported = set()
    for tree in modules().values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module.split(".")[0])
    libraries = imported - set(sys.stdlib_module_names) - {"rhnsearch"}
    undeclared = {
        name: providers.get(name)
        for name in libraries
        if not {d.lower() for d in providers.get(name, [])} & declared
    }
    assert undeclared == {}, f"imported but not in pyproject.toml's dependencies: {undeclared}"


def test_the_report_kinds_a_space_may_name_are_those_declared():
    """A space names its study's report kind (search/space.py), results/studies.py declares
    them: the same names, and no other module of the package names a study."""
    import typing

    from rhnsearch.results.studies import KINDS
    from rhnsearch.search.space import Space

    assert set(typing.get_args(Space.model_fields["report"].annotation)) == set(KINDS)
    named = [
        name
        for name, tree in modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and node.value in ("jsb_optimization", "ptb_budget", "ptb_hsg")
        and name != "rhnsearch.results.studies"
    ]
    assert named == []


# What rhnsearch uses of torch, Ray and MLflow beyond their public API (rhnsearch/compat/):
# internal modules, and the names and text of their private ops, saved state, file names,
# tags and tables. A module path, imported name, attribute or keyword argument of these
# libraries that starts with "_" is internal too.
LIBRARIES = ("torch", "ray", "mlflow")
INTERNAL_MODULES = (
    "mlflow.utils",
    "mlflow.store",
    "ray.cloudpickle",
    "ray.tune.result",
    "ray.tune.experiment",
    "ray.tune.execution",
    "ray.tune.impl",
    "ray.tune.analysis",
    "ray.train._internal",
)
INTERNAL_NAMES = {"MLFLOW_DATASET_CONTEXT", "DEFAULT_METRIC", "cloudpickle"}
INTERNAL_TEXT = (
    "trial_data",
    "checkpoint_manager",
    "relative_logdir",
    "CLOUDPICKLE_FALLBACK",
    "_type",
    "experiment_state",
    "checkpoint_\\d",
    "basic-variant-state",
    "search_gen_state",
    "searcher-state",
    "FROM metrics",
    "ray.tune.",
    "mlflow.utils",
    "mlflow.data.context",
)


def library_internals(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, what) of each use of a library internal in a module's syntax tree."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and ast.get_docstring(node) is not None
    }

    def internal_module(module: str) -> bool:
        parts = module.split(".")
        return parts[0] in LIBRARIES and (
            module.startswith(INTERNAL_MODULES) or any(p.startswith("_") for p in parts)
        )

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if internal_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found += [
                (node.lineno, f"{node.module}.{a.name}")
                for a in node.names
                if internal_module(f"{node.module}.{a.name}")
                or (node.module.split(".")[0] in LIBRARIES and a.name in INTERNAL_NAMES)
            ]
        elif isinstance(node, ast.Attribute):
            private = node.attr.startswith("_") and not node.attr.endswith("__")
            if node.attr in INTERNAL_NAMES or (
                private and not (isinstance(node.value, ast.Name) and node.value.id == "self")
            ):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Name) and node.id in INTERNAL_NAMES:
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[0] in LIBRARIES:
            found += [
                (node.lineno, f"{ast.unparse(node.func)}({k.arg}=)")
                for k in node.keywords
                if k.arg and k.arg.startswith("_")
            ]
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            found += [(node.lineno, text) for text in INTERNAL_TEXT if text in node.value]
    return found


def test_library_internals_are_used_in_the_compat_modules_only():
    """No module outside rhnsearch/compat/ uses a private name, internal module, saved-state
    key, file-name pattern, tag or table of torch, Ray or MLflow."""
    used = [
        f"{name}:{line}: {what}"
        for name, tree in modules().items()
        if not name.startswith("rhnsearch.compat")
        for line, what in library_internals(tree)
    ]
    assert used == []


def test_the_fence_sees_the_internals_it_names():
    """The check above finds each kind of internal it names, as the code before the compat
    modules used them."""
    code = """
import torch
from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT
from ray import cloudpickle
import ray._private.worker
def f(ops, arrays, run, info):
    ops._reorder_linear_weight(w, 4)
    torch.ops.mkldnn._linear_pointwise.default(x, w, b, "none", [], "")
    [a._base for a in arrays]
    ray.init(_node_ip_address="127.0.0.1")
    run.get("checkpoint_manager"), info["relative_logdir"]
    "SELECT run_uuid FROM metrics"
"""
    found = library_internals(ast.parse(code))
    assert sorted({line for line, _ in found}) == [3, 4, 5, 7, 8, 9, 10, 11, 12], found


def test_compat_modules_check_the_installed_version(monkeypatch):
    """An internal of Ray or MLflow used with a version outside the tested range is a
    one-line UserError naming the installed version and the range."""
    import importlib.metadata

    import pytest

    from rhnsearch.compat import mlflow as mlflow_compat
    from rhnsearch.compat import ray as ray_compat
    from rhnsearch.errors import UserError

    for module, distribution, use in [
        (ray_compat, "ray", lambda: ray_compat.is_checkpoint("checkpoint_000001")),
        (ray_compat, "ray", lambda: ray_compat.saved_trial_ids({"trial_data": []})),
        (mlflow_compat, "mlflow", mlflow_compat.metric_histories_sql),
        (mlflow_compat, "mlflow", lambda: mlflow_compat.dataset_input_tags("training")),
    ]:
        use()  # in range
        monkeypatch.setattr(module, "SUPPORTED", "<1")
        with pytest.raises(UserError) as refused:
            use()
        installed = importlib.metadata.version(distribution)
        message = str(refused.value)
        assert "\n" not in message and f"{distribution} {installed} is installed" in message
        assert f"'{distribution}<1'" in message
        monkeypatch.undo()
    for method in ("GET", "POST"):
        assert mlflow_compat.server_request("http://127.0.0.1:1", "/api", method, instead="x")
    monkeypatch.setattr(mlflow_compat, "SUPPORTED", "<1")
    assert mlflow_compat.server_request("http://127.0.0.1:1", "/api", instead="x") is None
