"""Hand-computed cases for FedProx, SCAFFOLD, MOON, FedU and FedEMA, and short real runs of each."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from fedlight import registry
from fedlight.config import load_recipe
from fedlight.engine.loop.federation import TIMING
from fedlight.engine.run.fit import fit
from fedlight.methods.byol import BYOL
from fedlight.methods.fedema import FedEMA, ema_weight
from fedlight.methods.fedprox import FedProx, proximal_term
from fedlight.methods.fedu import FedU, divergence
from fedlight.methods.moon import MOON, model_contrastive_loss, representation_l2
from fedlight.methods.scaffold_client import Scaffold as ScaffoldClient, control_update
from fedlight.methods.supervised import Supervised
from fedlight.models.backbones import MoonCNN, SmallCNN
from fedlight.server.scaffold import ScaffoldServer


def test_proximal_gradient_is_mu_times_the_gap() -> None:
    w = torch.tensor([1.0, -2.0], requires_grad=True)
    anchor = torch.tensor([0.5, 0.0])
    term = proximal_term([w], [anchor], mu=0.1)
    term.backward()
    assert torch.isclose(term, torch.tensor(0.5 * 0.1 * (0.25 + 4.0)))
    assert torch.allclose(w.grad, 0.1 * torch.tensor([0.5, -2.0]))


def test_fedprox_adds_nothing_at_the_anchor_and_pulls_back_after() -> None:
    m = FedProx(Supervised(SmallCNN(1), num_classes=2), mu=1.0)
    batch = ([torch.randn(4, 1, 8, 8)], torch.tensor([0, 1, 0, 1]))
    m.train()
    m.on_train_start()
    assert torch.isclose(m.training_step(batch, 0), m.objective.training_step(batch, 0))
    with torch.no_grad():
        m.objective.classifier.bias.add_(1.0)
    assert torch.isclose(m.training_step(batch, 0) - m.objective.training_step(batch, 0), torch.tensor(1.0))


def test_scaffold_control_update_hand_computed() -> None:
    # c_i+ = c_i - c + (w_global - w_i) / (K * lr) = 0.1 - 0.3 + (1.0 - 0.4) / (3 * 0.5) = 0.2
    new = control_update(torch.tensor(0.1), torch.tensor(0.3), torch.tensor(1.0), torch.tensor(0.4), 3, 0.5)
    assert torch.isclose(new, torch.tensor(0.2))


def test_scaffold_client_uses_the_real_step_count_and_corrects_each_step() -> None:
    m = ScaffoldClient(Supervised(SmallCNN(1, (2, 2, 2)), num_classes=2))
    m.optim.name, m.optim.lr = "sgd", 0.1
    with torch.no_grad():
        for c in m.control_global.values():
            c.fill_(0.5)
    opt = m.configure_optimizers()
    batch = ([torch.randn(4, 1, 8, 8)], torch.tensor([0, 1, 0, 1]))
    m.train()
    m.on_train_start()
    start = [p.detach().clone() for _, p in m.trainable_shared()]
    for step in range(3):
        loss = m.training_step(batch, step)
        opt.zero_grad()
        loss.backward()
        opt.step()
        stepped = [p.detach().clone() for _, p in m.trainable_shared()]
        m.on_train_batch_end(loss, batch, step)
        # w <- w - lr (c - c_i) after the optimizer step: 0.1 * (0.5 - 0)
        assert all(torch.allclose(p, w - 0.05) for (_, p), w in zip(m.trainable_shared(), stepped))
    m.on_train_end()
    (name, p0), w0 = m.trainable_shared()[0], start[0]
    expected = 0 - 0.5 + (w0 - p0.detach()) / (3 * 0.1)
    assert torch.allclose(m.control_local.values()[0], expected, atol=1e-6)
    payload = m.payload()
    assert any(k.startswith("control_delta.") for k in payload)
    assert not any(k.startswith("objective.control") or k.startswith("control_global") for k in payload)


def test_scaffold_server_moves_c_by_sum_over_n() -> None:
    agg = ScaffoldServer(num_clients=4)
    global_state = {"w": torch.tensor([0.0]), "control_global.w": torch.tensor([1.0])}
    acc = agg.accumulate(None, {"w": torch.tensor([2.0]), "control_delta.w": torch.tensor([0.4])}, 1.0)
    acc = agg.accumulate(acc, {"w": torch.tensor([4.0]), "control_delta.w": torch.tensor([0.8])}, 3.0)
    out = agg.finalize(global_state, acc)
    assert torch.allclose(out["w"], torch.tensor([3.5]))                  # (2 + 3*4) / 4
    assert torch.allclose(out["control_global.w"], torch.tensor([1.3]))   # 1 + (2/4) * mean(0.4, 0.8)
    nothing = agg.zeros({"w": torch.zeros(1), "control_delta.w": torch.zeros(1)})
    assert agg.finalize(global_state, nothing) is global_state


def test_scaffold_n_counts_the_clients_that_train_not_a_public_client() -> None:
    """SCAFFOLD's c moves by sum / N over the federation's N clients; a public client (FLESD's protocol, kept
    for the baselines beside it) never trains, so it is not one of them."""
    assert registry.validate({"name": "scaffold"}, {"name": "scaffold"}, 5, public_client=0).num_clients == 4
    assert registry.validate({"name": "scaffold"}, {"name": "scaffold"}, 5).num_clients == 5


def test_moon_contrastive_loss_on_fixed_vectors() -> None:
    z = torch.tensor([[1.0, 0.0]])
    z_glob = torch.tensor([[1.0, 0.0]])   # sim 1
    z_prev = torch.tensor([[0.0, 1.0]])   # sim 0
    loss = model_contrastive_loss(z, z_glob, z_prev, tau=0.5)
    expected = -math.log(math.exp(2) / (math.exp(2) + math.exp(0)))
    assert math.isclose(float(loss), expected, rel_tol=1e-6)


def test_moon_term_is_zero_weighted_without_a_previous_model() -> None:
    m = MOON(MoonCNN(1, 28), num_classes=10, mu=5.0)
    batch = ([torch.randn(4, 1, 28, 28)], torch.tensor([0, 1, 2, 3]))
    m.reset_private_state()
    m.train()
    m.on_train_start()
    ce = torch.nn.functional.cross_entropy(m.classify(batch[0][0]), batch[1])
    assert torch.isclose(m.training_step(batch, 0), ce)
    m.on_train_end()  # now the client has a previous model
    with torch.no_grad():
        m.classifier.bias.zero_()
        for p in m.backbone.parameters():
            p.add_(0.05 * torch.randn_like(p))
    m.on_train_start()
    ce = torch.nn.functional.cross_entropy(m.classify(batch[0][0]), batch[1])
    assert m.training_step(batch, 0) > ce


def test_moon_l2_term_on_fixed_vectors() -> None:
    z = torch.tensor([[1.0, 2.0], [0.0, 0.0]])
    z_glob = torch.tensor([[0.0, 0.0], [3.0, 4.0]])  # squared distances 1 + 4 = 5 and 9 + 16 = 25
    assert float(representation_l2(z, z_glob)) == 0.5 * (5 + 25) / 2  # (1/2) ||z - z_glob||^2, batch mean: 7.5


def test_moon_l2_term_applies_from_the_first_round_with_weight_mu() -> None:
    m = MOON(MoonCNN(1, 28), num_classes=10, mu=2.0, output_dim=16, term="l2")
    batch = ([torch.randn(4, 1, 28, 28)], torch.tensor([0, 1, 2, 3]))
    m.reset_private_state()  # no previous model: the l2 term needs none
    m.train()
    m.on_train_start()
    ce = torch.nn.functional.cross_entropy(m.classify(batch[0][0]), batch[1])
    assert torch.isclose(m.training_step(batch, 0), ce)  # z = z_glob at the start of local training
    with torch.no_grad():
        m.frozen_global.head.layers[-1].bias.add_(0.1)  # z_glob = z + 0.1 in each of 16 dimensions
    # mu * (1/2) * 16 * 0.1^2 = 2 * 0.08
    assert torch.isclose(m.training_step(batch, 0), ce + 0.16, atol=1e-5)


def test_only_the_contrastive_term_keeps_a_state_per_client() -> None:
    """MOON's negative is the client's previous model; the l2 term has none, so it stores nothing."""
    contrastive, l2 = (MOON(MoonCNN(1, 28), num_classes=10, output_dim=16, term=t) for t in ("contrastive", "l2"))
    assert contrastive.private_state() and all(k.startswith("previous.") for k in contrastive.private_state())
    assert l2.private_state() == {}
    assert set(l2.shared_state()) == set(contrastive.shared_state())


def test_moon_cnn_shapes() -> None:
    assert MoonCNN(3, 32)(torch.randn(2, 3, 32, 32)).shape == (2, 84)
    assert MoonCNN(1, 28)(torch.randn(2, 1, 28, 28)).shape == (2, 84)
    assert MoonCNN(3, 32)[7].in_features == 400


def test_supervised_projection_dim_builds_moons_network_with_moons_weights() -> None:
    torch.manual_seed(0)
    moon = MOON(MoonCNN(1, 28), num_classes=10, output_dim=256)
    torch.manual_seed(0)
    sup = Supervised(MoonCNN(1, 28), num_classes=10, projection_dim=256)
    assert sup.shared_modules == moon.shared_modules
    assert set(sup.shared_state()) == set(moon.shared_state())
    assert all(torch.equal(v, moon.shared_state()[k]) for k, v in sup.shared_state().items())
    assert sup.classifier.in_features == 256 and sup.project(torch.randn(2, 1, 28, 28)).shape == (2, 256)
    torch.manual_seed(0)
    plain = Supervised(MoonCNN(1, 28), num_classes=10)  # projection_dim=0: the classifier on the 84-d features
    assert plain.classifier.in_features == 84 and not any(k.startswith("projection_head") for k in plain.state_dict())


def test_moon_with_mu_zero_is_fedavg_on_the_same_network(tmp_path: Path, tiny_recipe: Path) -> None:
    """MOON's term off, MOON is FedAvg of the headed supervised network: same history, same weights."""
    common = ["model.backbone=moon_cnn", "views.blur_p=[0.0]", "local.optimizer=sgd", "local.lr=0.01",
              "clients.num=3", "rounds=2", "eval.projector_samples=0"]
    runs = {name: fit(load_recipe(tiny_recipe, [*common, method, f"run.dir={tmp_path / name}"])) for name, method in
            [("moon", "method={name: moon, mu: 0.0, output_dim: 16}"),
             ("fedavg", "method={name: supervised, projection_dim: 16}")]}
    strip = lambda h: [{k: v for k, v in row.items() if k not in TIMING} for row in h]  # noqa: E731
    assert strip(runs["moon"]["history"]) == strip(runs["fedavg"]["history"])
    assert runs["moon"]["baseline"] == runs["fedavg"]["baseline"] and runs["moon"]["final"] == runs["fedavg"]["final"]
    weights = {name: torch.load(tmp_path / name / "checkpoints/last.pt", weights_only=True)["global"] for name in runs}
    assert set(weights["moon"]) == set(weights["fedavg"])
    assert all(torch.equal(v, weights["fedavg"][k]) for k, v in weights["moon"].items())


