"""FLESD: ensemble formula, queue bookkeeping, target rows, payload bytes, and a real run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from lightning.fabric import Fabric
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fedlight import registry
from fedlight.cli import main
from fedlight.config import load_recipe
from fedlight.engine.loop.comm_ledger import payload_bytes
from fedlight.data.public_set import balanced_outside_subset
from fedlight.data.sources import load_dataset, subset_indices
from fedlight.engine.parts.flesd.ensemble_distiller import EnsembleDistiller
from fedlight.engine.parts.flesd.public_set_distillation import PublicSetDistillation
from fedlight.engine.run.assemble import build_views
from fedlight.engine.run.fit import build_module, fit, prepare_data
from fedlight.errors import UserError
from fedlight.methods.federated_module import OptimizerSpec
from fedlight.seeding import derive_seed
from fedlight.engine.parts.flesd.esd import KeyQueue, distillation_loss, target_distribution
from fedlight.server.flesd import FLESD, esd_steps_per_epoch
from fedlight.server.similarity import decode, encode, ensemble_term, payload_kind


def test_ensemble_hand_computed_3x3() -> None:
    s1 = torch.tensor([[1.0, 0.5, 0.0], [0.5, 1.0, 0.2], [0.0, 0.2, 1.0]])
    s2 = torch.tensor([[1.0, 0.0, 0.5], [0.0, 1.0, 0.0], [0.5, 0.0, 1.0]])
    tau = 0.5
    a1, a2 = ensemble_term(s1, tau), ensemble_term(s2, tau)
    # row max is the diagonal (1.0): A[0, 1] = exp((0.5 - 1) / 0.5) = e^-1
    assert math.isclose(float(a1[0, 1]), math.exp(-1), rel_tol=1e-6)
    assert math.isclose(float(a1[1, 2]), math.exp((0.2 - 1) / 0.5), rel_tol=1e-6)
    assert torch.allclose(torch.diagonal(a1), torch.ones(3))
    agg = FLESD(tau_t=tau)
    acc = agg.accumulate(agg.accumulate(None, {"similarity": s1}, 1.0), {"similarity": s2}, 1.0)
    mean = acc["ensemble"] / acc["__count__"]
    expected = torch.tensor([[1.0, (math.exp(-1) + math.exp(-2)) / 2, (math.exp(-2) + math.exp(-1)) / 2]])
    assert torch.allclose(mean[0:1], expected, atol=1e-6)


def test_queue_indices_follow_their_keys_and_the_current_batch_is_inside() -> None:
    q = KeyQueue(size=4, dim=1)
    q.push(torch.tensor([[10.0], [11.0], [12.0]]), torch.tensor([0, 1, 2]))
    keys, idx = q.contents()
    assert idx.tolist() == [0, 1, 2] and keys.squeeze(1).tolist() == [10, 11, 12]
    q.push(torch.tensor([[13.0], [14.0]]), torch.tensor([3, 4]))  # oldest (0) dropped
    keys, idx = q.contents()
    assert sorted(idx.tolist()) == [1, 2, 3, 4]
    assert all(float(k) == 10 + i for k, i in zip(keys.squeeze(1), idx))
    assert {3, 4} <= set(idx.tolist())


def test_target_rows_sum_to_one_and_positive_dominates() -> None:
    a = ensemble_term(torch.eye(5) * 0.9 + 0.05, 0.1)
    target = target_distribution(a, torch.tensor([0, 3]), torch.tensor([3, 0, 1, 2]))
    assert torch.allclose(target.sum(1), torch.ones(2))
    assert target[0].argmax() == 1 and target[1].argmax() == 0  # A[i, i] is the positive


def test_distillation_loss_is_minimal_when_student_matches_target() -> None:
    keys = torch.nn.functional.normalize(torch.randn(6, 4), dim=1)
    q = keys[:2].clone()
    target = torch.softmax(q @ keys.T / 0.1, dim=1)
    best = distillation_loss(q, keys, target, 0.1)
    worse = distillation_loss(torch.nn.functional.normalize(torch.randn(2, 4), dim=1), keys, target, 0.1)
    assert best < worse


@pytest.mark.parametrize("payload,dtype,topk,expected", [
    ("similarity", "float32", 100.0, 10 * 10 * 4),
    ("similarity", "float16", 100.0, 10 * 10 * 2),
    ("similarity", "int8", 100.0, 10 * 10 + 4),
    ("similarity", "float32", 20.0, 10 * 2 * 4 + 10 * 2 * 4),       # values + int32 indices
    ("embeddings", "float32", 100.0, 10 * 3 * 4),
    ("embeddings", "int8", 100.0, 10 * 3 + 4),
])
def test_payload_bytes_per_dtype(payload: str, dtype: str, topk: float, expected: int) -> None:
    z = torch.nn.functional.normalize(torch.randn(10, 3), dim=1)
    msg = encode(z, payload, dtype, topk)
    assert sum(payload_bytes(msg).values()) == expected
    sim = decode(msg, 10)
    exact = z @ z.T
    if topk == 100:
        assert torch.allclose(sim, exact, atol=0.02)
    else:
        assert torch.isinf(sim).sum() == 10 * 8 and torch.allclose(sim.amax(1), exact.amax(1))


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
def test_square_embeddings_are_decoded_as_embeddings(dtype: str) -> None:
    """N x d embeddings with d == N (projection 128, 128 public images) are still embeddings."""
    z = torch.nn.functional.normalize(torch.randn(8, 8, generator=torch.Generator().manual_seed(0)), dim=1)
    msg = encode(z, "embeddings", dtype)
    assert torch.allclose(decode(msg, 8), z @ z.T, atol=0.03)
    assert payload_kind(msg) == "embeddings" and sum(payload_bytes(msg).values()) == sum(
        payload_bytes(encode(z, "similarity", dtype)).values())  # the kind key costs no bytes
    agg = FLESD(payload="embeddings", dtype=dtype)
    acc = agg.accumulate(None, agg.client_message(z), 1.0)
    assert torch.allclose(acc["ensemble"], ensemble_term(z @ z.T, agg.tau_t), atol=0.3)
    assert torch.allclose(torch.diagonal(acc["ensemble"]), torch.ones(8), atol=0.05)  # S[i, i] = 1 is the row max


def test_a_message_without_its_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="kind"):
        decode({"values": torch.eye(3)}, 3)
    with pytest.raises(ValueError, match="shape"):
        decode({"similarity": torch.ones(3, 2)}, 3)


def test_topk_with_embeddings_is_a_user_error() -> None:
    with pytest.raises(UserError, match="server.topk_percent"):
        FLESD(payload="embeddings", topk_percent=10)


FLESD_ARGS = ["partition.public_client=0", "clients.num=3",
              "method={name: simclr, loss: infonce, temperature: 0.4, hidden_dim: 64, output_dim: 32}",
              "server={name: flesd, epochs: 2, queue_size: 64, batch_size: 32, dtype: float16}"]


def test_real_flesd_run_sends_no_weights_and_logs_its_esd_steps(tmp_path: Path, tiny_recipe: Path,
                                                                monkeypatch) -> None:
    received: list[set[str]] = []
    original = FLESD.accumulate

    def spy(self, acc, payload, weight):
        received.append(set(payload))
        return original(self, acc, payload, weight)

    monkeypatch.setattr(FLESD, "accumulate", spy)
    recipe = load_recipe(tiny_recipe, [*FLESD_ARGS, f"run.dir={tmp_path / 'f'}"])
    res = fit(recipe)
    assert received and all(keys == {"similarity"} for keys in received)  # float16 similarity, nothing else
    assert all(row["clients"] == [1, 2] for row in res["history"])  # the public client never trains
    assert res["history"][0]["bytes_up"] < res["history"][0]["bytes_down"]
    # every round's ESD steps: 2 epochs of (batches - queue_size // batch_size) on the public set
    n = len(prepare_data(recipe)[1][0])
    steps = 2 * esd_steps_per_epoch(n, 32, 64)
    assert steps >= 2 * 8 and [row["esd_steps"] for row in res["history"]] == [steps, steps]
    saved = json.loads((tmp_path / "f/results.json").read_text())
    assert [row["esd_steps"] for row in saved["history"]] == [steps, steps]
    events = EventAccumulator(str(tmp_path / "f/tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("server/esd_steps")] == [(1, steps), (2, steps)]


def test_esd_steps_per_epoch() -> None:
    # 286 images in batches of 16: 17 full + 14; the first 64 // 16 = 4 only fill the queue
    assert esd_steps_per_epoch(286, 16, 64) == 14
    assert esd_steps_per_epoch(300, 128, 512) == 0  # the old CPU twin: 3 batches, 4 to fill the queue
    assert esd_steps_per_epoch(33, 16, 16) == 1  # 16 + 16 + a trailing batch of one, skipped
    assert esd_steps_per_epoch(35, 16, 0, world=2) == 2  # 3 rows over 2 ranks leave one a single row
    assert esd_steps_per_epoch(36, 16, 0, world=2) == 3
    assert esd_steps_per_epoch(100, 3, 0, world=2) == 0  # no batch gives each rank two rows


def test_a_queue_that_leaves_no_esd_step_is_a_one_line_user_error(tiny_recipe: Path, tmp_path: Path,
                                                                  capsys) -> None:
    run = tmp_path / "none"
    args = ["fit", "--recipe", str(tiny_recipe), *FLESD_ARGS[:3], f"run.dir={run}",
            "server={name: flesd, queue_size: 512, batch_size: 128}"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    # 323 public images: 3 batches, 4 to fill the queue
    assert "server.queue_size=512" in err and "0 ESD steps an epoch" in err and "below 384" in err, err
    assert not run.exists()  # refused before anything is written


def test_a_trailing_public_batch_of_one_is_skipped(tiny_recipe: Path) -> None:
    """N mod batch == 1: the last batch would put one image through BatchNorm in training mode."""
    recipe = load_recipe(tiny_recipe, FLESD_ARGS)
    data, _ = prepare_data(recipe)
    fabric = Fabric(accelerator="cpu", devices=1)
    module = fabric.to_device(build_module(recipe, data))
    distiller = EnsembleDistiller(fabric, module, data.train_x[:33], build_views(recipe, data), recipe.seed)
    ensemble = ensemble_term(torch.eye(33), 0.1)
    state = distiller(ensemble, tau_s=0.1, momentum=0.99, queue_size=16, epochs=2, batch_size=16, lr=1e-3,
                      weight_decay=0.0)
    assert distiller.steps == 2 * esd_steps_per_epoch(33, 16, 16) == 2
    assert all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point())


@pytest.mark.skipif(not Path("/usr/share/datasets/fashion-mnist").is_dir(), reason="needs Fashion-MNIST")
@pytest.mark.parametrize("overrides", [[], ["data.subset=1800"]])
def test_the_cpu_twin_takes_many_esd_steps_an_epoch(overrides: list[str]) -> None:
    recipe = load_recipe(Path(__file__).resolve().parents[1] / "recipes/flesd_fmnist.yaml", overrides)
    server = registry.build_server(recipe.server, recipe.clients.num)
    n = len(prepare_data(recipe)[1][recipe.partition.public_client])
    assert server.check_public_set(n) >= 14, n  # the recipe's comment: 17-36 (3,000 images), 14-23 (1,800)


def test_flesd_needs_a_public_client(tiny_recipe: Path) -> None:
    with pytest.raises(UserError, match="partition.public_client"):
        fit(load_recipe(tiny_recipe, ["server.name=flesd"]))
    with pytest.raises(UserError, match="partition.public_client"):
        fit(load_recipe(tiny_recipe, ["server.name=flesd", "partition.public_client=7"]))


def test_distillation_starts_from_the_global_model(tmp_path: Path, tiny_recipe: Path, monkeypatch) -> None:
    seen = []
    original = EnsembleDistiller.__call__

    def spy(self, ensemble, **kw):
        seen.append({k: v.clone() for k, v in self.module.shared_state().items()})
        return original(self, ensemble, **kw)

    monkeypatch.setattr(EnsembleDistiller, "__call__", spy)
    recipe = load_recipe(tiny_recipe, [*FLESD_ARGS, "rounds=1", f"run.dir={tmp_path / 'f'}"])
    fit(recipe)
    torch.manual_seed(derive_seed(recipe.seed, "init"))
    init = registry.build_method(recipe.method, "small_cnn", 3, 16, 10, OptimizerSpec()).shared_state()
    assert all(torch.equal(seen[0][k], init[k]) for k in init)


BALANCED = [*FLESD_ARGS, "data.subset=600", "partition.public_balanced=true"]


def test_a_balanced_public_set_replaces_only_the_public_images(tiny_recipe: Path) -> None:
    """Same size as the public client's share, size // C a class (the first size mod C one more),
    none of it in data.subset; the partitions and the evaluator's training data as without it."""
    on, off = load_recipe(tiny_recipe, BALANCED), load_recipe(tiny_recipe, BALANCED[:-1])
    (data, parts), (plain, plain_parts) = prepare_data(on), prepare_data(off)
    assert len(parts) == len(plain_parts) and all(np.array_equal(a, b) for a, b in zip(parts, plain_parts))
    assert torch.equal(data.train_x, plain.train_x) and torch.equal(data.test_x, plain.test_x)
    assert plain.public_x is None
    full = load_dataset(on.data.name, on.data.root, on.data.download, on.seed)
    size = len(parts[on.partition.public_client])
    picked = balanced_outside_subset(full.train_y, 600, size, full.num_classes, on.seed)
    assert torch.equal(full.train_x[picked], data.public_x) and len(data.public_x) == size
    assert not set(picked.tolist()) & set(subset_indices(len(full.train_y), 600, on.seed).tolist())
    counts = torch.bincount(full.train_y[picked], minlength=full.num_classes).tolist()
    assert counts == [size // 10 + (c < size % 10) for c in range(10)], (size, counts)
    share = torch.bincount(plain.train_y[parts[0]], minlength=10)
    assert share.max() - share.min() > 1  # the Dirichlet share it replaces is not balanced


def test_under_feature_shift_the_balanced_public_set_takes_the_public_clients_domain(tiny_recipe: Path) -> None:
    """Client 0 is in the first domain (invert): its balanced stand-in is the same draw, inverted."""
    recipe = load_recipe(tiny_recipe, [*BALANCED, "partition.domains=[invert, identity]"])
    data, parts = prepare_data(recipe)
    full = load_dataset(recipe.data.name, recipe.data.root, recipe.data.download, recipe.seed)
    picked = balanced_outside_subset(full.train_y, 600, len(parts[0]), full.num_classes, recipe.seed)
    assert torch.equal(data.public_x, 255 - full.train_x[picked])


def test_a_real_flesd_run_distils_on_the_balanced_public_set(tmp_path: Path, tiny_recipe: Path,
                                                             monkeypatch) -> None:
    seen: dict[str, torch.Tensor] = {}

    built = PublicSetDistillation.__init__

    def spy(self, fabric, module, public_images, *args) -> None:
        seen["public"] = public_images
        built(self, fabric, module, public_images, *args)

    monkeypatch.setattr(PublicSetDistillation, "__init__", spy)
    recipe = load_recipe(tiny_recipe, [*BALANCED, "rounds=1", f"run.dir={tmp_path / 'b'}"])
    res = fit(recipe)
    data, parts = prepare_data(recipe)
    assert torch.equal(seen["public"], data.public_x)
    assert res["history"][0]["clients"] == [1, 2]
    assert res["history"][0]["esd_steps"] == 2 * esd_steps_per_epoch(len(parts[0]), 32, 64) > 0
    assert math.isfinite(res["history"][0]["knn_acc"])
    assert json.loads((tmp_path / "b/results.json").read_text())["recipe"]["partition"]["public_balanced"] is True
    summary = json.loads((tmp_path / "b/partition.json").read_text())  # the set it distilled on, not the share
    assert summary["public_client"] == 0
    assert summary["public_set_label_counts"] == torch.bincount(data.public_y, minlength=10).tolist()
    assert summary["public_set_label_counts"] != summary["label_counts"][0]


@pytest.mark.parametrize("overrides,says", [
    (["partition.public_balanced=true", "data.subset=600"], "partition.public_client is unset"),
    (["partition.public_balanced=true", "data.subset=600", "partition.public_client=0", "clients.num=3"],
     "server.name=fedavg does not use"),
    ([*FLESD_ARGS, "partition.public_balanced=true"], "data.subset, which is unset"),
    ([*FLESD_ARGS, "partition.public_balanced=true", "data.subset=1150"], "outside data.subset=1150"),
])
def test_a_balanced_public_set_it_cannot_make_is_a_one_line_user_error(
        tiny_recipe: Path, tmp_path: Path, capsys, overrides: list[str], says: str) -> None:
    run = tmp_path / "refused"
    assert main(["fit", "--recipe", str(tiny_recipe), *overrides, f"run.dir={run}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "partition.public_balanced" in err and says in err, err
    assert not run.exists()
