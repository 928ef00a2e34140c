"""The public aggregator toolkit: its state-dict helpers on hand-computed cases, and docs/aggregators.md's
RFA, centered clipping and server-learning-rate aggregators, installed as another package's entry points
that import only ``from fedlight``, checked by hand and trained through the engine."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import ModuleType

import pytest
import torch

import fedlight
from fedlight import (ClientPayload, cast_like, flatten_states, float_keys, stack_states, unflatten_state,
                      weighted_average)
from fedlight.config import load_recipe
from fedlight.engine.run.fit import check_recipe, fit
from fedlight.errors import UserError
from tests.test_extensions import install, readme_example

EXAMPLES = {"toolkit-rfa": "RFA", "toolkit-centered-clipping": "CenteredClipping", "toolkit-server-lr": "ServerLR"}
FAST = ["clients.num=4", "eval.probe_epochs=1", "eval.knn_k=5", "eval.projector_samples=0", "model.backbone=tiny_cnn"]


@pytest.fixture
def package(tmp_path: Path, monkeypatch) -> dict[str, ModuleType]:
    """The page's examples as one installed package (``my_robust``, with its ``.dist-info``), found by the
    aggregator table's entry points; entry-point name -> the imported module."""
    from fedlight import catalog

    files, lines, names = {}, [], {}
    for marker in EXAMPLES:
        code, entry = readme_example(marker, "fedlight.aggregators")
        name, target = (s.strip().strip('"') for s in entry.split("="))
        module = target.split(":")[0]
        files[f"{module.split('.')[1]}.py"] = code
        lines.append(f"{name} = {target}\n")
        names[name] = module
    site = tmp_path / "site"
    install(site, "my_robust", files, "[fedlight.aggregators]\n" + "".join(lines))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(catalog.SERVERS, "_found", None)  # look for entry points again, with the package
    return {name: importlib.import_module(module) for name, module in names.items()}


def test_flatten_and_unflatten_are_inverse_and_keep_shapes_dtypes_and_ints_apart() -> None:
    state = {"conv": torch.arange(12.0).reshape(2, 1, 2, 3), "n": torch.tensor(7), "half": torch.ones(2).half()}
    keys = float_keys(state)
    assert keys == ["conv", "half"]
    flat = flatten_states([state, state], keys)
    assert flat.shape == (2, 14) and flat.dtype == torch.float64 and flat[1, 11] == 11.0
    back = unflatten_state(flat[0], state, keys)
    assert list(back) == keys and torch.equal(back["conv"], state["conv"]) and back["half"].dtype == torch.float16
    assert stack_states([state, state], "conv").shape == (2, 2, 1, 2, 3)
    assert cast_like(torch.tensor(2.6, dtype=torch.float64), state["n"]).item() == 3
    with pytest.raises(ValueError, match="13 values cannot fill 14"):
        unflatten_state(torch.zeros(13), state, keys)


def test_rfa_finds_the_geometric_median_that_an_outlier_does_not_drag(package) -> None:
    # three 1-D models 0, 1 and 100: the mean is 33.7, the geometric (here: plain) median 1
    rfa = package["rfa"].RFA(iterations=100)
    payloads = [ClientPayload(c, 1.0, {"w": torch.tensor([v]), "n": torch.tensor(c)}) for c, v in enumerate((0., 1., 100.))]
    out = rfa.finalize({"w": torch.zeros(1), "n": torch.tensor(9)}, payloads)
    assert out["w"].item() == pytest.approx(1.0, abs=1e-4) and out["n"].item() == 9  # ints: the global model's
    heavy = [p._replace(weight=5.0) if p.client == 0 else p for p in payloads]  # weight 5 of 7: past half
    assert rfa.finalize({"w": torch.zeros(1)}, heavy)["w"].item() == pytest.approx(0.0, abs=1e-4)