def _byol_pair(cls, **kw):
    m = cls(BYOL(SmallCNN(1, (2, 2, 2)), hidden_dim=8, output_dim=4), **kw)
    m.reset_private_state()
    m.on_train_end()                     # local copy = current model
    with torch.no_grad():                # the "global" model moves away from it
        for p in m.objective.backbone.parameters():
            p.add_(1.0)
        for p in m.objective.prediction_head.parameters():
            p.add_(1.0)
    return m


def test_divergence_is_mean_conv_weight_distance() -> None:
    a, b = SmallCNN(1, (2, 2, 2)), SmallCNN(1, (2, 2, 2))
    b.load_state_dict(a.state_dict())
    with torch.no_grad():
        b[0].weight.add_(1.0)  # first conv: 1*2*3*3 = 18 weights, distance sqrt(18)
    assert math.isclose(divergence(a, b), math.sqrt(18) / 3, rel_tol=1e-6)


@pytest.mark.parametrize("threshold,keeps_local", [(1e9, False), (1e-9, True)])
def test_fedu_switches_predictor_at_the_threshold(threshold: float, keeps_local: bool) -> None:
    m = _byol_pair(FedU, threshold=threshold)
    global_pred = [p.clone() for p in m.objective.prediction_head.parameters()]
    m.on_train_start()
    source = m.local.prediction_head.parameters() if keeps_local else iter(global_pred)
    assert all(torch.equal(p, q) for p, q in zip(m.objective.prediction_head.parameters(), source))
    assert m.last_divergence is not None and m.last_divergence > 0


