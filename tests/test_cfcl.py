"""CF-CL: device graph, reserve push, eq. 8-12 pull, exchange state, iteration schedule, a real run."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from lightning.fabric import Fabric

import cli_process
from fedlight.cli import main
from fedlight.config import load_recipe
from fedlight.data.image_data import ImageData
from fedlight.data.partition import class_counts
from fedlight.engine.parts.cfcl.delay import period_delay
from fedlight.engine.parts.cfcl.exchange import Exchange
from fedlight.engine.parts.cfcl.exchange_schedule import EXCHANGE, ExchangeOptions, ExchangeSchedule
from fedlight.engine.parts.cfcl.graph import complete, is_connected, random_geometric_graph, ring
from fedlight.engine.parts.cfcl.iteration_loop import train_client_iterations
from fedlight.engine.parts.cfcl.pull import (macro_probabilities, micro_probabilities, pull_probabilities,
                                             sample_pull, selection_temperature)
from fedlight.engine.parts.cfcl.push import reserve_points
from fedlight.engine.run import fit as fit_module
from fedlight.engine.run.fit import fit
from fedlight.errors import UserError
from fedlight.methods.federated_module import OptimizerSpec
from fedlight.methods.supervised import Supervised
from fedlight.methods.triplet import Triplet, expected_triplet_loss, triplet_loss
from fedlight.models.backbones import CFCLCNN

REPO = Path(__file__).resolve().parents[1]

TINY_CFCL = """
defaults:
  - {repo}/configs/data/synthetic.yaml
  - {repo}/configs/views/cfcl.yaml
seed: 1
rounds: 2
partition: {{kind: classes, classes_per_client: 2}}
clients: {{num: 5, fraction: 1.0}}
model: {{backbone: cfcl_cnn}}
local: {{batch_size: 32, lr: 1.0e-3, optimizer: adam, iterations: 10}}
method: {{name: triplet, margin: 0.5}}
server: {{name: fedavg}}
exchange: {{policy: smart, reserve: 20, approx: 50, pull_size: 10, pull_every: 5}}
eval: {{every: 1, probe_epochs: 10, knn_k: 10, projector_samples: 20}}
fabric: {{accelerator: cpu, devices: 1}}
"""


def _recipe(tmp_path: Path, *overrides: str):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "cfcl.yaml"
    path.write_text(TINY_CFCL.format(repo=REPO) + f"run: {{dir: {tmp_path / 'run'}}}\n")
    return path, load_recipe(path, list(overrides))


# ---------------------------------------------------------------- graph
@pytest.mark.parametrize("seed", range(10))
def test_rgg_has_the_target_average_degree_and_is_connected(seed: int) -> None:
    adj, pos = random_geometric_graph(10, 3.0, np.random.default_rng(seed))
    assert (adj == adj.T).all() and not adj.diagonal().any()
    assert adj.sum() / 10 == 3.0 and is_connected(adj)
    dist = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
    off = ~np.eye(10, dtype=bool)
    assert dist[adj].max() <= dist[off & ~adj].min()  # geometric: every link shorter than every non-link


def test_rgg_differs_by_seed_and_rejects_impossible_degrees() -> None:
    a, _ = random_geometric_graph(10, 3.0, np.random.default_rng(0))
    b, _ = random_geometric_graph(10, 3.0, np.random.default_rng(1))
    assert (a != b).any()
    with pytest.raises(ValueError):
        random_geometric_graph(10, 1.0, np.random.default_rng(0))  # 5 edges cannot connect 10 devices


def test_ring_complete_and_connectivity_check() -> None:
    assert (ring(6).sum(1) == 2).all() and is_connected(ring(6))
    assert (complete(5).sum(1) == 4).all()
    split = np.zeros((4, 4), dtype=bool)
    split[0, 1] = split[1, 0] = split[2, 3] = split[3, 2] = True
    assert not is_connected(split)


# ---------------------------------------------------------------- partition (sec. IV)
SEED0_PAIRS = [{1, 2}, {1, 7}, {3, 7}, {3, 4}, {4, 9}, {6, 9}, {6, 8}, {5, 8}, {0, 5}, {0, 2}]  # the recipe comment's


@pytest.mark.parametrize("name, size", [("cfcl_fmnist.yaml", 6000), ("cfcl_fmnist_small.yaml", 1000)])
def test_recipes_give_each_device_two_classes_shared_one_at_a_time(name: str, size: int,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Sec. IV: "each device has 6K datapoints from two of 10 classes", here in 10 distinct, overlapping
    pairs: device i shares exactly one class with devices i - 1 and i + 1, so that the macro stage of
    smart pulling meets partially overlapping class sets (the old ``classes`` kind gave none)."""
    labels = torch.arange(60_000) % 10  # Fashion-MNIST's training set: 6,000 images a class
    fake = ImageData(torch.zeros(60_000, 1, 1, 1, dtype=torch.uint8), labels,
                     torch.zeros(10_000, 1, 1, 1, dtype=torch.uint8), torch.arange(10_000) % 10, 10)
    monkeypatch.setattr(fit_module, "load_dataset", lambda *args: fake)
    data, parts = fit_module.prepare_data(load_recipe(REPO / "recipes" / name))  # as ``fit`` partitions
    y = data.train_y.numpy()
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(len(y)))  # every image on one device
    held = [set(np.flatnonzero(row).tolist()) for row in class_counts(y, parts, 10)]
    shared = np.array([[len(a & b) for b in held] for a in held])
    ring = np.roll(np.eye(10, dtype=int), 1, 1) + np.roll(np.eye(10, dtype=int), -1, 1)
    assert np.array_equal(shared - np.diag(shared.diagonal()), ring)  # one class with i - 1 and i + 1, else none
    assert held == SEED0_PAIRS
    assert all(abs(len(p) - size) <= 0.06 * size for p in parts)


