"""Each part's typed options: built from a recipe by assemble, checked by the part."""

from __future__ import annotations

from dataclasses import MISSING, asdict, fields
from pathlib import Path
from typing import Any, Callable

import pytest

from fedlight import registry
from fedlight.config import load_recipe
from fedlight.config.schema import Recipe
from fedlight.engine.loop.client_faults import FaultOptions
from fedlight.engine.loop.evaluator import EvalOptions
from fedlight.engine.loop.round_options import RoundOptions
from fedlight.engine.parts.cfcl.exchange_schedule import ExchangeOptions
from fedlight.engine.parts.lg_fedavg.new_device import NewDeviceOptions
from fedlight.engine.parts.sofed.stream_loop import BufferOptions
from fedlight.engine.parts.sofed.stream_schedule import StreamOptions
from fedlight.engine.run.part_options import part_options
from fedlight.errors import UserError


def _options(recipe_path: Path, *overrides: str):
    recipe = load_recipe(recipe_path, list(overrides))
    return part_options(recipe, registry.validate(recipe.method, recipe.server, recipe.clients.num,
                                                  recipe.partition.public_client))


def test_a_recipe_becomes_each_parts_own_options(tiny_recipe: Path) -> None:
    o = _options(tiny_recipe, "eval.extra_label_fractions=[0.1]", "faults.dropout=0.25", "stream.velocity=96",
                 "buffer.size=32", "buffer.policy=fifo")
    assert o.schedule == "stream" and o.exchange is None
    assert o.stream == StreamOptions(velocity=96, stc=500, buffer=BufferOptions(size=32, policy="fifo"))
    assert o.eval == EvalOptions(extra_label_fractions=(0.1,), knn_k=20, probe_epochs=20)
    assert o.faults == FaultOptions(dropout=0.25)
    assert (o.round.rounds, o.round.seed, o.round.fraction) == (2, 3, 1.0)
    assert o.round.record["local"]["batch_size"] == 64  # the resolved recipe, written as it is


def test_the_exchange_gets_its_options_only_when_it_is_the_schedule(tiny_recipe: Path) -> None:
    o = _options(tiny_recipe, "local.iterations=10", "exchange.pull_every=5", "exchange.graph=ring",
                 "method={name: triplet}")
    assert o.schedule == "exchange" and o.stream is None
    assert o.exchange == ExchangeOptions(graph="ring", pull_every=5)


@pytest.mark.parametrize("make, key", [
    (lambda: FaultOptions(dropout=1.5), "faults.dropout=1.5"),
    (lambda: FaultOptions(straggler_work=0.0), "faults.straggler_work=0.0"),
    (lambda: FaultOptions(max_bad_clients=-1), "faults.max_bad_clients=-1"),
    (lambda: BufferOptions(policy="lifo"), "buffer.policy='lifo'"),
    (lambda: BufferOptions(size=0), "buffer.size=0"),
    (lambda: StreamOptions(velocity=0), "stream.velocity=0"),
    (lambda: EvalOptions(extra_label_fractions=(0.1, 2.0)), "eval.extra_label_fractions"),
    (lambda: EvalOptions(knn_k=0), "eval.knn_k=0"),
    (lambda: RoundOptions(rounds=3, lr_decay=0.1), "local.lr_decay=0.1 applies to local.lr_schedule=exponential"),
    (lambda: ExchangeOptions(policy="uniform").check(1, "triplet"), "needs at least 2 devices"),
    (lambda: ExchangeOptions(avg_degree=9.0).check(4, "simclr"), r"exchange.avg_degree=9.0 .* \[1.5, 3\]"),
    (lambda: ExchangeOptions(policy="smart").check(4, "simclr"), "set method.name=triplet"),
    (lambda: ExchangeOptions(pull_every=0), "exchange.pull_every=0 must be > 0"),
    (lambda: ExchangeOptions(importance_model="local", policy="uniform").check(4, "triplet"),
     "exchange.importance_model=local scores the smart pull"),
    (lambda: NewDeviceOptions(train=0), "new_device.train=0"),
    (lambda: NewDeviceOptions(goal_acc=3.0), r"goal_acc=3.0 .* in \[0, 1\]"),
])
def test_each_part_refuses_its_own_bad_options_in_one_line(make: Callable[[], Any], key: str) -> None:
    with pytest.raises(UserError, match=key) as caught:
        make()
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("overrides, message", [
    (["local.iterations=10", "stream.velocity=96"], "two different schedules; drop one"),
    (["exchange.policy=uniform"], "exchange.policy=uniform needs local.iterations"),
    (["fabric.workers=2", "local.iterations=10", "exchange.graph=complete"], "fabric.workers=2 trains clients side"),
    (["new_device.rotation=90", "server.name=centralized"], "server.name=centralized pools every client"),
    (["new_device.rotation=90", "stream.velocity=96"], "new_device.rotation trains the new device by epochs"),
    (["new_device.rotation=90", "clients.sampling=poisson"], "not clients.sampling=poisson: set clients.sampling=fixed"),
    (["method={name: lg, objective: supervised, warmup_goal_metric: normal_acc}"],
     "method.warmup_goal_metric=normal_acc is the new device's column"),
])
def test_parts_that_do_not_go_together_are_refused_by_assemble(tiny_recipe: Path, overrides: list[str],
                                                                 message: str) -> None:
    with pytest.raises(UserError, match=message):
        _options(tiny_recipe, *overrides)


def test_an_exchange_policy_under_another_schedule_is_refused(tiny_recipe: Path, monkeypatch) -> None:
    monkeypatch.setitem(registry.SCHEDULES.builtins, "other", registry.SCHEDULES["epochs"])
    with pytest.raises(UserError, match="exchange.policy=uniform runs in local.schedule=exchange only .got other."):
        _options(tiny_recipe, "exchange.policy=uniform", "local.iterations=10", "local.schedule=other")


@pytest.mark.parametrize("section, options, differ", [
    ("faults", FaultOptions, {}),
    ("buffer", BufferOptions, {}),
    ("exchange", ExchangeOptions, {}),
    ("eval", EvalOptions, {}),
    ("new_device", NewDeviceOptions, {"rotation": None}),  # the section is off until rotation is set
])
def test_each_parts_defaults_are_its_recipe_sections(section: str, options: type, differ: dict[str, Any]) -> None:
    """The recipe schema and a part's options spell the same defaults twice (a part is usable
    without a recipe); a change to one that misses the other fails here."""
    recipe = asdict(Recipe())[section]
    part = {f.name: f.default if f.default is not MISSING else f.default_factory() for f in fields(options)}
    shared = (set(recipe) & set(part)) - set(differ)
    assert shared and {k: recipe[k] for k in shared} == {k: _plain(part[k]) for k in shared}
    assert all(recipe[k] == v for k, v in differ.items())  # the recipe's own, on purpose


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
