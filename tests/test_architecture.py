"""Dependencies point one way and the engine keeps to its rooms (docs/architecture.md): a test keeps it so."""

from __future__ import annotations

import ast
import re
from collections import Counter
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


def test_attacks_are_tensor_math_that_imports_no_engine() -> None:
    """An attack sees payloads and a generator (``attacks/attack.py``); who attacks is the engine's."""
    assert _offenders("attacks", ("lightning", "pytorch_lightning", "fedlight.engine", "fedlight.methods",
                                  "fedlight.server", "fedlight.registry", "torch.distributed")) == []


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


def _module(path: Path) -> str:
    """``fedlight/data/sources.py`` -> ``fedlight.data.sources``; a package's ``__init__.py`` -> the package."""
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Each module of fedlight -> the modules of fedlight it imports, at its top or inside a function
    (``from fedlight.data import sources`` imports ``fedlight.data.sources``, not the package)."""
    paths = {_module(p): p for p in PKG.rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in paths else node.module
                          for a in node.names}
        graph[name] = (found & paths.keys()) - {name}
    return graph


def test_no_modules_import_each_other_in_a_circle() -> None:
    """Following a module's imports never leads back to it: what two modules both need lives in a
    third (``data/image_data.py``, which ``sources.py`` and ``tabular.py`` both build on), not in one
    of them with the other imported inside a function to dodge the circle."""
    graph, done, circles = _import_graph(), set(), []

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            circles.append(" -> ".join([*path[path.index(name):], name]))
        elif name not in done:
            for imported in sorted(graph[name]):
                visit(imported, [*path, name])
            done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert circles == []


ENGINE = PKG / "engine"
# the engine's rooms, and the rooms each may import (itself included): run -> parts -> loop -> state, output
MAY_IMPORT = {
    "run": {"run", "parts", "loop", "state", "output"},  # from a recipe to a run folder: the edge
    "parts": {"parts", "loop", "state", "output"},  # one folder per paper's part of a round
    "loop": {"loop", "state", "output"},  # the round loop, which names no paper
    "state": {"state"},  # crash consistency
    "output": {"output"},  # what a run prints and draws
}


def _folders(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.is_dir() and (p / "__init__.py").is_file())


def _room(name: str) -> str | None:
    """The engine room a dotted import names (``fedlight.engine.loop.federation`` -> ``loop``); '' for
    ``fedlight.engine`` itself; None outside the engine."""
    if name == "fedlight.engine":
        return ""
    return name.split(".")[2] if name.startswith("fedlight.engine.") else None


def test_every_engine_module_lives_in_a_room_that_says_who_may_touch_it() -> None:
    assert [p.name for p in ENGINE.glob("*.py") if p.name != "__init__.py"] == []
    assert _folders(ENGINE) == sorted(MAY_IMPORT)
    parts = ENGINE / "parts"
    assert [p.name for p in parts.glob("*.py") if p.name != "__init__.py"] == []  # a part is a folder
    packages = [ENGINE / room for room in MAY_IMPORT] + [parts / name for name in _folders(parts)]
    assert [str(p) for p in packages if not ast.get_docstring(ast.parse((p / "__init__.py").read_text()))] == []


def test_rooms_import_only_the_rooms_below_them() -> None:
    """The loop imports no part and nothing of ``run``; state and output import nothing else of the engine."""
    for room, allowed in MAY_IMPORT.items():
        found = [f"{f}: {n}" for f, names in _imports(f"engine/{room}").items() for n in names
                 if _room(n) is not None and _room(n) not in allowed]
        assert found == [], room


def test_parts_do_not_import_each_other() -> None:
    for part in _folders(ENGINE / "parts"):
        own = f"fedlight.engine.parts.{part}"
        found = [f"{f}: {n}" for f, names in _imports(f"engine/parts/{part}").items() for n in names
                 if n.startswith("fedlight.engine.parts") and n != own and not n.startswith(own + ".")]
        assert found == [], part


def test_the_round_loop_names_no_paper() -> None:
    """A new paper is new files: the loop knows only the parts' interfaces (``loop/interfaces.py``)."""
    text = (ENGINE / "loop" / "federation.py").read_text()
    named = [p for p in ("sofed", "cf-cl", "cfcl", "flesd", "lg-fedavg", "moon", "scaffold", "fedprox", "stream",
                         "buffer", "exchange", "distil", "local_test", "public") if p in text.lower()]
    assert named == []