# ---------------------------------------------------------------- push
def test_push_picks_the_points_nearest_the_centroids() -> None:
    rng = np.random.default_rng(0)
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    # symmetric clouds around each centre plus the centre itself: the centroid is the centre
    offsets = rng.normal(size=(20, 2))
    points = np.concatenate([np.concatenate([c + offsets, c - offsets, c[None]]) for c in centres])
    picked = reserve_points(points, 3, seed=0)
    assert sorted(picked.tolist()) == [40, 81, 122]


def test_push_returns_distinct_points_and_everything_from_a_small_device() -> None:
    points = np.random.default_rng(1).random((200, 5))
    picked = reserve_points(points, 30, seed=1)
    assert len(set(picked.tolist())) == 30
    assert reserve_points(points[:10], 30, seed=1).tolist() == list(range(10))


# ---------------------------------------------------------------- pull, eq. 8-12
def test_macro_probabilities_eq_8_9_by_hand() -> None:
    reserve = np.array([0, 0, 0, 1])
    approx = np.array([0, 1, 1, 1, 2])
    # X = n_approx / (n_approx + n_reserve) = [1/4, 3/4, 1/1, 0] -> normalised by 2
    p = macro_probabilities(reserve, approx, 4)
    np.testing.assert_allclose(p, [0.125, 0.375, 0.5, 0.0])
    assert p.sum() == pytest.approx(1.0)
    assert p.argmax() == 2  # the cluster the receiver lacks entirely is favoured


def test_micro_probabilities_eq_11_by_hand() -> None:
    loss = np.array([0.0, math.log(3.0), 5.0, 0.2])
    clusters = np.array([0, 0, 1, 2])
    p = micro_probabilities(loss, clusters, temperature=1.0)
    np.testing.assert_allclose(p, [0.25, 0.75, 1.0, 1.0])  # softmax within each cluster
    hotter = micro_probabilities(loss, clusters, temperature=4.0)
    assert hotter[1] > p[1]  # a higher temperature sharpens the preference for high loss


