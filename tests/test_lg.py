"""LG-FedAvg: what reaches the server, what stays on the clients, local / new test, parameter counts."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedlight import registry
from fedlight.config import load_recipe
from fedlight.data.idx import read_idx
from fedlight.data.partition import matching_test_split, shards
from fedlight.data.sources import load_dataset
from fedlight.engine.loop.comm_ledger import CommLedger
from fedlight.engine.loop.federation import TIMING
from fedlight.engine.loop.sampling import sample_clients
from fedlight.engine.run.fit import check_recipe, fit
from fedlight.errors import UserError
from fedlight.eval.ensemble import ensemble_accuracies, ensemble_log_probs, majority_vote
from fedlight.methods.federated_module import OptimizerSpec
from fedlight.server.fedavg import FedAvg

REPO = Path(__file__).resolve().parents[1]
CLASSIFIER = {"objective.classifier.weight", "objective.classifier.bias"}

LG = """
defaults:
  - {repo}/configs/data/synthetic.yaml
  - {repo}/configs/views/weak.yaml
seed: 1
rounds: 3
model: {{backbone: lenet5}}
partition: {{kind: shards, shards_per_client: 2}}
clients: {{num: 4, fraction: 0.5}}
local: {{epochs: 1, batch_size: 32, lr: 0.05, optimizer: sgd, momentum: 0.5, weight_decay: 0.0}}
method: {{name: lg, objective: supervised, global_layers: [classifier], warmup_rounds: 1}}
server: {{name: fedavg}}
eval: {{every: 1, probe_epochs: 5, knn_k: 10, projector_samples: 0, local_test: true}}
fabric: {{accelerator: cpu, devices: 1}}
"""


@pytest.fixture
def lg_recipe(tmp_path: Path) -> Path:
    path = tmp_path / "lg.yaml"
    path.write_text(LG.format(repo=REPO))
    return path


@pytest.fixture
def payloads(monkeypatch: pytest.MonkeyPatch) -> list[set[str]]:
    """The keys of every payload the aggregator receives, in order."""
    seen: list[set[str]] = []
    original = FedAvg.accumulate

    def spy(self, acc, payload, weight):
        seen.append(set(payload))
        return original(self, acc, payload, weight)

    monkeypatch.setattr(FedAvg, "accumulate", spy)
    return seen


def _ckpt(run: Path) -> dict:
    return torch.load(run / "checkpoints/last.pt", weights_only=True)


def _numel(state: dict[str, torch.Tensor]) -> int:
    return sum(v.numel() for v in state.values())


def test_only_global_layers_reach_the_server_and_params_are_counted(tmp_path: Path, lg_recipe: Path,
                                                                     payloads: list[set[str]]) -> None:
    res = fit(load_recipe(lg_recipe, [f"run.dir={tmp_path / 'run'}"]))
    module = registry.build_method({"name": "lg", "objective": "supervised"}, "lenet5", 3, 16, 10, OptimizerSpec())
    full = set(module.shared_state())  # the FedAvg phase: the whole model
    assert full == {k for k in module.state_dict()} and len(payloads) == 3 * 2
    assert all(p == full for p in payloads[:2])  # warm-up round
    assert all(p == CLASSIFIER for p in payloads[2:])  # LG rounds: the classifier only, nothing local
    assert set(_ckpt(tmp_path / "run")["global"]) == CLASSIFIER
    # parameters communicated: 2 clients x (1 FedAvg round x whole model + 2 LG rounds x classifier) each way
    lenet = 6 * 3 * 25 + 6 + 16 * 6 * 25 + 16 + 16 * 1 * 1 * 120 + 120 + 120 * 100 + 100  # 16 x 16 input: fc1(16, 120)
    classifier = 100 * 10 + 10
    assert _numel(module.shared_state()) == lenet + classifier
    expected = 2 * (lenet + classifier) + 2 * 2 * classifier
    assert res["comm"]["params_up"] == res["comm"]["params_down"] == expected
    assert res["comm"]["bytes_up"] == 4 * expected
    assert [h["params_up"] for h in res["history"]] == [2 * (lenet + classifier), 2 * classifier, 2 * classifier]
    # the new test's ensemble: every client's local model (the LeNet) sent once, in its own column, charged at
    # the first evaluation with local models (round 1 is FedAvg's: every client's model is the global one)
    assert [h["params_new_test"] for h in res["history"]] == [0, 4 * lenet, 0]
    assert res["comm"]["params_new_test"] == 4 * lenet and res["comm"]["bytes_new_test"] == 4 * 4 * lenet
    comm = (tmp_path / "run/comm.csv").read_text().splitlines()
    uploads = [line.split(",") for line in comm if ",new_test," in line]
    assert sorted((r, c, d) for r, c, d, *_ in uploads) == [("1", str(c), "new_test") for c in range(4)]
    assert sum(int(b) for *_, b in uploads) == 4 * 4 * lenet
    final = res["final"]
    for key in ("local_test_acc", "local_test_acc_std", "new_test_acc", "new_test_acc_vote", "avg_model_acc"):
        assert 0 <= final[key] <= 1, key
    assert final["test_acc"] == final["avg_model_acc"]  # the run's own metrics score the averaged model
    # the floors: every client holds the random-init model, so the new test's ensemble is that one model
    base = res["baseline"]
    assert {"local_test_acc", "new_test_acc"} <= set(base)
    assert base["new_test_acc"] == base["test_acc"] == base["avg_model_acc"]


def test_local_layers_survive_rounds_and_resume(tmp_path: Path, lg_recipe: Path) -> None:
    straight = fit(load_recipe(lg_recipe, [f"run.dir={tmp_path / 'a'}"]))
    fit(load_recipe(lg_recipe, ["rounds=2", f"run.dir={tmp_path / 'b'}"]))
    before = _ckpt(tmp_path / "b")["clients"]
    shutil.copy(tmp_path / "b/checkpoints/last.pt", tmp_path / "round2.pt")
    resumed = fit(load_recipe(lg_recipe, ["rounds=3", f"run.dir={tmp_path / 'b'}"]), resume=True)
    after, reference = _ckpt(tmp_path / "b")["clients"], _ckpt(tmp_path / "a")["clients"]
    assert sorted(before) == sorted(after) == [0, 1, 2, 3]  # every client got its local layers at the switch
    # the new test's upload is charged once, not again at the evaluations of a resumed, grown run
    charged = lambda run: sorted((r, c) for r, c, d, *_ in _ckpt(run)["ledger"] if d == "new_test")  # noqa: E731
    assert charged(tmp_path / "b") == charged(tmp_path / "a") == [(1, c) for c in range(4)]
    local_keys = {k for k in after[0]}
    assert local_keys and not local_keys & CLASSIFIER and "objective.backbone.conv1.weight" in local_keys
    sampled = set(sample_clients(1, 2, 4, 0.5))  # round index 2 = the third round
    for c in range(4):
        same = all(torch.equal(before[c][k], after[c][k]) for k in local_keys)
        assert same == (c not in sampled), c  # untouched unless trained in round 3
        for k in local_keys:  # resuming gives what a straight run gives
            assert torch.allclose(after[c][k], reference[c][k], atol=1e-6), (c, k)
    assert not torch.equal(after[0]["objective.backbone.fc1.weight"], after[1]["objective.backbone.fc1.weight"])
    # the linear probe's head is initialised from the global RNG, which a resumed process has not advanced
    # by the earlier rounds' probes; with 5 L-BFGS steps it has not converged, so it is left out here
    strip = lambda h: [{k: v for k, v in row.items() if k not in (*TIMING, "linear_probe_acc")}  # noqa: E731
                       for row in h]
    assert strip(straight["history"]) == strip(resumed["history"])


def test_ssl_local_layers_under_a_supervised_global_head(tmp_path: Path, lg_recipe: Path,
                                                         payloads: list[set[str]]) -> None:
    """SimCLR trains the local encoder; only the linear head (cross-entropy, detached features) is global."""
    res = fit(load_recipe(lg_recipe, [
        "model.backbone=tiny_cnn", "views.flip_p=0.5", "views.jitter_p=0.8", "views.blur_p=[0.0,0.0]",
        "views.solarize_p=[0.0,0.0]", "clients.fraction=1.0", "local.lr=0.1",
        "method={name: lg, objective: simclr, hidden_dim: 64, output_dim: 32, global_layers: [head], "
        "warmup_rounds: 0}", f"run.dir={tmp_path / 'ssl'}"]))
    assert payloads and all(p == {"head.weight", "head.bias"} for p in payloads)
    clients = _ckpt(tmp_path / "ssl")["clients"]
    assert all(k.startswith(("objective.backbone.", "objective.projection_head.")) for k in clients[0])
    # the new test needs the local encoder, not the SimCLR projection head that predictions never read
    encoder = sum(v.numel() for k, v in clients[0].items() if k.startswith("objective.backbone."))
    assert res["comm"]["params_new_test"] == 4 * encoder
    final = res["final"]
    # each client's own encoder + the shared head, on its own classes (2 of 10): learnt over the rounds
    # (0.46 after round 1, 0.80 after round 3 when written)
    assert final["local_test_acc"] > 0.6 and final["local_test_acc"] > res["history"][0]["local_test_acc"], final
    assert 0 <= final["new_test_acc"] <= 1


def test_ssl_head_gradient_does_not_reach_the_local_encoder() -> None:
    torch.manual_seed(0)
    module = registry.build_method({"name": "lg", "objective": "simclr", "hidden_dim": 16, "output_dim": 8,
                                    "global_layers": ["head"]}, "tiny_cnn", 3, 16, 10, OptimizerSpec())
    module.train()
    x0, x1, y = torch.randn(8, 3, 16, 16), torch.randn(8, 3, 16, 16), torch.arange(8) % 10
    module.training_step(([x0, x1], y), 0).backward()
    with_head = {n: p.grad.clone() for n, p in module.objective.backbone.named_parameters()}
    assert module.head.weight.grad.abs().sum() > 0
    module.zero_grad()
    module.objective.training_step(([x0, x1], y), 0).backward()
    for n, p in module.objective.backbone.named_parameters():
        assert torch.allclose(with_head[n], p.grad, atol=1e-6), n


def test_unknown_global_layer_is_a_user_error() -> None:
    with pytest.raises(UserError, match="global_layers entry 'backbone.fc9'"):
        registry.build_method({"name": "lg", "objective": "supervised", "global_layers": ["backbone.fc9"]},
                              "lenet5", 1, 28, 10, OptimizerSpec())


def test_ensemble_on_fixed_logits() -> None:
    # 3 models x 2 samples x 3 classes
    logits = torch.tensor([[[4.0, 0, 0], [1, 0, 0]],
                           [[0, 1, 0], [0, 1, 0]],
                           [[0, 1, 0], [0, 0, 3]]])
    # sample 0: log-softmax of [4,0,0] = [4,0,0] - log(e^4 + 2); of [0,1,0] = [0,1,0] - log(2 + e)
    l4, l1 = math.log(math.exp(4) + 2), math.log(2 + math.e)
    expected0 = torch.tensor([(4 - l4) + 2 * (0 - l1), (0 - l4) + 2 * (1 - l1), (0 - l4) + 2 * (0 - l1)]) / 3
    assert torch.allclose(ensemble_log_probs(logits)[0], expected0, atol=1e-5)
    # sample 1: the confident third model carries the log-prob mean; the vote is a three-way tie -> class 0
    assert ensemble_log_probs(logits).argmax(-1).tolist() == [0, 2]
    assert majority_vote(logits).tolist() == [1, 0]  # sample 0: two of three models say 1
    acc = ensemble_accuracies(logits, torch.tensor([0, 2]))
    assert acc == {"new_test_acc": 1.0, "new_test_acc_vote": 0.0}


def test_parameter_counts_of_the_paper_models_and_the_ledger() -> None:
    build = lambda backbone, channels, size: registry.build_method(  # noqa: E731
        {"name": "supervised"}, backbone, channels, size, 10, OptimizerSpec())
    # LeNet-5 on CIFAR: conv 3->6 (5x5), conv 6->16, fc 400->120, 120->100, 100->10
    assert _numel(build("lenet5", 3, 32).state_dict()) == 456 + 2416 + 48120 + 12100 + 1010
    # the MNIST MLP (Table 5): 784->512->256->256->128->10
    assert _numel(build("mlp", 1, 28).state_dict()) == 401920 + 131328 + 65792 + 32896 + 1290
    ledger = CommLedger()
    ledger.record(0, 0, "up", {"w": torch.zeros(10), "n": torch.zeros(3, dtype=torch.long)})
    ledger.record(1, 0, "down", {"w": torch.zeros(4, dtype=torch.float16)})
    assert ledger.totals() == {"bytes_up": 64, "bytes_down": 8, "bytes_d2d": 0, "bytes_new_test": 0,
                               "params_up": 13, "params_down": 4, "params_d2d": 0, "params_new_test": 0}
    assert ledger.totals(1)["params_up"] == 0


def test_matching_test_split_uses_the_clients_classes() -> None:
    labels, test_labels = np.repeat(np.arange(10), 60), np.repeat(np.arange(10), 20)
    parts = shards(labels, 10, np.random.default_rng(0), 2)
    tests = matching_test_split(labels, parts, test_labels, np.random.default_rng(1))
    together = np.concatenate(tests)
    assert len(together) == len(np.unique(together)) == 200  # every test sample once
    for part, test in zip(parts, tests):
        train_counts = np.bincount(labels[part], minlength=10)
        test_counts = np.bincount(test_labels[test], minlength=10)
        assert set(np.flatnonzero(test_counts)) <= set(np.flatnonzero(train_counts))
        assert np.abs(test_counts - train_counts / 3).max() <= 1  # 20 test per 60 train, up to rounding


def _write_idx(path: Path, array: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def test_mnist_reads_idx_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    images, labels = rng.integers(0, 256, (5, 28, 28)), np.array([3, 1, 4, 1, 5])
    for prefix, n in (("train", 5), ("t10k", 3)):
        _write_idx(raw / f"{prefix}-images-idx3-ubyte", images[:n])
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels[:n])
    data = load_dataset("mnist", str(tmp_path), download=False)
    assert data.train_x.shape == (5, 1, 28, 28) and data.test_x.shape == (3, 1, 28, 28)
    assert data.train_y.tolist() == [3, 1, 4, 1, 5] and torch.equal(data.train_x[:, 0], read_idx(
        raw / "train-images-idx3-ubyte"))
    with pytest.raises(UserError, match="no MNIST file"):
        load_dataset("mnist", str(tmp_path / "empty"), download=False)


def test_fedavg_phase_ends_at_the_round_count_or_the_goal_accuracy() -> None:
    module = registry.build_method({"name": "lg", "objective": "supervised", "global_layers": ["backbone.conv1"],
                                    "warmup_rounds": 5, "warmup_goal_acc": 0.8}, "lenet5", 1, 28, 10, OptimizerSpec())
    assert set(module.shared_state()) == set(module.state_dict())  # FedAvg phase: everything is shared
    history = [{"test_acc": None}, {"test_acc": 0.7}]
    assert not module.update_split(2, history) and not module.local_phase
    assert module.update_split(3, [*history, {"test_acc": 0.81}])  # goal reached before round 5
    assert set(module.shared_state()) == {"objective.backbone.conv1.weight", "objective.backbone.conv1.bias"}
    assert set(module.private_state()) == set(module.state_dict()) - set(module.shared_state())
    assert not module.update_split(4, [])  # switches once
    late = registry.build_method({"name": "lg", "objective": "supervised", "warmup_rounds": 5}, "lenet5", 1, 28,
                                 10, OptimizerSpec())
    assert not late.update_split(4, [{"test_acc": 0.99}]) and late.update_split(5, [])  # no goal: round count


def test_exponential_lr_decay_restarts_with_the_lg_phase_and_survives_resume(tmp_path: Path, lg_recipe: Path) -> None:
    """Table 6's "learning rate decay": lr x (1 - d)^t, t counted from the start of the current phase
    (the paper's LG run starts from a FedAvg checkpoint at the initial rate)."""
    decay = ["local.lr_schedule=exponential", "local.lr_decay=0.1", "method.warmup_rounds=2"]
    fit(load_recipe(lg_recipe, [*decay, "rounds=3", f"run.dir={tmp_path / 'a'}"]))
    res = fit(load_recipe(lg_recipe, [*decay, "rounds=4", f"run.dir={tmp_path / 'a'}"]), resume=True)
    expected = [0.05, 0.05 * 0.9, 0.05, 0.05 * 0.9]  # FedAvg rounds 1-2, LG rounds 3-4
    assert [row["lr"] for row in res["history"]] == pytest.approx(expected)


def test_lr_decay_without_the_exponential_schedule_is_a_user_error(lg_recipe: Path) -> None:
    with pytest.raises(UserError, match="local.lr_decay=0.1 applies to local.lr_schedule=exponential"):
        check_recipe(load_recipe(lg_recipe, ["local.lr_decay=0.1"]))
    with pytest.raises(UserError, match="local.lr_decay"):
        load_recipe(lg_recipe, ["local.lr_schedule=exponential", "local.lr_decay=1.0"])


def test_local_only_is_local_from_round_zero(tmp_path: Path, lg_recipe: Path, payloads: list[set[str]]) -> None:
    res = fit(load_recipe(lg_recipe, ["method.global_layers=[]", "method.warmup_rounds=0", "eval.every=3",
                                      f"run.dir={tmp_path / 'local'}"]))
    assert payloads and all(p == set() for p in payloads)  # not one FedAvg round: nothing is shared
    assert res["comm"]["params_up"] == res["comm"]["params_down"] == 0
    module = registry.build_method({"name": "lg", "objective": "supervised"}, "lenet5", 3, 16, 10, OptimizerSpec())
    assert res["comm"]["params_new_test"] == 4 * _numel(module.state_dict())  # the whole model is local
    clients = _ckpt(tmp_path / "local")["clients"]
    trained = set().union(*(sample_clients(1, r, 4, 0.5) for r in range(3)))
    key = "objective.classifier.weight"
    for a in trained:  # every trained client went its own way from the common initial model
        assert all(not torch.equal(clients[a][key], clients[b][key]) for b in range(4) if b != a)


def test_lg_recipes_follow_the_paper() -> None:
    recipe = lambda name: load_recipe(REPO / "recipes" / name)  # noqa: E731
    # MNIST (sec. 7.1.1, Table 5): the last two layers are the global model, input 256 -> [128] -> 10
    mnist = recipe("lg_mnist.yaml")
    module = registry.build_method(mnist.method, mnist.model.backbone, 1, 28, 10, OptimizerSpec())
    module.update_split(mnist.method["warmup_rounds"], [])
    shared = module.shared_state()
    assert {k: tuple(v.shape) for k, v in shared.items() if k.endswith("weight")} == {
        "objective.backbone.fc4.weight": (128, 256), "objective.classifier.weight": (10, 128)}
    # CIFAR-10 (sec. 3.1, 7.1.2): the two convolutions; Table 6's decay 0.005 a round
    cifar = recipe("lg_cifar10.yaml")
    assert cifar.method["global_layers"] == ["backbone.conv1", "backbone.conv2"]
    assert (cifar.local.lr, cifar.local.lr_schedule, cifar.local.lr_decay) == (0.1, "exponential", 0.005)
    # local only: local from round 0, with the LG run's rounds, sampling and local epochs
    lg, local = recipe("lg_fmnist.yaml"), recipe("lg_local_fmnist.yaml")
    assert local.method["global_layers"] == [] and local.method["warmup_rounds"] == 0
    assert (local.rounds, local.clients, local.local) == (lg.rounds, lg.clients, lg.local)


def test_a_client_that_has_not_trained_starts_its_objectives_private_parts_afresh(
        tmp_path: Path, lg_recipe: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At the end of the FedAvg phase a client gets the layers it now keeps from the global model, and
    nothing else of the worker model, which holds the last-trained client's BYOL target (its data's): its
    target starts afresh (``reset_private_state``) when it first trains."""
    from fedlight.engine.loop.client_runner import ClientRunner
    from fedlight.methods.local_global import LocalGlobal

    starting, reset = [], []
    start, fresh = ClientRunner._start, LocalGlobal.reset_private_state
    monkeypatch.setattr(ClientRunner, "_start", lambda self, m, c, g: starting.append(c) or start(self, m, c, g))
    monkeypatch.setattr(LocalGlobal, "reset_private_state", lambda self: reset.append(starting[-1]) or fresh(self))
    fit(load_recipe(lg_recipe, [
        "model.backbone=tiny_cnn", "clients.fraction=0.25", "rounds=2", "eval.local_test=false",
        "method={name: lg, objective: byol, hidden_dim: 32, output_dim: 16, global_layers: [backbone], "
        "warmup_rounds: 1}", f"run.dir={tmp_path / 'run'}"]))
    ckpt = _ckpt(tmp_path / "run")
    first, second = set(sample_clients(1, 0, 4, 0.25)), set(sample_clients(1, 1, 4, 0.25))
    trained = first | second
    assert len(trained) < 4 and second - first
    assert sorted(reset) == sorted(trained)  # round 2's new client too, though it holds LG's layers
    for client, state in ckpt["clients"].items():
        target = {k for k in state if "_momentum." in k}
        assert bool(target) == (client in trained), (client, sorted(state))  # a target is its own or none
        if client not in trained:  # the layers LG made private, as the global model had them
            assert state and all(k.startswith(("objective.projection_head.", "objective.prediction_head.",
                                               "head.")) for k in state), sorted(state)


def test_a_resume_that_makes_the_last_evaluation_writes_its_new_test_upload_to_comm_csv(
        tmp_path: Path, lg_recipe: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The new test's upload (round 2's evaluation) is made by the resume when that evaluation failed: comm.csv
    must hold it as the checkpoint's ledger (results.json's comm) does."""
    from fedlight.engine.loop.evaluator import Evaluator

    real, calls = Evaluator.model_metrics, []

    def fails_round_2(self: Evaluator, *args: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:  # the baseline, round 1, then round 2's
            raise RuntimeError("value cannot be converted to type float without overflow")
        return real(self, *args)

    monkeypatch.setattr(Evaluator, "model_metrics", fails_round_2)
    recipe = load_recipe(lg_recipe, ["rounds=2", f"run.dir={tmp_path / 'run'}"])
    with pytest.raises(Exception):
        fit(recipe)
    fit(recipe, resume=True)
    rows = [line.split(",") for line in (tmp_path / "run/comm.csv").read_text().splitlines()[1:]]
    ledger = _ckpt(tmp_path / "run")["ledger"]
    assert any(d == "new_test" for _, _, d, *_ in ledger)
    assert rows == [[str(v) for v in row] for row in ledger]


def test_mnist_refuses_fashion_mnists_files_of_the_same_names(tmp_path: Path) -> None:
    """Both datasets' IDX files have one set of names; the official files' first labels tell them apart."""
    images = np.zeros((10, 28, 28))
    for name, labels in (("mnist", [9, 0, 0, 3, 0, 2, 7, 2, 5, 5]), ("fashion_mnist", [5, 0, 4, 1, 9, 2, 1, 3, 1, 4])):
        for prefix in ("train", "t10k"):
            _write_idx(tmp_path / f"{prefix}-images-idx3-ubyte", images)
            _write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte", np.array(labels))
        other = "Fashion-MNIST" if name == "mnist" else "MNIST"
        with pytest.raises(UserError, match=f"data.name={name}, but data.root .* holds {other}'s files"):
            load_dataset(name, str(tmp_path), download=False)