def test_fedema_mu_is_tau_at_the_first_update_then_scales_with_divergence() -> None:
    m = _byol_pair(FedEMA, tau=0.7)
    g = next(m.objective.backbone.parameters()).clone()
    l = next(m.local.backbone.parameters()).clone()
    m.on_train_start()
    assert math.isclose(m.last_mu, 0.7, rel_tol=1e-6)
    assert torch.allclose(next(m.objective.backbone.parameters()), 0.7 * l + 0.3 * g, atol=1e-6)
    assert ema_weight(0.5, 1.0) == 0.5 and ema_weight(3.0, 1.0) == 1.0


METHOD_RUNS = {
    "fedprox": ["method={name: fedprox, objective: simclr, mu: 0.01, hidden_dim: 32, output_dim: 16}"],
    "scaffold": ["method={name: scaffold, objective: supervised}", "server.name=scaffold", "views.blur_p=[0.0]"],
    "moon": ["method={name: moon, mu: 5.0}", "model.backbone=moon_cnn", "views.blur_p=[0.0]"],
    "fedu": ["method={name: fedu, hidden_dim: 32, output_dim: 16}"],
    "fedema": ["method={name: fedema, hidden_dim: 32, output_dim: 16}"],
    "local_only": ["server.name=local_only"],
    "centralized": ["server.name=centralized"],
}


