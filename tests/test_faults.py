"""Simulated client faults: dropout, stragglers, divergence; the run keeps going or stops cleanly."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from conftest import QUICK_EVAL, SMALL_RUN
from fedlight import registry
from fedlight.cli import main
from fedlight.config import load_recipe
from fedlight.engine.loop.client_faults import FaultOptions, divergence, draw_fault, poison, steps_done
from fedlight.engine.loop.local_loop import steps_per_epoch
from fedlight.engine.loop.sampling import sample_clients
from fedlight.engine.run.fit import fit
from fedlight.engine.state.checkpoint import load_checkpoint
from fedlight.methods.federated_module import OptimizerSpec
from fedlight.seeding import derive_seed


def _global(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints/last.pt", weights_only=True)["global"]


def test_fault_draws_are_seeded_independent_and_at_the_asked_rate() -> None:
    cfg = FaultOptions(dropout=0.3, straggler=0.2, straggler_work=0.25, diverge=0.1)
    draws = [draw_fault(cfg, 7, r, c) for r in range(10) for c in range(200)]
    assert draws == [draw_fault(cfg, 7, r, c) for r in range(10) for c in range(200)]
    assert draws != [draw_fault(cfg, 8, r, c) for r in range(10) for c in range(200)]
    for rate, hits in ((0.3, sum(d.dropped for d in draws)), (0.2, sum(d.straggler for d in draws)),
                       (0.1, sum(d.diverge for d in draws))):
        assert abs(hits / len(draws) - rate) < 0.03
    assert {d.work for d in draws} == {1.0, 0.25}
    # raising one probability never moves another kind of fault to other clients
    more = [draw_fault(FaultOptions(dropout=0.9, straggler=0.2, straggler_work=0.25, diverge=0.1), 7, r, c)
            for r in range(10) for c in range(200)]
    assert [d.work for d in more] == [d.work for d in draws] and [d.diverge for d in more] == [d.diverge for d in draws]
    assert all(m.dropped for d, m in zip(draws, more) if d.dropped)  # more dropout keeps every earlier drop
    assert draw_fault(FaultOptions(), 7, 0, 0).work == 1.0


@pytest.mark.parametrize("total,work,done", [(10, 0.5, 5), (3, 0.1, 1), (7, 1.0, 7), (0, 0.5, 0), (9, 0.99, 8)])
def test_steps_done(total: int, work: float, done: int) -> None:
    assert steps_done(total, work) == done


def test_steps_per_epoch_skips_a_trailing_single_sample() -> None:
    assert [steps_per_epoch(n, 4) for n in (1, 2, 4, 5, 6, 9, 10)] == [0, 1, 1, 1, 2, 2, 3]


def test_divergence_names_the_bad_value() -> None:
    ok = {"w": torch.ones(3), "n": torch.tensor([1, 2])}
    assert divergence(0.5, ok) is None
    assert divergence(math.nan, ok) == "loss nan"
    assert divergence(math.inf, ok) == "loss inf"
    assert divergence(0.5, {**ok, "b": torch.tensor([0.0, math.inf])}) == "update inf in b"
    poisoned = poison(ok)
    assert divergence(0.5, poisoned) == "update nan in w" and torch.equal(poisoned["n"], ok["n"])


def test_faulty_run_logs_every_fault_and_aggregates_only_answers(tmp_path: Path, tiny_recipe: Path) -> None:
    faults = ["faults.dropout=0.3", "faults.straggler=0.4", "faults.straggler_work=0.5", "faults.diverge=0.2"]
    run = tmp_path / "f"
    res = fit(load_recipe(tiny_recipe, ["clients.num=6", "rounds=3", *faults, *QUICK_EVAL, *SMALL_RUN, f"run.dir={run}"]))
    recipe = load_recipe(run / "recipe.yaml")
    parts = {}
    from fedlight.engine.run.fit import prepare_data

    data, parts = prepare_data(recipe)
    expected_rows = []
    for row in res["history"]:
        round_ = row["round"] - 1
        sampled = sample_clients(recipe.seed, round_, 6, 1.0)
        drawn = {c: draw_fault(FaultOptions(**asdict(recipe.faults)), recipe.seed, round_, c) for c in sampled}
        assert row["dropped"] == sum(d.dropped for d in drawn.values())
        assert row["diverged"] == sum(d.diverge and not d.dropped for d in drawn.values())
        assert row["stragglers"] == sum(d.straggler and not d.dropped for d in drawn.values())
        assert row["answered"] == len(sampled) - row["dropped"] - row["diverged"]
        for c, d in drawn.items():
            if d.dropped:
                expected_rows.append(f"{row['round']},{c},dropped,")
                continue
            if d.straggler:
                total = steps_per_epoch(len(parts[c]), recipe.local.batch_size) * recipe.local.epochs
                expected_rows.append(f"{row['round']},{c},straggler,work=0.5 steps={steps_done(total, 0.5)}")
            if d.diverge:
                expected_rows.append(f"{row['round']},{c},diverged,update nan in backbone.0.weight")
        # a dropped client received the model but sent nothing; everyone else sent
        comm = [line.split(",") for line in (run / "comm.csv").read_text().splitlines()[1:]]
        up = {int(c) for r, c, d, *_ in comm if int(r) == round_ and d == "up"}
        down = {int(c) for r, c, d, *_ in comm if int(r) == round_ and d == "down"}
        assert down == set(sampled) and up == {c for c, d in drawn.items() if not d.dropped}
    assert sum(r["dropped"] + r["diverged"] + r["stragglers"] for r in res["history"]) > 0
    assert (run / "faults.csv").read_text().splitlines() == ["round,client,event,detail", *expected_rows]
    assert all(torch.isfinite(v).all() for v in _global(run).values())  # no NaN reached the global model
    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    answered = [e.value for e in acc.Scalars("faults/answered")]
    assert answered == [r["answered"] for r in res["history"]]
    assert {"faults/dropped", "faults/stragglers", "faults/diverged"} <= set(acc.Tags()["scalars"])

    # the same faults after a kill + resume (faults.csv rebuilt from the checkpoint)
    half = tmp_path / "h"
    fit(load_recipe(tiny_recipe, ["clients.num=6", "rounds=2", *faults, *QUICK_EVAL, *SMALL_RUN, f"run.dir={half}"]))
    with open(half / "faults.csv", "a") as f:
        f.write("9,9,logged-after-the-checkpoint,\n")
    resumed = fit(load_recipe(tiny_recipe, ["clients.num=6", "rounds=3", *faults, *QUICK_EVAL, *SMALL_RUN, f"run.dir={half}"]),
                  resume=True)
    assert (half / "faults.csv").read_text() == (run / "faults.csv").read_text()
    a, b = _global(run), _global(half)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [r["answered"] for r in resumed["history"]] == [r["answered"] for r in res["history"]]


def test_round_without_answers_keeps_the_global_model(tmp_path: Path, tiny_recipe: Path, capsys) -> None:
    run = tmp_path / "all-dropped"
    res = fit(load_recipe(tiny_recipe, ["faults.dropout=1.0", "rounds=2", *QUICK_EVAL, f"run.dir={run}"]))
    assert [r["answered"] for r in res["history"]] == [0, 0] and res["history"][0]["train_loss"] is None
    assert "round 1: no sampled client answered; the global model is kept" in capsys.readouterr().err
    recipe = load_recipe(run / "recipe.yaml")
    torch.manual_seed(derive_seed(recipe.seed, "init"))  # the model fit() starts from
    init = registry.build_method(recipe.method, recipe.model.backbone, 3, 16, 10, OptimizerSpec()).shared_state()
    final = _global(run)
    assert all(torch.equal(init[k], final[k]) for k in final)


def _seed_that_stops_in_round_2(diverge: float, limit: int, clients: int) -> int:
    cfg = FaultOptions(diverge=diverge)
    for seed in range(200):
        bad = [sum(draw_fault(cfg, seed, r, c).diverge for c in range(clients)) for r in range(2)]
        if bad[0] <= limit < bad[1]:
            return seed
    raise AssertionError("no seed found")


def test_too_many_diverged_clients_stop_cleanly_with_the_last_good_checkpoint(tmp_path: Path, tiny_recipe: Path,
                                                                              capsys) -> None:
    seed = _seed_that_stops_in_round_2(0.5, 1, 4)
    run = tmp_path / "stopped"
    args = ["fit", "--recipe", str(tiny_recipe), f"seed={seed}", "clients.num=4", "rounds=3", "faults.diverge=0.5",
            "faults.max_bad_clients=1", *QUICK_EVAL, *SMALL_RUN, f"run.dir={run}"]
    assert main(args) == 2
    (err,) = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert err.startswith("fedlight: error: round 2:") and "faults.max_bad_clients=1" in err
    assert "(round 1) is intact" in err and "last.pt" in err
    ckpt = load_checkpoint(run / "checkpoints/last.pt")
    assert ckpt["rounds_completed"] == 1
    assert all(torch.isfinite(v).all() for v in ckpt["global"].values())
    assert json.loads((run / "results.json").read_text())["rounds_completed"] == 1
    assert ",diverged," in (run / "faults.csv").read_text().splitlines()[-1]
    # tolerating more bad clients, the run resumes from its last good checkpoint and finishes
    assert main([a if a != "faults.max_bad_clients=1" else "faults.max_bad_clients=4" for a in args] + ["--resume"]) == 0
    assert json.loads((run / "results.json").read_text())["rounds_completed"] == 3


def test_real_divergence_is_caught(tmp_path: Path, tiny_recipe: Path) -> None:
    """Not injected: a learning rate of 1e30 makes every client's loss or update NaN/Inf."""
    res = fit(load_recipe(tiny_recipe, ["local.optimizer=sgd", "local.lr=1e30", "local.epochs=3", "rounds=1", *QUICK_EVAL,
                                        *SMALL_RUN, f"run.dir={tmp_path / 'lr'}"]))
    assert res["history"][0]["diverged"] == 2 and res["history"][0]["answered"] == 0
    assert all(torch.isfinite(v).all() for v in _global(tmp_path / "lr").values())


