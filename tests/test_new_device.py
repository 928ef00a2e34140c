"""LG-FedAvg sec. 3.2 / Table 3: a new device with rotated data arrives online (new_device.*)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedlight.config import load_recipe
from fedlight.data.rotated import add_rotated_device, rotated_images
from fedlight.data.sources import synthetic
from fedlight.engine.output.progress import ClientTicks
from fedlight.engine.run.fit import fit
from fedlight.errors import UserError

REPO = Path(__file__).resolve().parents[1]

TINY = """
defaults:
  - {repo}/configs/data/synthetic.yaml
seed: 0
rounds: 5
views: {{crop_min_scale: 1.0, flip_p: 0.0, jitter_p: 0.0, grayscale_p: 0.0}}
model: {{backbone: mlp_small}}
partition: {{kind: iid}}
clients: {{num: 4, fraction: 0.5}}
local: {{epochs: 1, batch_size: 20, lr: 0.05, optimizer: sgd, momentum: 0.5, weight_decay: 0.0}}
method: {{name: supervised}}
server: {{name: fedavg}}
new_device: {{rotation: 90, train: 200, test: 100, goal_acc: 0.3}}
eval: {{every: 1, probe_epochs: 5, knn_k: 10, projector_samples: 0}}
fabric: {{accelerator: cpu, devices: 1}}
"""
LG = "method={name: lg, objective: supervised, global_layers: [backbone.fc2, classifier], " \
     "warmup_rounds: 5, warmup_goal_acc: 0.3, warmup_goal_metric: normal_acc}"


def _recipe(tmp_path: Path, *overrides: str):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "rotated.yaml"
    path.write_text(TINY.format(repo=REPO) + f"run: {{dir: {tmp_path / 'run'}}}\n")
    return load_recipe(path, list(overrides))


@pytest.mark.parametrize("degrees", [90, 180, 270, 33.0])
def test_the_new_device_holds_rotated_copies_of_original_images(degrees: float) -> None:
    data = synthetic(seed=3, train=120, test=60, channels=1, size=12)
    parts = [np.arange(0, 60), np.arange(60, 120)]
    dev = add_rotated_device(data, parts, degrees, train=50, test=20, seed=7)
    new = torch.as_tensor(dev.parts[-1])
    assert dev.parts[:2] == parts and new.tolist() == list(range(120, 170))
    assert torch.equal(dev.data.train_x[:120], data.train_x) and torch.equal(dev.data.test_x, data.test_x)
    assert len(set(dev.train_source.tolist())) == 50 and len(set(dev.test_source.tolist())) == 20
    assert torch.equal(dev.data.train_y[new], data.train_y[dev.train_source])
    assert torch.equal(dev.test_y, data.test_y[dev.test_source])
    turns = {90: 1, 180: 2, 270: 3}
    for got, source in ((dev.data.train_x[new], data.train_x[dev.train_source]),
                        (dev.test_x, data.test_x[dev.test_source])):
        if degrees in turns:  # a quarter turn only moves pixels: exactly numpy's rot90, counter-clockwise
            expected = torch.from_numpy(np.rot90(source.numpy(), turns[degrees], axes=(2, 3)).copy())
        else:
            expected = rotated_images(source, degrees)
        assert torch.equal(got, expected)
    assert not torch.equal(dev.data.train_x[new], data.train_x[dev.train_source])  # it did turn them


def test_a_device_larger_than_the_split_is_refused() -> None:
    data = synthetic(seed=0, train=40, test=20, channels=1, size=8)
    with pytest.raises(UserError, match="new_device.test.*lower it"):
        add_rotated_device(data, [np.arange(40)], 90, train=10, test=21, seed=0)


def _clients(history: list[dict]) -> list[list[int]]:
    return [row["clients"] for row in history]


@pytest.mark.parametrize("method, p", [("fedavg", 0.0), ("lg", 0.5)])
def test_short_run_reports_normal_and_rotated_accuracy_and_trains_the_device_after_the_goal(
        tmp_path: Path, method: str, p: float, monkeypatch: pytest.MonkeyPatch) -> None:
    expected: list[int] = []  # what each round's clients bar counts up to
    monkeypatch.setattr(ClientTicks, "expect", lambda self, n: expected.append(n))
    overrides = [f"new_device.fraction={p}"] + ([LG] if method == "lg" else [])
    results = fit(_recipe(tmp_path, *overrides))
    history = results["history"]
    assert expected == [len(row["clients"]) for row in history]  # the device counted once it arrives
    assert all(0 <= row["normal_acc"] <= 1 and 0 <= row["rotated_acc"] <= 1 for row in history)
    assert set(results["final"]) >= {"normal_acc", "rotated_acc"}
    assert 0 <= results["baseline"]["normal_acc"] < 0.3 and 0 <= results["baseline"]["rotated_acc"] <= 1  # floors
    arrival = next(row["round"] for row in history if row["normal_acc"] >= 0.3) + 1  # 1-based
    assert arrival <= 5, "the tiny run should reach its goal"
    assert all(row["new_device_round"] == (arrival if row["round"] >= arrival - 1 else None) for row in history)
    device = 4
    for row in history:
        if row["round"] < arrival:  # the original devices only, 2 of 4 a round
            assert device not in row["clients"] and len(row["clients"]) == 2
        else:  # the device every round, with p = 0: alone; p = 0.5: 2 of the 4 others
            assert device in row["clients"] and len(row["clients"]) == 1 + round(p * 4)
    if method == "lg":  # LG leaves FedAvg exactly when the device arrives
        ckpt = torch.load(tmp_path / "run/checkpoints/last.pt", weights_only=False)
        assert ckpt["phase_start"] == arrival - 1 and ckpt["new_device_round"] == arrival - 1


def test_before_arrival_the_run_is_the_run_without_the_device(tmp_path: Path) -> None:
    """The FedAvg phase samples, trains and tests the original devices as a run without a new device."""
    never = fit(_recipe(tmp_path / "with", "new_device.goal_acc=1.0", "rounds=2"))
    plain = fit(_recipe(tmp_path / "without", "new_device.rotation=null", "rounds=2"))
    for a, b in zip(never["history"], plain["history"]):
        assert a["clients"] == b["clients"] and a["train_loss"] == b["train_loss"]
        assert a["test_acc"] == b["test_acc"] and a["knn_acc"] == b["knn_acc"]


@pytest.mark.parametrize("override, fix", [
    ("method={name: lg, objective: supervised, warmup_goal_acc: 0.3, warmup_rounds: 5}", "warmup_goal_metric"),
    ("local.iterations=5", "drop local.iterations"),
    ("new_device.test=100000", "new_device.test.*lower it"),
    ("eval.local_test=true", "eval.local_test would split"),  # a data error, still before the run folder
])
def test_new_device_user_errors(tmp_path: Path, override: str, fix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def claimed(*args: object, **kwargs: object) -> None:
        raise AssertionError("the run folder was claimed before the error")
    monkeypatch.setattr("fedlight.engine.run.fit.claim_run_dir", claimed)
    with pytest.raises(UserError, match=fix):
        fit(_recipe(tmp_path, override))
    assert not (tmp_path / "run").exists()
