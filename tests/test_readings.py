"""The label-free readings (RankMe, spectrum, alignment, uniformity, embedding std, linear CKA), the kNN over
clients' own test shares and the fine-tune: hand-computed tiny cases, then what a short run records."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from conftest import QUICK_EVAL, SMALL_RUN
from fedlight.cli import main
from fedlight.eval import diagnostics
from fedlight.eval.collapse import CollapseAlarm
from fedlight.eval.client_spread import share_accuracies, spread_columns, worst_mean
from fedlight.eval.finetune import finetune_accuracy


def test_rankme_of_a_rank_one_embedding_is_one() -> None:
    features = torch.outer(torch.arange(1.0, 9.0), torch.tensor([1.0, -2.0, 0.5, 3.0]))  # (8, 4), rank 1
    assert diagnostics.rankme(diagnostics.normalized_spectrum(features)) == pytest.approx(1.0, abs=1e-4)


def test_rankme_of_an_isotropic_embedding_is_close_to_its_dimension() -> None:
    features = torch.randn(20000, 16, generator=torch.Generator().manual_seed(0))
    assert 15.5 < diagnostics.rankme(diagnostics.normalized_spectrum(features)) <= 16.0


def test_rankme_and_spectrum_by_hand() -> None:
    spectrum = diagnostics.normalized_spectrum(torch.tensor([[3.0, 0.0], [0.0, 1.0]]))  # sigma (3, 1)
    assert spectrum.tolist() == pytest.approx([0.75, 0.25])
    assert diagnostics.rankme(spectrum) == pytest.approx(math.exp(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25))),
                                                         rel=1e-5)  # 1.7548


def test_embedding_std_by_hand() -> None:
    assert diagnostics.embedding_std(torch.tensor([[2.0, 0.0], [0.0, 5.0]])) == pytest.approx(math.sqrt(0.5))
    assert diagnostics.embedding_std(torch.tensor([[1.0, 2.0]] * 5)) == 0.0  # collapsed to one point


def test_alignment_and_uniformity_by_hand() -> None:
    e1, e2 = torch.tensor([[3.0, 0.0]]), torch.tensor([[0.0, 0.5]])
    assert diagnostics.alignment(e1, e1 * 2) == 0.0  # the same direction
    assert diagnostics.alignment(e1, e2) == pytest.approx(2.0)  # ||(1, 0) - (0, 1)||^2
    assert diagnostics.uniformity(torch.tensor([[1.0, 0.0], [-2.0, 0.0]])) == pytest.approx(-8.0)  # exp(-2 * 4)
    assert diagnostics.uniformity(torch.tensor([[1.0, 1.0]] * 3)) == pytest.approx(0.0)  # collapsed
    square = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])  # 4 pairs at d^2 = 2, 2 at 4
    assert diagnostics.uniformity(square) == pytest.approx(math.log((4 * math.exp(-4) + 2 * math.exp(-8)) / 6))


def _hsic_u_by_its_definition(k: torch.Tensor, l: torch.Tensor) -> float:
    """Song et al.'s U-statistic, summed over every ordered 4-tuple of distinct indices (N = 6: 360 of them)."""
    n = k.shape[0]
    total = sum(k[i, j] * l[i, j] + k[i, j] * l[q, r] - 2 * k[i, j] * l[i, q]
                for i, j, q, r in itertools.permutations(range(n), 4))
    return float(total) / math.perm(n, 4)


def test_linear_cka_is_the_unbiased_hsic_ratio_by_its_definition() -> None:
    gen = torch.Generator().manual_seed(3)
    x, y = torch.randn(6, 3, generator=gen, dtype=torch.float64), torch.randn(6, 2, generator=gen, dtype=torch.float64)
    x, y = x - x.mean(0), y - y.mean(0)
    k, l = x @ x.T, y @ y.T
    expected = _hsic_u_by_its_definition(k, l) / math.sqrt(_hsic_u_by_its_definition(k, k)
                                                            * _hsic_u_by_its_definition(l, l))
    assert diagnostics.linear_cka(x, y) == pytest.approx(expected, rel=1e-9)