def test_a_streaming_straggler_sees_only_its_first_arrivals(tmp_path: Path, tiny_recipe: Path) -> None:
    """velocity 192 through a 32-sample buffer: 6 arrivals a round; a half-work straggler takes 3."""
    stream = ["stream.velocity=192", "stream.stc=20", "buffer.size=32", "method={name: byol, hidden_dim: 32, output_dim: 16}"]
    res = fit(load_recipe(tiny_recipe, [*stream, "faults.straggler=1.0", "faults.straggler_work=0.5", "rounds=1",
                                        *QUICK_EVAL, f"run.dir={tmp_path / 's'}"]))
    assert res["history"][0]["stragglers"] == 2 and res["history"][0]["answered"] == 2
    clients = torch.load(tmp_path / "s/checkpoints/last.pt", weights_only=True)["clients"]
    assert [int(state["buffer.seen"]) for state in clients.values()] == [96, 96]
    rows = (tmp_path / "s/faults.csv").read_text().splitlines()[1:]
    assert rows == ["1,0,straggler,work=0.5 steps=3", "1,1,straggler,work=0.5 steps=3"]


# ---------------------------------------------------------------- a finite but exploding client

def test_an_update_beyond_the_norm_bound_is_diverged() -> None:
    """Finite is not enough: an update whose norm is over faults.max_update_ratio times the
    global model's is diverged, and so is one whose values are finite but whose squares overflow."""
    from fedlight.engine.loop.client_faults import NormBound

    global_state = {"w": torch.ones(10, 10), "steps": torch.tensor(3)}
    bound = NormBound.of(global_state, 1000.0)
    assert bound.reference == 10.0 and bound.limit == 10_000.0
    assert divergence(4.9, {"w": torch.full((10, 10), 50.0)}, bound) is None
    assert "max_update_ratio=1000" in divergence(4.9, {"w": torch.full((10, 10), 2e3)}, bound)
    assert "norm inf" in divergence(4.9, {"w": torch.full((10, 10), 2e29)}, bound)
    assert "norm inf" in divergence(4.9, {"w": torch.full((10, 10), 2e29)})  # unbounded, still caught
    assert divergence(4.9, {"similarity": torch.full((10, 10), 2e3)}, bound) is None  # no global counterpart


