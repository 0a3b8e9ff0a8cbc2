"""The layers of docs/architecture.md are import-linter contracts in pyproject.toml: they hold, a
wrong import breaks them with a message naming it, and no module of corral is part of an import
cycle."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter", reason="import-linter is in the dev extra: pip install 'corral[dev]'")
grimp = pytest.importorskip("grimp")

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with the repository's contracts over the ``corral`` package found in ``cwd``
    (import-linter puts the working directory first on the path)."""
    script = Path(sys.executable).with_name("lint-imports")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "importlinter.cli"]
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run([*command, "--no-logo", "--no-cache", str(PYPROJECT)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=240)


def copy_of_corral(tmp_path: Path) -> Path:
    """A throw-away copy of the ``corral`` package to break on purpose; returns its parent."""
    shutil.copytree(ROOT / "corral", tmp_path / "corral", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def add_line(path: Path, line: str) -> None:
    """Append one import to a module of the copy."""
    path.write_text(path.read_text() + f"\n{line}\n")


def test_lint_imports_passes() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def contracts() -> dict[str, dict]:
    """The import-linter contracts of pyproject.toml, by id."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11+")
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


def test_every_plugin_family_is_in_the_independence_contract() -> None:
    """A new family under corral/plugins/ must be added to the contract, not silently left out."""
    families = {f"corral.plugins.{p.name}" for p in (ROOT / "corral" / "plugins").iterdir()
                if (p / "__init__.py").exists()}
    assert families == set(contracts()["plugin-families"]["modules"])


def test_every_hydra_plugin_shim_is_analysed() -> None:
    """corral's packages under hydra_plugins/ are analysed, and corral may not import them."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11+")
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]
    shims = {f"hydra_plugins.{p.name}" for p in (ROOT / "hydra_plugins").iterdir()
             if p.name.startswith("corral_") and (p / "__init__.py").exists()}
    assert shims and shims <= set(config["root_packages"])
    assert shims == set(contracts()["hydra-shim"]["forbidden_modules"])


@pytest.mark.parametrize(
    ("module", "line", "named"),
    [
        # the framework never imports a plugin
        ("framework/batch.py", "from corral.plugins.samplers import local as _wrong",
         "corral.framework.batch -> corral.plugins.samplers.local"),
        # a building block never imports upward
        ("rl/returns.py", "import corral.parallel.shared_memory as _wrong",
         "corral.rl.returns -> corral.parallel.shared_memory"),
        # a sampler never imports an algorithm
        ("plugins/samplers/local.py", "from corral.plugins.algos import ppo as _wrong",
         "corral.plugins.samplers.local -> corral.plugins.algos.ppo"),
    ],
    ids=["framework->plugins", "rl->parallel", "sampler->algo"],
)
def test_a_wrong_import_fails_naming_it(tmp_path: Path, module: str, line: str, named: str) -> None:
    copy = copy_of_corral(tmp_path)
    add_line(copy / "corral" / module, line)
    result = lint_imports(copy)
    assert result.returncode != 0, result.stdout
    assert "BROKEN" in result.stdout and named in result.stdout, result.stdout


def test_an_import_cycle_fails_naming_it(tmp_path: Path) -> None:
    copy = copy_of_corral(tmp_path)
    (copy / "corral" / "rl" / "cycle_a.py").write_text("from corral.rl import cycle_b\n")
    (copy / "corral" / "rl" / "cycle_b.py").write_text("from corral.rl import cycle_a\n")
    result = lint_imports(copy)
    assert result.returncode != 0, result.stdout
    assert "No cycles are allowed in corral.rl" in result.stdout, result.stdout


def module_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every set of modules that import each other in a circle (strongly connected components of
    more than one module, or a module importing itself), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(start: str) -> None:  # Tarjan's algorithm, iterative (the graph is deep)
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.find_modules_directly_imported_by(node):
                    cycles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return sorted(cycles)


def test_no_module_of_corral_is_in_an_import_cycle() -> None:
    graph = grimp.build_graph("corral", cache_dir=None)
    assert len(graph.modules) > 50
    assert module_cycles(graph) == []


def test_the_cycle_check_finds_cycles() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d"), ("p.e", "p.e")]:
        graph.add_import(importer=importer, imported=imported)
    assert module_cycles(graph) == [["p.a", "p.b", "p.c"], ["p.e"]]
