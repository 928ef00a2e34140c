"""What a run prints: the final line names the main metric and every label fraction; one plain line a round off a terminal."""

from __future__ import annotations

import io

from tqdm import tqdm

from fedlight.engine.console import final_line, metrics_text
from fedlight.engine.progress import ClientTicks, RoundBars
from fedlight.eval import metric_names


def _results(final: dict, baseline: dict, label_fraction: float = 1.0) -> dict:
    return {"final": final, "baseline": baseline, "wall_seconds": 12.34,
            "recipe": {"name": "tiny", "eval": {"label_fraction": label_fraction}, "run": {"dir": None}}}


def test_metric_names_attach_the_label_fraction() -> None:
    named = metric_names.with_fraction({"linear_probe_acc": 0.8, "knn_acc": 0.7, "linear_probe_acc@0.01": 0.5,
                                        "test_acc": None}, 0.1)
    assert named == {"linear_probe_acc@0.1": 0.8, "knn_acc@0.1": 0.7, "linear_probe_acc@0.01": 0.5, "test_acc": None}
    assert metric_names.title("linear_probe_acc@0.01") == "linear probe, 1% labels"
    assert metric_names.title("knn_acc@1") == "kNN, 100% labels" and metric_names.title("adv_auc") == "adv_auc"
    assert metric_names.order(["knn_acc@1", "linear_probe_acc@0.01", "adv_auc", "linear_probe_acc@1", "test_acc"]) == [
        "test_acc", "linear_probe_acc@1", "linear_probe_acc@0.01", "knn_acc@1", "adv_auc"]
    assert metric_names.matches("linear_probe_acc@0.1", "linear_probe_acc")
    assert not metric_names.matches("knn_acc@0.1", "linear_probe_acc")


def test_final_line_of_a_supervised_run_starts_with_test_acc() -> None:
    line = final_line(_results({"linear_probe_acc": 0.8, "knn_acc": 0.75, "test_acc": 0.9},
                               {"linear_probe_acc": 0.3, "knn_acc": 0.2, "test_acc": 0.1}))
    assert line == ("final: test 0.9000 (random init 0.1000); linear probe, 100% labels 0.8000 (random init 0.3000); "
                    "kNN, 100% labels 0.7500 (random init 0.2000); 12.3 s; run folder runs/tiny")


def test_final_line_leaves_out_a_metric_that_is_no_finite_number() -> None:
    line = final_line(_results({"knn_acc": float("nan"), "test_acc": 0.5}, {"test_acc": 0.1}))
    assert line == "final: test 0.5000 (random init 0.1000); 12.3 s; run folder runs/tiny"


def test_final_line_names_every_label_fraction_measured() -> None:
    line = final_line(_results({"linear_probe_acc": 0.6, "knn_acc": 0.5, "test_acc": None,
                                "linear_probe_acc@0.01": 0.4, "linear_probe_acc@1": 0.7},
                               {"linear_probe_acc": 0.2, "linear_probe_acc@0.01": 0.1}, label_fraction=0.1))
    assert line.startswith("final: linear probe, 100% labels 0.7000; linear probe, 10% labels 0.6000 (random init "
                           "0.2000); linear probe, 1% labels 0.4000 (random init 0.1000); kNN, 10% labels 0.5000;")
    assert "test" not in line  # a self-supervised method has no classifier


def test_one_plain_line_per_round_off_a_terminal(capsys) -> None:
    progress = RoundBars(done=1, total=3, enabled=True, label_fraction=0.1)
    assert list(progress) == [1, 2]
    with progress.round(1) as tick:
        tick.expect(4)
        for _ in range(4):
            tick()
    progress.show({"round": 2, "train_loss": 1.23456, "linear_probe_acc": 0.5, "knn_acc": None,
                         "seconds": 2.04}, None)
    progress.show({"round": 3, "train_loss": None, "linear_probe_acc": None, "knn_acc": None,
                         "seconds": 1.0}, None)
    progress.close()
    out, err = capsys.readouterr()
    assert out == "round 2/3: loss 1.2346, linear probe, 10% labels 0.5000; 2.0 s\nround 3/3: loss -; 1.0 s\n"
    assert err == ""  # no bar, no carriage return
    assert metrics_text({"knn_acc_std": 0.1, "knn_acc": float("nan")}, 1.0) == ""


def test_other_ranks_print_nothing(capsys) -> None:
    progress = RoundBars(done=0, total=1, enabled=False, label_fraction=1.0)
    progress.show({"round": 1, "train_loss": 1.0, "seconds": 1.0}, None)
    progress.close()
    assert capsys.readouterr() == ("", "")


def test_the_clients_bar_counts_up_to_what_the_round_deals() -> None:
    bar = tqdm(total=None, file=io.StringIO(), disable=False)
    ticks = ClientTicks(bar)
    ticks.expect(3)  # e.g. two sampled clients and a new device
    ticks()
    ticks()
    assert (bar.n, bar.total) == (2, 3)