def test_pull_probabilities_eq_12_sum_to_one_and_sampling_follows_them() -> None:
    macro = np.array([0.2, 0.8])
    micro = np.array([0.5, 0.5, 0.1, 0.9])
    clusters = np.array([0, 0, 1, 1])
    p = pull_probabilities(macro, micro, clusters)
    np.testing.assert_allclose(p, [0.1, 0.1, 0.08, 0.72])
    assert p.sum() == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    firsts = np.bincount([sample_pull(p, 1, rng)[0] for _ in range(4000)], minlength=4) / 4000
    np.testing.assert_allclose(firsts, p, atol=0.03)
    # zero-probability points are never sent
    assert sorted(sample_pull(np.array([0.5, 0.5, 0.0]), 5, rng).tolist()) == [0, 1]


def test_expected_triplet_loss_eq_10_and_temperature_schedule() -> None:
    anchors = torch.tensor([[0.0, 0.0], [0.0, 0.0]])
    views = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    candidates = torch.tensor([[0.0, 0.5], [3.0, 0.0]])
    # anchor 1: max(0, 1 - 0.25 + 1) = 1.75, max(0, 1 - 9 + 1) = 0; anchor 2: max(0, 0 - 0.25 + 1) = 0.75, 0
    loss = expected_triplet_loss(anchors, views, candidates, margin=1.0)
    torch.testing.assert_close(loss, torch.tensor([1.25, 0.0]))
    torch.testing.assert_close(triplet_loss(anchors[:1], views[:1], candidates[:1], 1.0), torch.tensor([1.75]))
    assert selection_temperature(0, 2500) == 4 and selection_temperature(2500, 2500) == 10
    assert selection_temperature(1250, 2500) == 7


def _two_kind_devices(seed: int = 0) -> tuple[torch.Tensor, list[np.ndarray], np.ndarray]:
    """Device 0 holds only kind A images, device 1 half A half B; ``kind`` is known to the test only."""
    rng = np.random.default_rng(seed)
    kind = np.array([0] * 100 + [0] * 50 + [1] * 50)
    base = np.where(kind[:, None] == 0, [40, 40, 200, 200], [200, 200, 40, 40])
    images = torch.as_tensor(np.clip(base + rng.normal(0, 8, base.shape), 0, 255), dtype=torch.uint8).view(-1, 1, 2, 2)
    return images, [np.arange(100), np.arange(100, 200)], kind


def _feature_embed(images: torch.Tensor):
    feats = images.reshape(len(images), -1).float() / 255
    return lambda ids: feats[torch.as_tensor(ids)], lambda ids, seed: feats[torch.as_tensor(ids)]


def test_smart_pull_sends_what_the_receiver_lacks_more_than_uniform() -> None:
    images, parts, kind = _two_kind_devices()
    embed, embed_views = _feature_embed(images)
    shares = {}
    for policy in ("smart", "uniform"):
        ex = Exchange(parts, complete(2), policy, reserve=100, approx=40, clusters=4, pull_size=10, seed=0)
        ex.push(images)
        got = []
        for round_ in range(10):
            ex.plan([0], round_, embed, embed_views, margin=0.5)
            got.append(ex.pull(0, round_ * 10, 100)[0])
        shares[policy] = kind[np.concatenate(got)].mean()
        assert np.isin(np.concatenate(got), parts[1]).all()  # only the transmitter's own points are sent
    # macro: a B-only cluster has X = 1, A clusters X ~ 1/6 (the receiver's 100 reserve points sit there)
    assert shares["smart"] > 0.6 > shares["uniform"], shares