def test_a_finite_exploding_client_is_excluded_and_the_model_stays(tmp_path: Path, tiny_recipe: Path,
                                                                    capsys) -> None:
    """SGD at lr 1e30 on one batch: loss 4.9 (finite), weights near 1e29. Today it was averaged in
    and the next evaluation overflowed with no checkpoint written."""
    run = tmp_path / "boom"
    res = fit(load_recipe(tiny_recipe, ["local.optimizer=sgd", "local.lr=1e30", "data.subset=64", "clients.num=1",
                                        "partition.kind=iid", "rounds=1", *QUICK_EVAL, f"run.dir={run}"]))
    row = res["history"][0]
    assert row["train_loss"] is None and row["diverged"] == 1 and row["answered"] == 0  # no answer to average
    assert "update norm" in (run / "faults.csv").read_text()
    assert "client 0 diverged (update norm" in capsys.readouterr().err
    assert all(v.abs().max() < 1e3 for v in _global(run).values() if v.is_floating_point())


def test_an_evaluation_failure_leaves_the_round_checkpointed(tmp_path: Path, tiny_recipe: Path, capsys,
                                                             monkeypatch) -> None:
    """Evaluation after round 2 fails: one line, exit 2, and round 2 is in the checkpoint and
    results.json, so --resume goes on from it."""
    from fedlight.engine.loop.evaluator import Evaluator

    real, calls = Evaluator.model_metrics, []

    def flaky(self, *args):
        calls.append(1)
        if len(calls) == 3:  # baseline, round 1, then round 2 fails
            raise RuntimeError("value cannot be converted to type float without overflow")
        return real(self, *args)

    monkeypatch.setattr(Evaluator, "model_metrics", flaky)
    run = tmp_path / "eval"
    args = ["fit", "--recipe", str(tiny_recipe), "rounds=3", *QUICK_EVAL, *SMALL_RUN, f"run.dir={run}"]
    code = main(args)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and err.startswith("fedlight: error: round 2: evaluating the model failed (RuntimeError"), err
    assert str(run / "checkpoints/last.pt") in err and "--resume" in err
    assert load_checkpoint(run / "checkpoints/last.pt")["rounds_completed"] == 2
    assert json.loads((run / "results.json").read_text())["rounds_completed"] == 2
    assert main([*args, "--resume"]) == 0
    assert json.loads((run / "results.json").read_text())["rounds_completed"] == 3


