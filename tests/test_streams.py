import numpy as np

from fedlight.data.streams import arrival_batches, correlated_order, segment

LABELS = np.repeat(np.arange(4), 25)  # 100 samples, 4 classes


def _runs(seq: np.ndarray) -> list[int]:
    lengths, current = [], 1
    for a, b in zip(seq[:-1], seq[1:]):
        if LABELS[a] == LABELS[b]:
            current += 1
        else:
            lengths.append(current)
            current = 1
    return lengths + [current]


def test_stream_is_made_of_same_class_runs_of_stc() -> None:
    order = correlated_order(LABELS, np.arange(100), stc=10, rng=np.random.default_rng(0))
    assert sorted(order.tolist()) == list(range(100))
    # runs of 10, 10, 5 per class; adjacent runs of one class may merge, so runs are multiples
    assert all(length % 5 == 0 for length in _runs(order)) and max(_runs(order)) >= 10


def test_every_sample_once_per_pass_and_velocity() -> None:
    idx = np.arange(0, 100, 2)  # a client's 50 samples
    rng = lambda p: np.random.default_rng(1000 + p)  # noqa: E731
    rounds = [segment(LABELS, idx, 5, rng, r, velocity=20) for r in range(5)]
    assert all(len(s) == 20 for s in rounds)
    first_pass = np.concatenate(rounds)[:50]
    second_pass = np.concatenate(rounds)[50:100]
    assert sorted(first_pass.tolist()) == idx.tolist() == sorted(second_pass.tolist())
    assert not np.array_equal(first_pass, second_pass)  # each pass is freshly ordered
    assert np.array_equal(segment(LABELS, idx, 5, rng, 3, 20), rounds[3])  # deterministic


def test_arrival_batches() -> None:
    assert [len(b) for b in arrival_batches(np.arange(10), 4)] == [4, 4, 2]


import pytest  # noqa: E402
import torch  # noqa: E402

from fedlight.config import load_recipe  # noqa: E402
from fedlight.engine.run.fit import fit  # noqa: E402

STREAM = ["stream.velocity=192", "stream.stc=20", "buffer.size=32", "local.lr=0.05", "local.optimizer=sgd",
          "method={name: byol, hidden_dim: 32, output_dim: 16}"]


@pytest.mark.parametrize("policy", ["importance", "fifo", "reservoir", "random", "kcenter"])
def test_short_real_streaming_run(tmp_path, tiny_recipe, policy: str) -> None:
    args = [*STREAM, f"buffer.policy={policy}", "buffer.lazy_interval=2", "eval.extra_label_fractions=[0.1]"]
    straight = fit(load_recipe(tiny_recipe, [*args, "rounds=3", f"run.dir={tmp_path / 'a'}"]))
    fit(load_recipe(tiny_recipe, [*args, "rounds=2", f"run.dir={tmp_path / 'b'}"]))
    resumed = fit(load_recipe(tiny_recipe, [*args, "rounds=3", f"run.dir={tmp_path / 'b'}"]), resume=True)
    assert straight["final"] == resumed["final"]
    row = straight["history"][-1]
    assert 0 <= row["linear_probe_acc@0.1"] <= 1 and "linear_probe_acc@0.1" in straight["final"]
    assert 0 <= row["buffer_dropped_new"] <= 1 and len(row["buffer_classes"]) == 2
    assert all(sum(counts) == 32 for counts in row["buffer_classes"])  # full, never larger
    clients = torch.load(tmp_path / "a/checkpoints/last.pt", weights_only=True)["clients"]
    assert all(len(state["buffer.ids"]) == 32 and int(state["buffer.seen"]) == 3 * 192 for state in clients.values())
    if policy == "fifo":
        assert row["buffer_dropped_new"] < 1  # the newest samples always enter


def test_buffer_score_reaches_the_importance_policy(tmp_path, tiny_recipe) -> None:
    """buffer.score picks the online output eq. 3 compares: the two keep different buffers."""
    kept = {}
    for score in ("prediction", "projection"):
        fit(load_recipe(tiny_recipe, [*STREAM, f"buffer.score={score}", "rounds=1", "eval.every=1",
                                      f"run.dir={tmp_path / score}"]))
        clients = torch.load(tmp_path / score / "checkpoints/last.pt", weights_only=True)["clients"]
        kept[score] = [state["buffer.ids"].tolist() for _, state in sorted(clients.items())]
    assert kept["prediction"] != kept["projection"]


def test_sofed_headline_recipe_names_root_and_download_when_cifar10_is_missing(tmp_path, capsys) -> None:
    from conftest import REPO

    from fedlight.cli import main

    code = main(["fit", "--recipe", str(REPO / "recipes/sofed_cifar10.yaml"), f"data.root={tmp_path}",
                 f"run.dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert code == 2 and "data.root" in err and "data.download" in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_a_score_head_the_method_cannot_pick_is_refused_before_any_data(tiny_recipe) -> None:
    from fedlight.engine.run.fit import check_recipe
    from fedlight.errors import UserError

    stream = ["stream.velocity=64", "buffer.policy=importance", "buffer.score=projection"]
    check_recipe(load_recipe(tiny_recipe, [*stream, "method={name: byol}"]))  # BYOL has an online projection
    with pytest.raises(UserError, match="buffer.score=projection.*SimCLR"):
        check_recipe(load_recipe(tiny_recipe, [*stream, "method={name: simclr}"]))


def test_stream_classes_per_client_limits_each_device_to_its_classes(tiny_recipe) -> None:
    from fedlight.engine.run.fit import prepare_data
    from fedlight.errors import UserError

    recipe = load_recipe(tiny_recipe, ["partition.kind=iid", "clients.num=5", "stream.velocity=64",
                                       "stream.classes_per_client=2"])
    data, parts = prepare_data(recipe)
    held = [set(np.unique(data.train_y.numpy()[p]).tolist()) for p in parts]
    assert all(len(h) == 2 for h in held) and set().union(*held) == set(range(data.num_classes))
    with pytest.raises(UserError, match="stream.classes_per_client"):
        prepare_data(load_recipe(tiny_recipe, ["stream.classes_per_client=1"]))  # no stream set
