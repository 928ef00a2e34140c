"""What a run prints: the final line names the main metric and every label fraction; one plain line a round off a terminal."""

from __future__ import annotations

import io

import pytest

from tqdm import tqdm

from fedlight.engine.output.console import final_line, metrics_text
from fedlight.engine.output.progress import ClientTicks, RoundBars, RunClock, duration, step_done
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
    # in percent, as the README and the report print them
    assert line == ("final: test 90.00% (random init 10.00%); linear probe, 100% labels 80.00% (random init 30.00%); "
                    "kNN, 100% labels 75.00% (random init 20.00%); 12.3 s; run folder runs/tiny")


def test_final_line_leaves_out_a_metric_that_is_no_finite_number() -> None:
    line = final_line(_results({"knn_acc": float("nan"), "test_acc": 0.5}, {"test_acc": 0.1}))
    assert line == "final: test 50.00% (random init 10.00%); 12.3 s; run folder runs/tiny"


def test_final_line_names_every_label_fraction_measured() -> None:
    line = final_line(_results({"linear_probe_acc": 0.6, "knn_acc": 0.5, "test_acc": None,
                                "linear_probe_acc@0.01": 0.4, "linear_probe_acc@1": 0.7},
                               {"linear_probe_acc": 0.2, "linear_probe_acc@0.01": 0.1}, label_fraction=0.1))
    assert line.startswith("final: linear probe, 100% labels 70.00%; linear probe, 10% labels 60.00% (random init "
                           "20.00%); linear probe, 1% labels 40.00% (random init 10.00%); kNN, 10% labels 50.00%;")
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
    assert out == "round 2/3: loss 1.2346, linear probe, 10% labels 50.00%; 2.0 s; ETA 2 s\nround 3/3: loss -; 1.0 s\n"
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
    assert (bar.n, bar.total, bar.unit) == (2, 3, "clients")


def _terminal_bars(total: int = 2) -> tuple[RoundBars, io.StringIO]:
    screen = io.StringIO()
    return RoundBars(done=0, total=total, enabled=True, every=1e9, terminal=True, file=screen), screen


def test_a_round_bar_on_a_terminal_counts_finished_steps_with_finished_clients_beside() -> None:
    """The bar opens at 0 of the round's planned steps, moves with each step, and says how many
    clients are done beside it: 2 clients x 8 steps, on one worker."""
    bars, screen = _terminal_bars()
    with bars.round(0) as tick:
        tick.expect(2)
        assert (tick.bar.n, tick.bar.total, tick.bar.unit) == (0, 2, "clients")
        tick.plan(16)
        assert (tick.bar.n, tick.bar.total, tick.bar.unit) == (0, 16, "steps")
        seen = []
        for client in range(2):
            for _ in range(8):
                step_done()
                seen.append(tick.bar.n)
            tick()
            assert tick.beside() == f"clients {client + 1}/2"
        assert seen == list(range(1, 17))
        assert (tick.bar.n, bars.clock.clients_done, bars.clock.steps_done) == (16, 2, 16)
        assert tick.bar.postfix.startswith("clients 2/2, run ETA ")  # a finished client redraws at once
    drawn = screen.getvalue()  # what tqdm drew: each reset, and (at most every 0.1 s) each unit
    assert "round 1:   0%|" in drawn and "| 0/16 steps" in drawn and "| 16/16 steps" in drawn
    assert "it/s" not in drawn and "steps/s" not in drawn  # no rate of units


def test_a_round_without_planned_steps_counts_finished_clients() -> None:
    bars, _ = _terminal_bars()
    with bars.round(0) as tick:
        tick.expect(4)
        tick.plan(None)  # a schedule that cannot tell its steps
        step_done()
        assert (tick.bar.n, tick.bar.total, tick.beside()) == (0, 4, "steps 1")
        tick()
        tick()
        assert (tick.bar.n, tick.bar.total) == (2, 4)
        for _ in range(3):  # never past the total
            tick()
        assert tick.bar.n == 4