def test_a_receivers_pulled_set_is_replaced_at_each_pull() -> None:
    parts = [np.arange(0, 30), np.arange(30, 60), np.arange(60, 90)]
    ex = Exchange(parts, complete(3), "uniform", reserve=5, approx=10, clusters=2, pull_size=4, seed=0)
    first = np.concatenate(ex.pull(0, 0, 100))
    assert sorted(ex.pulled[0].tolist()) == sorted(first.tolist()) and len(first) == 8
    second = np.concatenate(ex.pull(0, 10, 100))
    assert sorted(ex.pulled[0].tolist()) == sorted(second.tolist())
    assert set(first.tolist()) != set(second.tolist())
    assert len(ex.local_set(0)) == 30 + 8  # own data + the last pull only
    none = Exchange(parts, complete(3), "none", reserve=5, approx=10, clusters=2, pull_size=4, seed=0)
    assert none.pull(0, 0, 100) == [] and len(none.local_set(0)) == 30


# ---------------------------------------------------------------- model, schedule, delay
def test_cfcl_cnn_shape_and_triplet_step() -> None:
    net = CFCLCNN(1, 28)
    assert net(torch.zeros(3, 1, 28, 28)).shape == (3, 64)
    assert sum(p.numel() for p in net.parameters()) == 34402
    module = Triplet(net, margin=0.5)
    x = torch.randn(4, 1, 28, 28)
    loss = module.training_step(([x, x], torch.zeros(4)), 0)
    loss.backward()
    assert torch.isfinite(loss) and net[0].weight.grad.abs().sum() > 0


def test_aggregation_weight_is_the_mean_local_set_size() -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    module = Triplet(CFCLCNN(1, 16), OptimizerSpec("adam", 1e-3))
    images = torch.randint(0, 255, (40, 1, 16, 16), dtype=torch.uint8)
    from fedlight.data.views import ViewMaker, ViewParams

    views = ViewMaker(ViewParams(blur_p=(0.0,), solarize_p=(0.0,)), torch.tensor([0.5]), torch.tensor([0.25]))
    seen = []
    result, weight = train_client_iterations(
        fabric, module, images, torch.full((40,), -1), lambda s: seen.append(s) or torch.arange(10 + s), 6, 4, views,
        torch.Generator().manual_seed(0))
    assert seen == list(range(6)) and result.steps == 6
    assert weight == pytest.approx(10 + 2.5)  # sizes 10..15


def test_delay_model_matches_the_papers_numbers() -> None:
    up = [[0, c, "up", "float32", 45433 * 4] for c in range(3)]  # parallel uploads: one upload's time
    assert period_delay(up) == pytest.approx(1.453856)
    d2d = [[0, 0, "d2d", "uint8", 28 * 28 * 10], [0, 1, "d2d", "uint8", 28 * 28 * 20]]
    assert period_delay(d2d, {0: 0.5, 1: 0.1}) == pytest.approx(20 * 0.006272 + 0.5)


# ---------------------------------------------------------------- engine
def test_exchange_refuses_a_label_reading_objective(tmp_path: Path) -> None:
    _, recipe = _recipe(tmp_path)
    module = Supervised(CFCLCNN(3, 16), num_classes=10)
    assert module.uses_labels
    with pytest.raises(UserError, match="without labels.*method.name"):
        ExchangeSchedule(Fabric(accelerator="cpu", devices=1), module, torch.zeros(10, 3, 16, 16, dtype=torch.uint8),
                         np.zeros(10, dtype=int), [torch.arange(5), torch.arange(5, 10)], None, [0, 1],
                         ExchangeOptions(), 10, recipe.rounds, recipe.local.batch_size)


@pytest.mark.parametrize("overrides, fix", [
    (["local.iterations=null"], "local.iterations"),
    (["server.aggregate_every=10"], "local.iterations=10"),  # where CF-CL's Ta moved
    (["method={name: simclr}"], "method.name=triplet"),
    (["exchange.avg_degree=0.5"], "exchange.avg_degree"),
    (["exchange.policy=uniform", "method={name: supervised}"], "without labels.*method.objective"),  # before any data
])
def test_exchange_user_errors(tmp_path: Path, overrides: list[str], fix: str) -> None:
    _, recipe = _recipe(tmp_path, *overrides)
    with pytest.raises(UserError, match=fix):
        fit(recipe)
    assert not (tmp_path / "run").exists()