def test_the_assembler_builds_every_paper_part_through_the_tables() -> None:
    """Built-in schedules and round plug-ins come from ``registry.SCHEDULES`` and ``catalog.ROUND_PARTS``, as an
    outside package's do; ``assemble`` imports no paper's room (only the clock and the faults, which every run has)."""
    papers = ("fedlight.engine.parts.cfcl", "fedlight.engine.parts.sofed", "fedlight.engine.parts.flesd",
              "fedlight.engine.parts.lg_fedavg", "fedlight.engine.parts.fedavg", "fedlight.engine.loop.client_drift")
    assert [n for n in _imports("engine/run")["engine/run/assemble.py"] if n.startswith(papers)] == []


LONGEST_LOOP_FUNCTION = 40  # lines, docstring included: one screen


def _round_steps() -> tuple[list[int], list[str], tuple[str, ...], set[str]]:
    """``Federation.run_round``'s numbered step comments, the method each step calls (``self._x(``),
    ``TRAINING_STEPS`` and the methods ``Federation`` defines, read from federation.py's source."""
    path = ENGINE / "loop" / "federation.py"
    lines, tree = path.read_text().splitlines(), ast.parse(path.read_text())
    federation = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Federation")
    methods = {n.name for n in federation.body if isinstance(n, ast.FunctionDef)}
    run_round = next(n for n in federation.body if isinstance(n, ast.FunctionDef) and n.name == "run_round")
    training = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                    and any(isinstance(x, ast.Name) and x.id == "TRAINING_STEPS" for x in n.targets))
    body = lines[run_round.lineno - 1:run_round.end_lineno]
    numbers, calls = [], []
    for at, line in enumerate(body):
        step = re.match(r"\s*# (\d+)\. ", line)
        if step:
            numbers.append(int(step.group(1)))
            called = re.search(r"self\.(\w+)\(", body[at + 1])  # the step is the line below its comment
            calls.append(called.group(1) if called else "")
    return numbers, calls, training, methods


def test_one_round_reads_top_to_bottom_in_one_function() -> None:
    """A reader learns a round from one place: ``Federation.run_round`` in ``engine/loop/federation.py``
    lists the round's steps in order, each a numbered comment over one call to a method of that file
    whose name says what it does (and whose docstring says how). ``TRAINING_STEPS``, what the benchmarks
    time as a round's training, is its first steps in that order. No function of the loop is longer than
    ``LONGEST_LOOP_FUNCTION`` lines, so each step reads on one screen.

    This replaces a 200-line cap on federation.py: to fit it, one round had been split over about eight
    modules a reader had to chase. Small files were the means; a round readable top to bottom is the goal.
    """
    numbers, calls, training, methods = _round_steps()
    assert len(numbers) >= len(training) and numbers == list(range(1, len(numbers) + 1))
    assert [c for c in calls if c not in methods] == []  # every step calls one of federation.py's methods
    assert tuple(calls[:len(training)]) == training
    too_long = [f"{path.name}: {node.name} ({node.end_lineno - node.lineno + 1} lines)"
                for path in (ENGINE / "loop").glob("*.py") for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno + 1 > LONGEST_LOOP_FUNCTION]
    assert too_long == []


def test_no_two_modules_share_a_file_name() -> None:
    """A file name finds one module: ``faults.py`` cannot mean two things."""
    names = Counter(p.name for p in PKG.rglob("*.py") if p.name != "__init__.py")
    assert sorted(name for name, count in names.items() if count > 1) == []


def test_the_recipe_stops_at_the_run_room() -> None:
    """Each part takes its own typed options: below ``engine/run/`` (``fit``, ``assemble``, the run
    folder and ``preflight``, ``fit``'s torch-free first look) nothing reads a recipe section, so no
    other room, part, method or server imports the recipe schema."""
    def recipe(name: str) -> bool:  # the schema, or the package and loader that hand out a Recipe (not its checks)
        return name == "fedlight.config" or name.startswith(("fedlight.config.schema", "fedlight.config.loader"))

    below = [f"engine/{room}" for room in MAY_IMPORT if room != "run"]
    for folder in (*below, "server", "methods", "attacks", "eval", "data", "models"):
        assert [f"{f}: {n}" for f, names in _imports(folder).items() for n in names if recipe(n)] == [], folder
