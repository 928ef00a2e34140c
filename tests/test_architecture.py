"""Dependencies point one way (ARCHITECTURE.md): a test keeps it so."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "fedlight"


def _imports(folder: str) -> dict[str, set[str]]:
    out = {}
    for path in (PKG / folder).rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
        out[str(path.relative_to(PKG))] = names
    return out


def _offenders(folder: str, forbidden: tuple[str, ...]) -> list[str]:
    return [f"{f}: {n}" for f, names in _imports(folder).items() for n in names if n.startswith(forbidden)]


def test_server_never_imports_lightning() -> None:
    assert _offenders("server", ("lightning", "pytorch_lightning", "fedlight.engine", "fedlight.methods")) == []


def test_methods_never_import_engine_or_server() -> None:
    assert _offenders("methods", ("fedlight.engine", "fedlight.server", "lightning.fabric")) == []


def test_only_engine_touches_fabric() -> None:
    for folder in ("config", "data", "models", "methods", "server", "eval"):
        assert _offenders(folder, ("lightning.fabric", "torch.distributed")) == [], folder


def test_config_and_data_do_not_depend_on_the_engine() -> None:
    for folder in ("config", "data", "eval", "models"):
        assert _offenders(folder, ("fedlight.engine", "fedlight.registry")) == [], folder


def test_report_needs_neither_torch_nor_the_engine() -> None:
    """`fedlight report` runs on a login node in a second: results.json, matplotlib, no torch."""
    assert _offenders("report", ("torch", "lightning", "fedlight.engine", "fedlight.registry")) == []


def test_sklearn_is_imported_where_it_is_used() -> None:
    """Only CF-CL (K-means) and tabular fairness runs use sklearn, so no module imports it at its
    top: every other `fedlight fit` would pay its 0.18 s import (`python -X importtime`)."""
    at_top = [str(path.relative_to(PKG)) for path in PKG.rglob("*.py") for node in ast.parse(path.read_text()).body
              if (isinstance(node, ast.Import) and any(a.name.startswith("sklearn") for a in node.names))
              or (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sklearn"))]
    assert at_top == []


PLUGINS = "fedlight.engine.parts"


def test_the_round_loop_imports_no_plugin_and_names_no_paper() -> None:
    """A new paper is new files: the loop (and what it is made of) knows only the plug-in interfaces."""
    loop = ("orchestrator.py", "clients.py", "run_log.py", "run_state.py", "run_checkpoint.py", "progress.py",
            "plugin.py", "options.py", "evaluator.py")
    engine = _imports("engine")
    for name in loop:
        assert [n for n in engine[f"engine/{name}"] if n.startswith(PLUGINS)] == [], name
    text = (PKG / "engine" / "orchestrator.py").read_text().lower()
    named = [p for p in ("sofed", "cf-cl", "cfcl", "flesd", "lg-fedavg", "moon", "scaffold", "fedprox", "stream",
                         "buffer", "exchange", "distil", "local_test", "public") if p in text]
    assert named == []


def test_plugins_do_not_import_each_other() -> None:
    plugins = _imports("engine/parts")
    assert [f"{f}: {n}" for f, names in plugins.items() for n in names if n.startswith(PLUGINS)] == []


def test_the_round_loop_fits_on_a_page() -> None:
    assert len((PKG / "engine" / "orchestrator.py").read_text().splitlines()) <= 200


def test_the_recipe_stops_at_the_edge() -> None:
    """Each part takes its own typed options: below ``fit`` and ``assemble``
    nothing reads a recipe section, so no part imports the recipe schema (``run_folder`` writes and
    compares the recipe file itself, the run folder's edge; ``preflight`` is ``fit``'s torch-free
    first look at the recipe's data and run folder)."""
    def recipe(name: str) -> bool:  # the schema, or the package and loader that hand out a Recipe (not its checks)
        return name == "fedlight.config" or name.startswith(("fedlight.config.schema", "fedlight.config.loader"))

    for folder in ("engine/parts", "server", "methods", "eval", "exchange", "coreset", "data", "models"):
        assert [f"{f}: {n}" for f, names in _imports(folder).items() for n in names if recipe(n)] == [], folder
    edge = {"engine/run/fit.py", "engine/run/assemble.py", "engine/run/run_folder.py", "engine/run/preflight.py"}
    engine = [f"{f}: {n}" for f, names in _imports("engine").items() if f not in edge for n in names if recipe(n)]
    assert engine == []