def test_linear_cka_reads_1_for_equal_embeddings_and_about_0_for_unrelated_ones_at_any_n() -> None:
    """Kornblith et al.'s plain estimator reads two independent 512-d embeddings of 128 images as 0.80: on the
    drift reading's 128 images its scale ended at 0.5-0.8, not at 0."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(50, 6, generator=gen)
    rotation, _ = torch.linalg.qr(torch.randn(6, 6, generator=gen))
    assert diagnostics.linear_cka(x, 3 * x @ rotation + 1) == pytest.approx(1.0)  # rotation, scale, shift
    for d in (128, 512):
        a, b = torch.randn(128, d, generator=gen), torch.randn(128, d, generator=gen)
        assert abs(diagnostics.linear_cka(a, b)) < 0.05
    big = torch.randn(4000, 16, generator=gen, dtype=torch.float64)  # N >> D: the plain estimator's value
    related = big @ torch.randn(16, 8, generator=gen, dtype=torch.float64) + torch.randn(4000, 8, generator=gen,
                                                                                       dtype=torch.float64)
    a, b = big - big.mean(0), related - related.mean(0)
    plain = float((b.T @ a).norm() ** 2 / ((a.T @ a).norm() * (b.T @ b).norm()))
    assert diagnostics.linear_cka(big, related) == pytest.approx(plain, abs=0.01)


def test_client_spread_by_hand() -> None:
    correct = torch.tensor([True, False, True, True, False, False])
    shares = [torch.tensor([0, 1]), torch.tensor([2, 3]), torch.tensor([], dtype=torch.long), torch.tensor([4, 5])]
    accs = share_accuracies(correct, shares)
    assert accs == [0.5, 1.0, 0.0]  # the empty share has no accuracy
    assert worst_mean(list(range(20))) == 0.5  # the worst 2 of 20
    assert worst_mean([0.9, 0.3, 0.6]) == 0.3  # at least one
    assert spread_columns("c", accs) == pytest.approx({"c": 0.5, "c_worst10": 0.0, "c_std": math.sqrt(1 / 6)})
    assert spread_columns("c", []) == {"c": None, "c_worst10": None, "c_std": None}


def _separable(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 3
    return torch.randn(n, 4, generator=g) + 3 * torch.nn.functional.one_hot(y, 4)[:, :4].float(), y


def test_finetune_is_seeded_learns_and_leaves_the_encoder_alone() -> None:
    torch.manual_seed(0)
    encoder = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU())
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    (xtr, ytr), (xte, yte) = _separable(90, 0), _separable(60, 1)
    state = torch.get_rng_state()
    run = lambda: finetune_accuracy(encoder, lambda m, x: m(x), xtr, ytr, xte, yte, 3, 200,  # noqa: E731
                                    torch.Generator().manual_seed(5))
    first = run()
    assert run() == first > 0.9  # the same number twice; it learned the classes
    assert torch.equal(torch.get_rng_state(), state)  # no draw from the global generator
    assert all(torch.equal(v, before[k]) for k, v in encoder.state_dict().items())


def _fit(tmp_path: Path, name: str, *overrides: str, recipe: Path) -> dict:
    run = tmp_path / name
    assert main(["fit", "--recipe", str(recipe), *SMALL_RUN, *QUICK_EVAL, f"run.dir={run}", *overrides]) == 0
    return json.loads((run / "results.json").read_text())


def test_a_run_records_every_reading_and_its_accuracies_do_not_move(tiny_recipe: Path, tmp_path: Path) -> None:
    on = _fit(tmp_path, "on", "eval.finetune=[0.1]", "eval.finetune_epochs=1", recipe=tiny_recipe)
    off = _fit(tmp_path, "off", "eval.readings=[]", recipe=tiny_recipe)
    columns = ("rankme", "spectrum_top1", "alignment", "uniformity", "embedding_std_mean", "client_knn_acc",
               "client_knn_acc_worst10", "client_knn_acc_std", "finetune_acc@0.1")
    for row in (on["baseline"], on["final"], *on["history"]):
        fine_tuned = row is on["final"] or row is on["history"][-1]  # the fine-tune: the last round only
        assert all(isinstance(row[c], float) and math.isfinite(row[c]) for c in columns[:-1 + fine_tuned]), row
        assert ("finetune_acc@0.1" in row) == fine_tuned
        assert 1 <= row["rankme"] and 0 < row["spectrum_top1"] <= 1 and 0 <= row["alignment"] <= 4
        assert row["uniformity"] <= 0 and row["client_knn_acc_worst10"] <= row["client_knn_acc"]
    assert not any(k.startswith(columns) for row in off["history"] for k in row)
    assert on["collapse"] is None  # the default thresholds do not fire on a healthy run
    # the readings draw from their own generators: the training, probe and kNN are the same bit for bit
    strip = lambda row: {k: v for k, v in row.items() if not k.startswith(columns) and "seconds" not in k}  # noqa
    assert [strip(r) for r in on["history"]] == [strip(r) for r in off["history"]]
    assert strip(on["final"]) == off["final"] and strip(on["baseline"]) == off["baseline"]
    events = EventAccumulator(str(tmp_path / "on" / "tensorboard"), size_guidance={"histograms": 0, "scalars": 0})
    events.Reload()
    assert [e.step for e in events.Scalars("representation/rankme")] == [0, 1, 2]
    assert [e.value for e in events.Scalars("representation/rankme")][1:] == pytest.approx(
        [row["rankme"] for row in on["history"]])
    assert [e.step for e in events.Scalars("accuracy/client_knn_acc_worst10")] == [0, 1, 2]
    assert [e.step for e in events.Histograms("representation/log10_spectrum")] == [0, 1, 2]
    assert [e.step for e in events.Histograms("clients/knn_acc")] == [0, 1, 2]


def _rows(*rankmes: float | None) -> list[dict]:
    return [{"round": i + 1, "rankme": r} for i, r in enumerate(rankmes)]


def test_the_alarm_fires_once_after_patience_evaluations_in_a_row() -> None:
    alarm = CollapseAlarm(rankme=2.0, std=0.05, patience=2)
    assert alarm.fires(_rows(1.5), 64) is None  # one low evaluation is not enough
    assert alarm.fires(_rows(1.5, 3.0), 64) is None  # the streak broke
    assert alarm.fires(_rows(3.0, 1.5, 1.2), 64) == {"round": 3, "reading": "rankme", "value": 1.2, "threshold": 2.0,
                                                      "evaluations": 2}
    assert alarm.fires(_rows(1.5, None, 1.2), 64)["round"] == 3  # rounds without an evaluation do not count
    assert alarm.fires(_rows(1.5, 1.2, None), 64) is None  # the last round was not evaluated
    fired = _rows(1.5, 1.2, 1.1)
    fired[1]["collapse"] = {"round": 2}
    assert alarm.fires(fired, 64) is None  # once per run
    std = [{"round": 1, "embedding_std_mean": 0.004}, {"round": 2, "embedding_std_mean": 0.005}]  # x 8: .032, .04
    assert alarm.fires(std, 64)["reading"] == "embedding_std_mean x sqrt(D)"
    assert alarm.fires(std, 400) is None  # x sqrt(400): 0.08 and 0.1, above 0.05
    assert alarm.fires(std, None) is None  # D unknown: the std is not watched


def test_the_alarm_stops_a_run_checkpointed_and_resumable(tiny_recipe: Path, tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    args = ["fit", "--recipe", str(tiny_recipe), *SMALL_RUN, *QUICK_EVAL, f"run.dir={run}", "eval.collapse_rankme=1e9",
            "eval.collapse_patience=1", "eval.collapse_stop=true", "run.checkpoint_every=5"]  # the stop saves anyway
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("reads as collapsed") == 1 and "round 1: the encoder reads as collapsed: rankme" in err, err
    stopped = json.loads((run / "results.json").read_text())
    assert stopped["rounds_completed"] == 1 and stopped["collapse"]["round"] == 1 and stopped["final"] is None
    assert torch.load(run / "checkpoints/last.pt", weights_only=True)["rounds_completed"] == 1
    assert main([*args, "--resume"]) == 0  # it fired once: the resumed run trains on
    assert "reads as collapsed" not in capsys.readouterr().err
    done = json.loads((run / "results.json").read_text())
    assert done["rounds_completed"] == 2 and done["collapse"] == stopped["collapse"]
    assert "collapse" in done["history"][0] and "collapse" not in done["history"][1]


def test_the_alarm_without_stop_says_so_in_one_line(tiny_recipe: Path, tmp_path: Path, capsys) -> None:
    results = _fit(tmp_path, "warned", "eval.collapse_rankme=1e9", recipe=tiny_recipe)  # patience 2: round 2
    lines = [line for line in capsys.readouterr().err.splitlines() if "reads as collapsed" in line]
    assert len(lines) == 1 and lines[0].startswith("fedlight: round 2: ") and "eval.collapse_stop" in lines[0]
    assert results["rounds_completed"] == 2 and results["collapse"]["round"] == 2


def test_drift_is_a_column_per_round_and_leaves_the_training_alone(tiny_recipe: Path, tmp_path: Path) -> None:
    drift = _fit(tmp_path, "drift", "eval.readings=[rankme,drift]", recipe=tiny_recipe)
    plain = _fit(tmp_path, "plain", "eval.readings=[rankme]", recipe=tiny_recipe)
    for row in drift["history"]:
        assert 0 < row["drift_cka_min"] <= row["drift_cka"] <= 1 + 1e-9 and row["drift_cka_std"] >= 0, row
    assert drift["final"]["drift_cka_min"] == drift["history"][-1]["drift_cka_min"]  # the last round's, in final
    strip = lambda row: {k: v for k, v in row.items() if not k.startswith("drift") and "seconds" not in k}  # noqa
    assert [strip(r) for r in drift["history"]] == [strip(r) for r in plain["history"]]
    events = EventAccumulator(str(tmp_path / "drift" / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    assert [e.step for e in events.Scalars("representation/drift_cka_min")] == [1, 2]


@pytest.mark.parametrize("override, named", [
    ("eval.readings=[rankme,entropy]", "eval.readings"), ("eval.finetune=[0.0]", "eval.finetune"),
    ("eval.finetune=[0.1,1.5]", "eval.finetune"), ("eval.finetune_epochs=0", "eval.finetune_epochs"),
    ("eval.reading_samples=1", "eval.reading_samples"), ("eval.collapse_patience=0", "eval.collapse_patience"),
    ("eval.collapse_rankme=-1", "eval.collapse_rankme")])
def test_a_bad_reading_setting_is_one_line_exit_2(tiny_recipe: Path, tmp_path: Path, capsys, override: str,
                                                  named: str) -> None:
    run = tmp_path / "bad"
    assert main(["fit", "--recipe", str(tiny_recipe), override, f"run.dir={run}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedlight: error: ") and named in err, err
    assert not run.exists()


def test_the_schema_names_the_readings_the_evaluator_knows() -> None:
    import typing

    from fedlight.config.schema import EvalConfig, Reading
    from fedlight.engine.loop.evaluator import DEFAULT_READINGS
    from fedlight.eval.metric_names import READINGS

    assert typing.get_args(Reading) == READINGS
    assert tuple(EvalConfig().readings) == DEFAULT_READINGS == tuple(r for r in READINGS if r != "drift")