def test_labels_are_never_read_by_training_or_exchange(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shuffled training labels (after partitioning) leave every pull and every weight unchanged."""
    real = fit_module.prepare_data
    runs = {}
    for shuffle in (False, True):
        def prepare(recipe, shuffle=shuffle):
            data, parts = real(recipe)
            if shuffle:
                y = data.train_y[torch.randperm(len(data.train_y), generator=torch.Generator().manual_seed(5))]
                data = dataclasses.replace(data, train_y=y)
            return data, parts
        monkeypatch.setattr(fit_module, "prepare_data", prepare)
        _, recipe = _recipe(tmp_path / str(shuffle), "rounds=1", "eval.every=5")
        fit(recipe)
        runs[shuffle] = torch.load(tmp_path / str(shuffle) / "run/checkpoints/last.pt", weights_only=True)
    plain, shuffled = runs[False], runs[True]
    for k in plain["global"]:
        torch.testing.assert_close(plain["global"][k], shuffled["global"][k], rtol=0, atol=0)
    for c in plain["clients"]:
        assert plain["clients"][c][EXCHANGE + "pulled"].tolist() == shuffled["clients"][c][EXCHANGE + "pulled"].tolist()
    assert any(len(s[EXCHANGE + "pulled"]) for s in plain["clients"].values())


def test_short_real_run_through_the_cli(tmp_path: Path) -> None:
    path, _ = _recipe(tmp_path)
    assert main(["fit", "--recipe", str(path)]) == 0
    run = tmp_path / "run"
    results = json.loads((run / "results.json").read_text())
    history = results["history"]
    assert [row["iterations"] for row in history] == [10, 20]
    assert all(row["label_var"] > 0 and row["knn_acc"] is not None for row in history)
    assert 0 < history[0]["delay_seconds"] < history[1]["delay_seconds"]
    graph = json.loads((run / "graph.json").read_text())
    links = sum(len(n) for n in graph["neighbours"])
    # push: 20 reserve points over every link; pulls at t = 0, 5, 10, 15: 10 points over every link; 3x16x16 bytes each
    assert results["comm"]["bytes_d2d"] == (20 + 4 * 10) * links * 3 * 16 * 16
    params = sum(p.numel() for p in CFCLCNN(3, 16).parameters())
    assert results["comm"]["bytes_up"] == 2 * 5 * params * 4  # 32 bits per parameter, every device, every period
    events = next((run / "tensorboard").glob("events.*")).read_bytes()
    assert b"exchange/graph" in events and b"exchange/label_var" in events


def test_resume_continues_the_exchange_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run stopped after its first period and resumed ends where a straight run ends.

    Pulls every 3 iterations with Ta = 5 (pulls at t = 0, 3, 6, 9): the second period does not open
    with a pull, so the pulled set stored at t = 3 matters (and lambda_t needs the same T, hence a
    crash rather than a shorter run). The probe only scores the end: one epoch of it.
    """
    from fedlight.engine.loop.run_checkpoint import RunCheckpoint

    extra = ["exchange.pull_every=3", "local.iterations=5", "eval.every=5", "eval.probe_epochs=1"]
    _, straight = _recipe(tmp_path / "straight", *extra)
    fit(straight)
    path, crashing = _recipe(tmp_path / "resumed", *extra)
    save = RunCheckpoint.save

    def crash_after_first(self, *args, **kwargs):
        save(self, *args, **kwargs)
        raise KeyboardInterrupt  # after the period's checkpoint, as a kill would

    monkeypatch.setattr(RunCheckpoint, "save", crash_after_first)
    with pytest.raises(KeyboardInterrupt):
        fit(crashing)
    monkeypatch.setattr(RunCheckpoint, "save", save)
    fit(load_recipe(path, extra), resume=True)
    a = torch.load(tmp_path / "straight/run/checkpoints/last.pt", weights_only=True)
    b = torch.load(tmp_path / "resumed/run/checkpoints/last.pt", weights_only=True)
    assert b["rounds_completed"] == 2
    for k in a["global"]:
        torch.testing.assert_close(a["global"][k], b["global"][k])
    assert a["ledger"] == b["ledger"]


def test_two_processes_exchange_as_one(tmp_path: Path) -> None:
    """Devices sharded over 2 ranks push, plan and pull exactly as in one process."""
    extra = ["rounds=1", "eval.probe_epochs=1"]
    path, one = _recipe(tmp_path, *extra)
    fit(one)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = ["fit", "--recipe", str(path), *extra, "fabric.devices=2", f"run.dir={tmp_path / 'two'}"]
    proc = cli_process.run(cmd, env=env)  # rank 0 forked; it starts rank 1 as `python -m fedlight`
    assert proc.returncode == 0, proc.stderr[-2000:]
    a = torch.load(tmp_path / "run/checkpoints/last.pt", weights_only=True)
    b = torch.load(tmp_path / "two/checkpoints/last.pt", weights_only=True)
    for k in a["global"]:
        torch.testing.assert_close(a["global"][k], b["global"][k], atol=1e-5, rtol=1e-4)
    assert sorted(a["ledger"]) == sorted(b["ledger"])
    for c in a["clients"]:
        assert a["clients"][c][EXCHANGE + "pulled"].tolist() == b["clients"][c][EXCHANGE + "pulled"].tolist()


def test_importance_model_local_plans_later_pulls_with_the_receivers_trained_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fig. 3(e): ``exchange.importance_model=local`` plans a pull inside a period with the receiver's
    model as trained so far, and the ledger charges that model once per neighbour and such pull.

    Ta = 10, Tp = 5: pulls at steps 0 (still the global model: the period's global plan) and 5
    (re-planned with the local model), so each device sends its model to every neighbour once a period.
    """
    plans: dict[str, list[tuple[int, int, bool, torch.Tensor]]] = {"global": [], "local": []}
    plan = ExchangeSchedule._plan
    results = {}
    for mode in ("global", "local"):
        def spy(self, receiver, round_, module, fresh=False, mode=mode):
            weights = torch.cat([p.detach().flatten().clone() for p in module.parameters()])
            plans[mode].append((round_, receiver, fresh, weights))
            plan(self, receiver, round_, module, fresh)

        monkeypatch.setattr(ExchangeSchedule, "_plan", spy)
        _, recipe = _recipe(tmp_path / mode, f"exchange.importance_model={mode}")
        results[mode] = fit(recipe)
    assert not any(fresh for _, _, fresh, _ in plans["global"])
    fresh_plans = [p for p in plans["local"] if p[2]]
    assert sorted((r, c) for r, c, _, _ in fresh_plans) == [(r, c) for r in range(2) for c in range(5)]
    period_start = {(r, c): w for r, c, fresh, w in plans["local"] if not fresh}
    for r, c, _, weights in fresh_plans:  # scored by a model that has left the period's global model
        assert not torch.equal(weights, period_start[(r, c)])
    graph = json.loads((tmp_path / "local/run/graph.json").read_text())
    links = sum(len(n) for n in graph["neighbours"])
    model_bytes = sum(p.numel() for p in CFCLCNN(3, 16).parameters()) * 4  # the model a device uploads
    g, l = results["global"]["comm"], results["local"]["comm"]
    assert l["bytes_up"] == g["bytes_up"]
    assert l["bytes_d2d"] - g["bytes_d2d"] == model_bytes * links * 2  # 2 periods, one re-planned pull each
    rows = [line.split(",") for line in (tmp_path / "local/run/comm.csv").read_text().splitlines()[1:]]
    assert sum(int(r[4]) for r in rows if r[2] == "d2d" and r[3] == "float32") == model_bytes * links * 2


def test_importance_model_local_needs_the_smart_pull(tmp_path: Path) -> None:
    _, recipe = _recipe(tmp_path, "exchange.importance_model=local", "exchange.policy=uniform")
    with pytest.raises(UserError, match="exchange.importance_model=local.*exchange.policy=smart"):
        fit(recipe)
