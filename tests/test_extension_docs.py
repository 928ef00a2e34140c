"""The extension docs name what the code has: every entry-point group (docs/extending.md and
docs/aggregators.md), every hook of ``RoundPlugin`` (extending.md), and every attribute the engine, the
registry or a wrapper reads of a method (docs/method_contract.md)."""

from __future__ import annotations

import re
from pathlib import Path

from fedlight import catalog
from fedlight.engine.loop.interfaces import RoundPlugin
from fedlight.extensions import Table
from fedlight.methods.federated_module import FederatedModule

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
# getattr / hasattr of a method (the worker ``module``, a wrapper's ``objective``) with a literal name
READ = re.compile(r"\b(?:getattr|hasattr)\((?:self\.)?(?:module|objective|method)\b[^,()]*,\s*\"(\w+)\"")
NOT_A_METHODS = {"bank"}  # federated_module.py reads a lightly memory bank's, a sub-module of the method


def groups() -> set[str]:
    return {table.group for table in vars(catalog).values() if isinstance(table, Table)}


def test_every_entry_point_group_is_in_extending_and_aggregators() -> None:
    assert len(groups()) == 6 and "fedlight.attacks" in groups()
    for page in ("extending.md", "aggregators.md"):
        text = (DOCS / page).read_text()
        assert sorted(g for g in groups() if f"`{g}`" not in text) == [], page
    table = (DOCS / "extending.md").read_text().split("| entry point |", 1)[1].split("\n\n", 1)[0]
    assert set(re.findall(r"^\| `(fedlight\.\w+)`", table, re.M)) == groups()


def test_every_round_plugin_hook_is_in_extending() -> None:
    text = (DOCS / "extending.md").read_text()
    hooks = {name for name in vars(RoundPlugin) if not name.startswith("_")}
    assert hooks >= {"evaluate", "columns", "option_keys", "needs_clients"}
    assert sorted(h for h in hooks if f"`{h}" not in text) == []
    assert "engine/loop/interfaces.py" not in text  # the page lists them: no reader is sent into the engine


def engine_reads() -> set[str]:
    """The attributes fedlight reads of a method by name: getattr / hasattr in its source."""
    found = set()
    for path in (REPO / "fedlight").rglob("*.py"):
        found |= set(READ.findall(path.read_text()))
    return found - NOT_A_METHODS


def test_every_attribute_the_engine_reads_of_a_method_is_in_the_contract() -> None:
    text = (DOCS / "method_contract.md").read_text()
    read = engine_reads()
    assert {"target_modules", "predictor_module", "uses_protected", "update_split"} <= read
    wrapper = {"default_objective", "forwarded_hooks"}  # read of a wrapper's class by the registry
    own = {name for name, value in vars(FederatedModule).items() if not name.startswith("_") and not callable(value)}
    assert sorted(a for a in read | wrapper | own if f"`{a}`" not in text) == []


def test_the_aggregator_tutorials_line_count_is_fedavgs() -> None:
    text = (DOCS / "tutorials/write-an-aggregator.md").read_text()
    said = int(re.search(r"`fedlight/server/fedavg.py` is the (\d+)-line example", text).group(1))
    assert said == len((REPO / "fedlight/server/fedavg.py").read_text().splitlines())