@pytest.mark.parametrize("rounds", [1, 2])
def test_a_failed_last_evaluation_is_made_by_the_resume_not_taken_from_an_earlier_round(
        tmp_path: Path, tiny_recipe: Path, monkeypatch, rounds: int) -> None:
    """The last round's evaluation fails: the resume has no round to train, and evaluates the final model
    into that round's row (before, ``final`` was round 1's with 2 rounds, and a 1-round run never finished)."""
    from fedlight.engine.loop.evaluator import Evaluator

    real, calls = Evaluator.model_metrics, []

    def fails_last(self, *args):
        calls.append(1)
        if len(calls) == rounds + 1:  # the baseline, the rounds before, then the last round's fails
            raise RuntimeError("value cannot be converted to type float without overflow")
        return real(self, *args)

    monkeypatch.setattr(Evaluator, "model_metrics", fails_last)
    run = tmp_path / "last"
    args = ["fit", "--recipe", str(tiny_recipe), f"rounds={rounds}", *QUICK_EVAL, *SMALL_RUN, f"run.dir={run}"]
    assert main(args) == 2
    assert load_checkpoint(run / "checkpoints/last.pt")["history"][-1]["knn_acc"] is None
    assert main([*args, "--resume"]) == 0 and len(calls) == rounds + 2
    results = json.loads((run / "results.json").read_text())
    last = results["history"][-1]
    assert last["knn_acc"] is not None and results["final"]["knn_acc"] == last["knn_acc"]
    assert load_checkpoint(run / "checkpoints/last.pt")["history"][-1]["knn_acc"] == last["knn_acc"]
    assert main([*args, "--resume"]) == 0 and len(calls) == rounds + 2  # finished: nothing evaluated again