@pytest.mark.parametrize("name", METHOD_RUNS)
def test_short_real_run_then_resume_keeps_private_state(tmp_path: Path, tiny_recipe: Path, name: str) -> None:
    args = [*METHOD_RUNS[name], "clients.num=3", "clients.fraction=0.67"]
    straight = fit(load_recipe(tiny_recipe, [*args, "rounds=3", f"run.dir={tmp_path / 'a'}"]))
    fit(load_recipe(tiny_recipe, [*args, "rounds=2", f"run.dir={tmp_path / 'b'}"]))
    resumed = fit(load_recipe(tiny_recipe, [*args, "rounds=3", f"run.dir={tmp_path / 'b'}"]), resume=True)
    assert straight["final"] == resumed["final"]
    assert all(torch.isfinite(torch.tensor(row["train_loss"])) for row in straight["history"])
    ckpt = torch.load(tmp_path / "a/checkpoints/last.pt", weights_only=True)
    if name in ("scaffold", "moon", "fedu", "fedema", "local_only"):
        assert ckpt["clients"], "private state must be stored"
    if name == "local_only":
        assert straight["final"]["linear_probe_acc_std"] is not None and straight["comm"]["bytes_up"] == 0
    if name == "centralized":
        assert all(row["clients"] == [0] for row in straight["history"])


