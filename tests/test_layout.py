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
