"""FedBN (Li et al., ICLR 2021): BatchNorm layers never leave the client, under any objective."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from fedlight import registry
from fedlight.config import load_recipe
from fedlight.engine.run.fit import fit
from fedlight.errors import UserError
from fedlight.methods.federated_module import OptimizerSpec

FAST = ["eval.probe_epochs=1", "eval.knn_k=5", "eval.projector_samples=0"]
BN_SUFFIXES = ("running_mean", "running_var", "num_batches_tracked")


def _build(objective: str, backbone: str = "small_cnn"):
    return registry.build_method({"name": "fedbn", "objective": objective}, backbone, 1, 28, 10, OptimizerSpec())


def _bn_keys(module: torch.nn.Module) -> set[str]:
    """Every state key of every BatchNorm module outside the objective's private / transient modules."""
    skip = ("objective.backbone_momentum", "objective.projection_head_momentum")
    return {f"{n}.{k}" for n, m in module.named_modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
            and not n.startswith(skip) for k in m.state_dict()}


@pytest.mark.parametrize("objective", ["simclr", "byol", "supervised"])
def test_bn_state_is_private_and_everything_else_shared(objective: str) -> None:
    m = _build(objective)
    bn, shared, private = _bn_keys(m), set(m.shared_state()), set(m.private_state())
    assert bn and bn <= private and not bn & shared  # affine parameters AND running statistics
    assert not any(k.endswith(BN_SUFFIXES) for k in shared)
    assert shared | private | set(m.transient_state()) == set(m.state_dict())  # nothing lost, nothing twice
    assert not shared & private
    plain = registry.build_method({"name": objective}, "small_cnn", 1, 28, 10, OptimizerSpec())
    assert {f"objective.{k}" for k in plain.shared_state()} - shared == bn  # only the BN layers moved


def test_a_new_client_starts_from_initial_bn_and_byol_target_copies_it() -> None:
    m = _build("byol")
    bn = m.objective.backbone[1]
    with torch.no_grad():
        bn.weight.fill_(3.0)
        bn.running_mean.fill_(2.0)
    m.reset_private_state()
    assert torch.equal(bn.weight, torch.ones_like(bn.weight)) and torch.equal(bn.running_mean, torch.zeros(32))
    assert torch.equal(m.objective.backbone_momentum[1].weight, bn.weight)


def test_a_backbone_without_batchnorm_is_a_user_error() -> None:
    with pytest.raises(UserError, match="method.name=fedbn"):
        _build("supervised", "lenet5")


@pytest.mark.parametrize("objective", ["simclr", "byol"])
def test_bn_never_leaves_the_client_in_a_run(tmp_path: Path, tiny_recipe: Path, objective: str) -> None:
    res = fit(load_recipe(tiny_recipe, [*FAST, f"method={{name: fedbn, objective: {objective}, hidden_dim: 32, "
                                               "output_dim: 16}", f"run.dir={tmp_path / 'run'}"]))
    ckpt = torch.load(tmp_path / "run/checkpoints/last.pt", weights_only=True)
    glob, clients = ckpt["global"], ckpt["clients"]
    assert not any(".1." in k or ".5." in k or ".9." in k or k.endswith(BN_SUFFIXES) for k in glob)
    # what went up and down each round is exactly the global (non-BN) state: the ledger counts no BN byte
    size = sum(t.numel() * t.element_size() for t in glob.values())
    for row in res["history"]:
        assert row["bytes_up"] == row["bytes_down"] == 2 * size
    rows = [line.split(",") for line in (tmp_path / "run/comm.csv").read_text().splitlines()[1:]]
    assert {int(r[4]) for r in rows} == {size}
    # each client kept its own BN layers, and they differ after training
    bn = [k for k in clients[0] if k.startswith("objective.backbone.1.")]
    assert {"objective.backbone.1.weight", "objective.backbone.1.running_mean"} <= set(bn)
    for key in ("objective.backbone.1.running_mean", "objective.backbone.1.weight"):
        assert not torch.equal(clients[0][key], clients[1][key])
    assert int(clients[0]["objective.backbone.1.num_batches_tracked"]) > 0
    assert json.loads((tmp_path / "run/results.json").read_text())["rounds_completed"] == 2


def test_supervised_fedbn_scores_each_client_with_its_own_bn(tmp_path: Path, tiny_recipe: Path) -> None:
    """eval.local_test: each client's model (global layers + its own BN) on its own test split; the
    global metrics then describe the averaged model (BN averaged for evaluation only)."""
    res = fit(load_recipe(tiny_recipe, [*FAST, "method={name: fedbn, objective: supervised}", "eval.local_test=true",
                                        f"run.dir={tmp_path / 'run'}"]))
    last = res["history"][-1]
    assert 0 <= last["local_test_acc"] <= 1 and last["local_test_acc_std"] is not None
    assert 0 <= res["final"]["test_acc"] <= 1
    # the new test's one-time upload of every local model (LG-FedAvg's accounting) is the only BN traffic
    assert res["comm"]["bytes_new_test"] > 0 and last["bytes_up"] == last["bytes_down"]


def test_simclr_fedbn_local_test_is_each_clients_knn_on_its_own_split(tmp_path: Path, tiny_recipe: Path) -> None:
    """Without a classifier, eval.local_test scores each client's model by kNN (local_knn_acc) and runs no new
    test (it would need a classifier): no crash, no local_test_acc, nothing uploaded for it."""
    res = fit(load_recipe(tiny_recipe, [*FAST, "method={name: fedbn, objective: simclr, hidden_dim: 32, "
                                               "output_dim: 16}", "eval.local_test=true", f"run.dir={tmp_path / 'run'}"]))
    last = res["history"][-1]
    assert 0 <= last["local_knn_acc"] <= 1 and last["local_knn_acc_std"] is not None
    assert "local_test_acc" not in last and res["comm"]["bytes_new_test"] == 0
    assert 0 <= res["baseline"]["local_knn_acc"] <= 1


def test_local_knn_pairs_each_clients_bank_with_its_own_test_split() -> None:
    """Hand-made: client 0's queries are its own bank points with their labels (kNN, k = 1: all right);
    client 1's test labels are the other class (all wrong): mean 0.5, spread 0.5."""
    from types import SimpleNamespace

    import numpy as np

    from fedlight.engine.parts.lg_fedavg.local_tester import LocalTester

    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.1], [0.1, 1.0]])
    data = SimpleNamespace(train_x=x, train_y=torch.tensor([0, 1, 0, 1]), test_x=x,
                           test_y=torch.tensor([0, 1, 1, 0]), num_classes=2)
    module = SimpleNamespace(has_classifier=False, features=lambda t: t, load_partial=lambda state: None)
    evaluator = SimpleNamespace(module=module, data=data, options=SimpleNamespace(knn_k=1, knn_temperature=0.1),
                                apply=lambda fn, t: fn(t), fabric=SimpleNamespace(to_device=lambda t: t))
    tester = LocalTester(evaluator, [np.array([0, 1]), np.array([2, 3])], [np.array([0, 1]), np.array([2, 3])],
                         [2.0, 2.0])
    out = tester.metrics([{"w": torch.zeros(1)}, {"w": torch.ones(1)}])
    assert out == {"local_knn_acc": 0.5, "local_knn_acc_std": 0.5}