def test_an_evaluation_bar_on_a_terminal_has_each_phases_total_and_the_run_eta() -> None:
    bars, screen = _terminal_bars()
    bars.clock.end_round(10.0)  # a round timed: the ETA is known (10 s a round)
    totals = []

    def evaluation(phases):
        for name, total, unit in (("features", 3, "batches"), ("linear probe", 5, "evaluations"), ("kNN", 2, "chunks")):
            phases(name, total, unit)
            assert (phases.bar.n, phases.bar.total, phases.bar.unit, phases.name) == (0, total, unit, name)
            for _ in range(total - (name == "linear probe")):  # L-BFGS stopped one evaluation early
                phases.advance()
            totals.append((phases.bar.n, phases.at()))
            assert phases.bar.postfix.startswith("run ETA ")
        return "done"

    assert bars.evaluate("round 1", evaluation) == "done"
    assert totals == [(3, "features 3/3 batches"), (4, "linear probe 4/5 evaluations"), (2, "kNN 2/2 chunks")]
    drawn = screen.getvalue()
    assert "evaluating round 1: features:   0%|" in drawn and "| 0/3 batches" in drawn and "| 0/2 chunks" in drawn
    assert "run ETA 10 s" in drawn and "it/s" not in drawn


def test_a_clients_evaluation_names_the_client_before_each_phase() -> None:
    bars, _ = _terminal_bars()
    names = []

    def evaluation(phases):
        for i in range(2):
            inner = phases.within(f"client {i + 1}/2, ")
            inner("kNN", 1, "chunks")
            names.append(phases.bar.desc)

    bars.evaluate("round 1", evaluation)
    assert names == ["evaluating round 1: client 1/2, kNN", "evaluating round 1: client 2/2, kNN"]


def test_the_rounds_bar_counts_finished_rounds_and_shows_the_run_eta() -> None:
    bars, screen = _terminal_bars(total=3)
    assert (bars.bar.n, bars.bar.total) == (0, 3)
    for round_ in bars:
        bars.show({"round": round_ + 1, "train_loss": 1.5, "seconds": 4.0}, {"linear_probe_acc": 0.25})
        assert bars.bar.n == round_ + 1
    assert bars.bar.postfix == "loss 1.500, probe 0.250, run ETA 0 s"
    bars.close()
    assert "3/3 rounds" in screen.getvalue()


def test_a_resumed_run_says_from_where_off_a_terminal_too(capsys) -> None:
    bars = RoundBars(done=3, total=10, enabled=True, resumed=True)
    assert list(bars) == list(range(3, 10))
    RoundBars(done=0, total=10, enabled=True, resumed=True)  # stopped inside round 1
    RoundBars(done=3, total=10, enabled=False, resumed=True)  # another rank
    assert capsys.readouterr() == ("", "fedlight: resumed from its checkpoint after round 3/10\n"
                                       "fedlight: resumed from its checkpoint in round 1/10\n")


