"""TensorBoard beyond scalars: the hparams a run uses, histograms of update norms and buffer scores."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from fedlight.config import load_recipe
from fedlight.config.schema import Recipe
from fedlight.engine.output.tensorboard import flatten, run_hparams, used_hparams
from fedlight.engine.run.fit import fit
from fedlight.server.ops import update_norm


def test_update_norm_hand_computed() -> None:
    """sqrt(3^2 + 4^2 + 12^2) = 13 over the shared float tensors; ints and unshared names are skipped."""
    state = {"w": torch.tensor([4.0, 6.0]), "b": torch.tensor([12.0]), "n": torch.tensor(7), "extra": torch.ones(3)}
    reference = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([0.0]), "n": torch.tensor(1)}
    assert update_norm(state, reference) == 13.0
    assert update_norm({"sim": torch.ones(2, 2)}, reference) is None  # e.g. FLESD's similarity message


def test_fedavg_hparams_leave_out_the_parts_it_does_not_build() -> None:
    record = asdict(Recipe())  # FedAvg + SimCLR, Dirichlet partition, Adam, constant lr, epoch schedule
    hp = used_hparams(record, ["local.epochs"])
    assert not [k for k in hp if k.split("/")[0] in ("stream", "buffer", "exchange", "run", "faults")]
    assert {"partition/kind", "partition/alpha", "partition/min_size", "local/epochs", "method/name", "server/name",
            "fabric/precision", "views/flip_p", "eval/knn_k"} <= set(hp)
    assert not {"partition/shards_per_client", "partition/classes_per_client", "partition/public_client",
                "local/iterations", "local/momentum", "local/lr_decay", "fabric/devices", "data/root",
                "eval/projector_samples"} & set(hp)
    assert len(flatten(record)) - len(hp) >= 20  # what the issue counted: ~20 unused keys listed before
    assert hp["partition/alpha"] == 0.5


def test_hparams_follow_the_values_that_make_a_key_read() -> None:
    record = asdict(Recipe())
    record["partition"]["kind"], record["local"]["optimizer"], record["local"]["lr_schedule"] = "shards", "sgd", \
        "exponential"
    hp = used_hparams(record, ["stream", "buffer.size"])
    assert {"partition/shards_per_client", "local/momentum", "local/lr_decay", "stream/velocity", "stream/stc",
            "buffer/size"} <= set(hp)
    assert not {"partition/alpha", "buffer/policy"} & set(hp)


def test_a_run_that_lists_its_hparams_logs_those_alone() -> None:
    """A sweep's run lists what varies across the sweep (``run.hparams``); a key its recipe lacks (an
    arm's method without ``mu``) is left out, a section stands for its keys; unset, the keys it uses."""
    record = asdict(Recipe())
    record["run"]["hparams"] = ["partition.alpha", "method.mu", "method.name", "seed", "clients"]
    assert run_hparams(record, ["local.epochs"]) == {"partition/alpha": 0.5, "method/name": "simclr", "seed": 0,
                                                     "clients/num": 10, "clients/fraction": 1.0,
                                                     "clients/sampling": "fixed"}
    record["run"]["hparams"] = None
    assert run_hparams(record, ["local.epochs"]) == used_hparams(record, ["local.epochs"])


def _hparam_keys(acc: EventAccumulator) -> set[str]:
    for data in acc.PluginTagToContent("hparams").values():
        plugin = plugin_data_pb2.HParamsPluginData.FromString(data)
        if plugin.HasField("session_start_info"):
            return set(plugin.session_start_info.hparams)
    raise AssertionError("no hparams written")


@pytest.fixture(scope="module")
def stream_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SOFed's importance buffer (32 samples) on 2 synthetic clients, 2 rounds."""
    from conftest import REPO, TINY

    tmp = tmp_path_factory.mktemp("tb")
    recipe = tmp / "tiny.yaml"
    recipe.write_text(TINY.format(repo=REPO))
    fit(load_recipe(recipe, ["stream.velocity=96", "stream.stc=20", "buffer.size=32", "local.optimizer=sgd",
                             "local.lr=0.05", "method={name: byol, hidden_dim: 32, output_dim: 16}",
                             "eval.probe_epochs=2", "eval.projector_samples=0", f"run.dir={tmp / 'run'}"]))
    return tmp / "run"


def test_histograms_of_update_norms_and_importance_scores(stream_run: Path) -> None:
    acc = EventAccumulator(str(stream_run / "tensorboard"), size_guidance={"histograms": 0, "tensors": 0})
    acc.Reload()
    norms = acc.Histograms("clients/update_norm")
    assert [e.step for e in norms] == [1, 2]
    assert all(e.histogram_value.num == 2 and e.histogram_value.min > 0 for e in norms)  # both clients moved
    scores = acc.Histograms("stream/importance_scores")
    assert [e.step for e in scores] == [1, 2]
    buffers = torch.load(stream_run / "checkpoints/last.pt", weights_only=True)["clients"]
    held = torch.cat([state["buffer.scores"] for state in buffers.values()])
    last = scores[-1].histogram_value
    assert last.num == len(held) == 64  # every score of both full buffers after the last round
    assert last.sum == pytest.approx(float(held.sum()), rel=1e-5)


def test_stream_run_hparams_are_the_keys_it_uses(stream_run: Path) -> None:
    acc = EventAccumulator(str(stream_run / "tensorboard"), size_guidance={"tensors": 0})
    acc.Reload()
    keys = _hparam_keys(acc)
    assert {"stream/velocity", "stream/stc", "buffer/size", "buffer/policy", "buffer/lazy_interval",
            "buffer/score", "local/momentum", "method/name", "faults/max_update_ratio"} <= keys
    assert not [k for k in keys if k.startswith(("exchange/", "run/", "faults/dropout", "local/epochs"))]