def test_solo_budget_once_trains_each_client_e_epochs_once(tmp_path: Path, tiny_recipe: Path) -> None:
    """MOON's SOLO: E epochs once per party, not R x E; the kept models are only evaluated afterwards."""
    solo = ["method={name: supervised}", "views.blur_p=[0.0]", "clients.num=3", "eval.projector_samples=0"]
    once = [*solo, "server={name: local_only, budget: once}"]
    every = [*solo, "server={name: local_only, budget: per_round}"]
    sampled = fit(load_recipe(tiny_recipe, [*once, "clients.fraction=0.67", "rounds=3", f"run.dir={tmp_path / 'a'}"]))
    trained = [c for row in sampled["history"] for c in row["clients"]]
    assert sorted(trained) == sorted(set(trained))  # nobody trains twice
    assert set(trained) == set(range(3))  # a client sampled late trains then
    fit(load_recipe(tiny_recipe, [*once, "clients.fraction=0.67", "rounds=2", f"run.dir={tmp_path / 'b'}"]))
    resumed = fit(load_recipe(tiny_recipe, [*once, "clients.fraction=0.67", "rounds=3", f"run.dir={tmp_path / 'b'}"]),
                  resume=True)
    assert resumed["final"] == sampled["final"]
    # every party in round 1: R = 3 rounds on the one-off budget end where one round of E epochs ends
    long = fit(load_recipe(tiny_recipe, [*once, "rounds=3", f"run.dir={tmp_path / 'c'}"]))
    short = fit(load_recipe(tiny_recipe, [*every, "rounds=1", f"run.dir={tmp_path / 'd'}"]))
    assert [row["clients"] for row in long["history"]] == [[0, 1, 2], [], []]
    assert long["history"][-1]["train_loss"] is None and long["history"][-1]["answered"] == 0
    assert long["final"] == short["final"]
    per_round = fit(load_recipe(tiny_recipe, [*every, "rounds=3", f"run.dir={tmp_path / 'e'}"]))
    assert [row["clients"] for row in per_round["history"]] == [[0, 1, 2]] * 3
    assert per_round["final"] != long["final"]



@pytest.mark.parametrize("data,size", [("fmnist", (1, 28)), ("cifar10", (3, 32))])
def test_every_baseline_of_the_moon_comparison_runs_on_moons_network(data: str, size: tuple[int, int]) -> None:
    from conftest import REPO

    from fedlight import registry

    def network(name: str) -> dict[str, torch.Size]:
        r = load_recipe(REPO / f"recipes/{name}_{data}.yaml", [])
        module = registry.build_method(r.method, r.model.backbone, *size, 10, None)
        return {k.removeprefix("objective."): v.shape for k, v in module.named_parameters() if v.requires_grad}

    moon = network("moon")
    assert moon["classifier.weight"] == (10, 256)
    for name in ("fedavg", "fedprox", "scaffold", "solo", "solo_per_round"):
        assert network(name) == moon, name
    budgets = {name: load_recipe(REPO / f"recipes/{name}_{data}.yaml", []).server["budget"]
               for name in ("solo", "solo_per_round")}
    assert budgets == {"solo": "once", "solo_per_round": "per_round"}
    if data == "fmnist":
        assert network("fedavg_nohead")["classifier.weight"] == (10, 84)


def test_a_centralized_run_pools_every_share_but_the_public_one(tmp_path: Path, tiny_recipe: Path) -> None:
    """The public client's share never trains; pooled, it did (or, as client 0, left nothing to train)."""
    shares = {}
    for public in (0, 2):
        args = ["clients.num=4", f"partition.public_client={public}", "rounds=1"]
        for server in ("fedavg", "centralized"):
            fit(load_recipe(tiny_recipe, [*args, f"server.name={server}", f"run.dir={tmp_path / server}{public}"]))
            shares[server, public] = json.loads((tmp_path / f"{server}{public}/partition.json").read_text())["sizes"]
        federated = shares["fedavg", public]
        assert shares["centralized", public] == [sum(federated) - federated[public]]