class _Clock:
    """A clock a test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_run_eta_extrapolates_the_running_round_then_uses_finished_rounds() -> None:
    now = _Clock()
    clock = RunClock(done=0, total=4, eval_every=1, now=now)
    assert clock.remaining() is None  # nothing measured yet
    clock.eval_seconds = 2.0  # the random-init evaluation took 2 s
    clock.start_round(clients=2, steps=10)
    now.t, clock.steps_done = 5.0, 5  # half the round's steps in 5 s: a round is 10 s + 2 s of evaluation
    assert clock.remaining() == (12 - 5) + 12 * 3
    clock.end_round(12.0)
    assert clock.remaining() == 12 * 3
    now.t = 13.0  # 8 s into round 2 (round 1 was logged as ended at 5 s)
    assert clock.remaining() == (12 - 8) + 12 * 2
    unplanned = RunClock(done=1, total=2, now=now)  # a schedule that plans no steps: clients tell
    unplanned.start_round(clients=4)
    now.t, unplanned.clients_done = 23.0, 1  # a quarter of the clients in 10 s: 30 s left
    assert unplanned.remaining() == 3 * 10.0


def test_steps_and_clients_off_a_terminal_print_a_line_when_the_run_was_silent(capsys) -> None:
    bars = RoundBars(done=0, total=2, enabled=True, every=0.0)  # every event is "long enough"
    step_done()  # outside a round: counted nowhere
    with bars.round(0) as tick:
        tick.expect(2)
        tick.plan(4)
        tick()
        step_done()
        step_done()
    step_done()
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "fedlight: round 1/2: 1/2 clients and 0/4 steps done; run ETA ?"
    assert err[-1].startswith("fedlight: round 1/2: 1/2 clients and 2/4 steps done; run ETA ")
    assert len(err) == 3 and bars.clock.steps_done == 2


def test_an_evaluation_names_its_phases_and_the_random_init_one_is_announced(capsys) -> None:
    bars = RoundBars(done=0, total=2, enabled=True, every=1e9)  # no line for silence
    assert bars.evaluate("the random-init model", lambda phases: phases("features", 4) or 7) == 7
    bars.evaluate("round 1", lambda phases: phases("kNN", 1, "chunks"))
    assert capsys.readouterr().err == ("fedlight: evaluating the random-init model (features, linear probe, kNN) "
                                       "before round 1\n")
    quiet = RoundBars(done=0, total=2, enabled=True, every=0.0)

    def probe(phases):
        phases("linear probe", 125, "evaluations")
        phases.advance()

    quiet.evaluate("round 1", probe)
    assert capsys.readouterr().err == ("fedlight: evaluating round 1: linear probe 0/125 evaluations; run ETA ?\n"
                                       "fedlight: evaluating round 1: linear probe 1/125 evaluations; run ETA ?\n")


def _steps(bars: RoundBars, steps: int, seconds_each: float) -> None:
    with bars.round(0) as tick:
        tick.expect(1)
        tick.plan(1000)
        tick()
        for _ in range(steps):
            bars.clock.now.t += seconds_each
            step_done()


@pytest.mark.parametrize("on_cpu, seconds_each, said", [(True, 10.0, True), (True, 0.01, False), (False, 10.0, False)])
def test_a_long_run_on_a_cpu_is_announced_once_with_its_estimate(capsys, on_cpu, seconds_each, said) -> None:
    bars = RoundBars(done=0, total=10, enabled=True, on_cpu=on_cpu, every=1e9)
    bars.clock = RunClock(0, 10, now=_Clock())
    _steps(bars, 40, seconds_each)
    err = capsys.readouterr().err
    if said:  # 10 rounds x 1,000 steps x 10 s, less the first 20 steps: 99,800 s
        assert err == ("fedlight: estimated time on this CPU: about 27 h 43 min more (10.00 s an optimizer step over "
                       "the first 20); a GPU, fewer rounds or a *_fmnist recipe is quicker\n")
    else:
        assert err == ""


def test_duration_reads_as_a_person_would() -> None:
    assert [duration(s) for s in (4.2, 600, 11_400)] == ["4 s", "10 min", "3 h 10 min"]


def test_a_real_run_counts_the_steps_its_schedule_planned_and_each_evaluation_phase(tiny_recipe, monkeypatch) -> None:
    """The local loops' steps reach the round's progress, as many as the epoch schedule planned; each
    phase of a real evaluation has a total, and its feature batches and kNN chunks reach it."""
    from fedlight.config import load_recipe
    from fedlight.engine.output.progress import EvalPhases
    from fedlight.engine.run.fit import fit

    seen, phases = [], []
    real_show, real_start = RoundBars.show, EvalPhases.__call__
    monkeypatch.setattr(RoundBars, "show",
                        lambda self, row, last: seen.append((self.clock.steps_done, self.clock.steps))
                        or real_show(self, row, last))

    def start(self, name, total=None, unit="batches"):
        if phases and phases[-1][0] is self:
            phases[-1][3] = self.done  # the phase before ends with this many units done
        phases.append([self, name, total, None])
        real_start(self, name, total, unit)

    monkeypatch.setattr(EvalPhases, "__call__", start)
    fit(load_recipe(tiny_recipe, ["eval.probe_epochs=2", "data.subset=300"]))
    assert len(seen) == 2 and all(done == planned > 0 for done, planned in seen), seen
    names = [name for _, name, _, _ in phases]
    assert names == ["features", "linear probe", "kNN", "readings"] * 3  # the random-init model, rounds 1 and 2
    ended = [(name, total, units) for _, name, total, units in phases if units is not None]  # all but the last
    assert [(name, total) for name, total, _ in ended[:2]] == [("features", 2 + 2), ("linear probe", 2)]  # 300 + 300 images
    for name, total, units in ended:  # labelled and test images, 256 a batch; L-BFGS: 5/4 of 2 iterations planned
        assert units == total if name != "linear probe" else 1 <= units <= total, (name, total, units)