def test_centered_clipping_clips_around_the_last_rounds_aggregate(package) -> None:
    cc = package["centered_clipping"].CenteredClipping(tau=2.0)
    start = {"w": torch.tensor([1.0, 1.0])}
    updates = ([1.0, 0.0], [-1.0, 0.0], [100.0, 0.0])  # the third clipped to (2, 0): mean (2/3, 0)
    payloads = [ClientPayload(c, 1.0, {"w": start["w"] + torch.tensor(u)}) for c, u in enumerate(updates)]
    first = cc.finalize(start, payloads)
    assert first["w"].tolist() == pytest.approx([1 + 2 / 3, 1.0])
    # next round from centre (2/3, 0): offsets (1/3, 0), (-5/3, 0) and (2, 0) clipped: mean (2/9, 0)
    second = cc.finalize(start, payloads)
    assert second["w"].tolist() == pytest.approx([1 + 2 / 3 + 2 / 9, 1.0])
    assert cc.state_dict()["center"].tolist() == pytest.approx([8 / 9, 0.0])


def test_the_server_learning_rate_example_steps_part_of_the_way_to_fedavg(package) -> None:
    server = package["server_lr"].ServerLR(eta=0.5)
    states = [{"w": torch.tensor([2.0]), "n": torch.tensor(4)}, {"w": torch.tensor([6.0]), "n": torch.tensor(8)}]
    acc = None
    for state, weight in zip(states, (3.0, 1.0)):
        acc = server.accumulate(acc, state, weight)
    out = server.finalize({"w": torch.tensor([0.0]), "n": torch.tensor(0)}, acc)
    assert out["w"].item() == 1.5 and out["n"] == weighted_average(states, [3.0, 1.0])["n"] == 5  # 0 + (3 - 0) / 2


def test_the_examples_import_nothing_of_fedlight_but_its_public_names(package) -> None:
    """The reason for the toolkit: RFA and centered clipping written with ``from fedlight import ...`` alone."""
    for module in package.values():
        tree = ast.parse(Path(module.__file__).read_text())
        imported = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module.startswith("fedlight")]
        assert imported and all(node.module == "fedlight" for node in imported), module.__name__
        assert {a.name for node in imported for a in node.names} <= set(fedlight.__all__)


@pytest.mark.parametrize("server, rounds", [("{name: rfa, iterations: 2}", 2), ("{name: centered_clipping, tau: 0.5}", 2),
                                            ("{name: server_lr, eta: 0.5}", 1)], ids=["rfa", "cc", "server_lr"])
def test_each_example_trains_through_the_engine(package, tmp_path: Path, tiny_recipe: Path, server: str,
                                                rounds: int) -> None:
    run = tmp_path / "run"
    res = fit(load_recipe(tiny_recipe, [*FAST, f"server={server}", f"rounds={rounds}", f"run.dir={run}"]))
    assert res["rounds_completed"] == rounds and all(row["answered"] == 4 for row in res["history"])
    assert res["final"]["knn_acc"] is not None and res["recipe"]["resolved"]["server"]["name"] in server
    saved = torch.load(run / "checkpoints/last.pt", weights_only=True)
    assert all(torch.isfinite(v.float()).all() for v in saved["global"].values())


def test_rfa_takes_differential_privacy_and_stateful_centered_clipping_is_refused(package, tiny_recipe: Path) -> None:
    dp = check_recipe(load_recipe(tiny_recipe, [*FAST, "server={name: rfa, dp: {clip: 0.5}}"]))
    assert type(dp.inner).__name__ == "RFA" and dp.clip == 0.5
    with pytest.raises(UserError, match="server.dp cannot wrap server.name=centered_clipping: it keeps state across "
                                        "rounds"):
        check_recipe(load_recipe(tiny_recipe, [*FAST, "server={name: centered_clipping, dp: {}}"]))


def test_the_toolkits_docstring_examples_hold() -> None:
    import doctest

    from fedlight.server import differential_privacy, ops, robust_ops

    for module in (ops, robust_ops, differential_privacy):
        result = doctest.testmod(module, extraglobs={"torch": torch, "Median": fedlight.Median})
        assert result.attempted and not result.failed, module.__name__
