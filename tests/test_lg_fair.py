"""Fair LG-FedAvg: the diabetes table, the signs of the alternating adversarial updates, a short real run."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fedlight.config import load_recipe
from fedlight.data.sources import load_dataset, take_subset
from fedlight.engine.run.fit import fit
from fedlight.errors import UserError
from fedlight.methods.fair import FairLocalGlobal
from fedlight.methods.federated_module import OptimizerSpec
from fedlight.methods.supervised import Supervised
from fedlight.models.backbones import MLP
from fedlight.server.fedavg import FedAvg

REPO = Path(__file__).resolve().parents[1]


def test_diabetes_has_a_binary_task_and_a_protected_attribute() -> None:
    from sklearn.datasets import load_diabetes

    data = load_dataset("diabetes", "unused", download=False, seed=0)
    assert data.train_x.shape == (354, 10, 1, 1) and data.test_x.shape == (88, 10, 1, 1)
    assert data.train_x.dtype == torch.uint8 and data.num_classes == 2
    y = torch.cat([data.train_y, data.test_y]).float()
    assert abs(float(y.mean()) - 0.5) < 0.01  # split at the median
    table = load_diabetes(scaled=False)
    sex = data.train_x[:, table.feature_names.index("sex"), 0, 0]
    assert set(sex.tolist()) == {0, 255} and torch.equal((sex == 255).long(), data.train_a)  # the input column
    assert set(data.test_a.tolist()) == {0, 1}
    sub = take_subset(data, 100, 20, seed=0)  # the attribute follows its rows
    assert len(sub.train_a) == 100 and len(sub.test_a) == 20 and torch.equal(
        (sub.train_x[:, 1, 0, 0] == 255).long(), sub.train_a)


def _module(weight: float) -> FairLocalGlobal:
    torch.manual_seed(0)
    objective = Supervised(MLP(6, (8, 4)), num_classes=2, optim=OptimizerSpec("sgd", lr=0.05, momentum=0.0,
                                                                                weight_decay=0.0))
    return FairLocalGlobal(objective, 2, ["classifier"], adversary_weight=weight, adversary_lr=0.05,
                           adversary_steps=1)


def _batch() -> tuple[list[torch.Tensor], torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    a = torch.arange(32) % 2
    x = torch.randn(32, 6, 1, 1, generator=g)
    x[:, 0, 0, 0] += 2.0 * a  # the attribute is planted in the input
    y = (x[:, 1, 0, 0] > 0).long()
    return [x], torch.stack([y, a], dim=1)


def _adv_loss(m: FairLocalGlobal, x: torch.Tensor, a: torch.Tensor) -> float:
    with torch.no_grad():
        return float(F.binary_cross_entropy_with_logits(m.protected_logits(x), a.float()))


def test_adversary_descends_its_loss_and_leaves_the_model_alone() -> None:
    m = _module(1.0)
    views, ya = _batch()
    h = m.objective.features(views[0])
    model_before = copy.deepcopy(m.objective.state_dict())
    before = _adv_loss(m, views[0], ya[:, 1])
    m.adversary_step(h, ya[:, 1])
    assert _adv_loss(m, views[0], ya[:, 1]) < before  # the adversary minimises its loss
    assert all(torch.equal(v, m.objective.state_dict()[k]) for k, v in model_before.items())


def test_model_step_maximises_the_adversary_loss() -> None:
    views, ya = _batch()
    a = ya[:, 1]
    m = _module(1.0)
    loss = m.training_step((views, ya), 0)  # runs the adversary step first
    # the returned loss is L_task - lambda * L_adv with the (just updated) adversary
    with torch.no_grad():
        task = F.cross_entropy(m.classify(views[0]), ya[:, 0])
    assert torch.allclose(loss.detach(), task - _adv_loss(m, views[0], a), atol=1e-6)
    # the adversary is not among the parameters the engine's optimizer steps
    stepped = {id(p) for group in m.configure_optimizers().param_groups for p in group["params"]}
    assert not stepped & {id(p) for p in m.adversary.parameters()}
    assert {id(p) for p in m.objective.parameters()} <= stepped

    def after_model_step(weight: float) -> tuple[float, torch.Tensor]:
        m = _module(weight)
        opt = m.configure_optimizers()
        loss = m.training_step((views, ya), 0)
        adversary = copy.deepcopy(m.adversary.state_dict())
        before = _adv_loss(m, views[0], a)
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert all(torch.equal(v, m.adversary.state_dict()[k]) for k, v in adversary.items())
        return _adv_loss(m, views[0], a) - before

    # with the adversarial term dominating, the model's step raises the (fixed) adversary's loss
    assert after_model_step(50.0) > 0
    # with lambda = 0 the model's step ignores the adversary: it does not climb its loss as fast
    assert after_model_step(0.0) < after_model_step(50.0)


FAIR_OVERRIDES = ["rounds=2", "local.epochs=1", "eval.every=2", "eval.probe_epochs=5"]


def test_fair_run_reports_table4_metrics_and_keeps_the_adversary_local(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[set[str]] = []
    original = FedAvg.accumulate
    monkeypatch.setattr(FedAvg, "accumulate", lambda self, acc, p, w: (seen.append(set(p)), original(self, acc, p, w))[1])
    res = fit(load_recipe(REPO / "recipes/lg_fair.yaml", [*FAIR_OVERRIDES, f"run.dir={tmp_path / 'fair'}"]))
    assert seen and all(p == {"objective.classifier.weight", "objective.classifier.bias"} for p in seen)
    clients = torch.load(tmp_path / "fair/checkpoints/last.pt", weights_only=True)["clients"]
    assert sorted(clients) == [0, 1, 2, 3] and "adversary.0.weight" in clients[0]
    assert not torch.equal(clients[0]["adversary.0.weight"], clients[1]["adversary.0.weight"])
    # the new test's one-time upload: each client's local encoder, never its adversary
    encoder = sum(v.numel() for k, v in clients[0].items() if k.startswith("objective.backbone."))
    assert encoder and res["comm"]["params_new_test"] == 4 * encoder
    final = res["final"]
    for key in ("class_acc", "class_auc", "adv_auc", "postfit_adv_auc", "local_test_acc", "new_test_acc"):
        assert 0 <= final[key] <= 1, key
    assert final["class_auc"] > 0.6  # the task is learnable in two rounds (about 0.8 when written)
    for key in ("class_acc", "adv_auc", "postfit_adv_auc"):  # each metric's floor: the random-init model's
        assert 0 <= res["baseline"][key] <= 1, key


def test_fair_method_needs_a_protected_attribute(tmp_path: Path) -> None:
    recipe = load_recipe(REPO / "recipes/lg_fair.yaml", ["data.name=synthetic", "model.backbone=tiny_cnn",
                                                        f"run.dir={tmp_path / 'x'}"])
    with pytest.raises(UserError, match="protected attribute"):
        fit(recipe)
    assert not (tmp_path / "x").exists()
