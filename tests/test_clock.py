"""The virtual clock: devices, traces and availability, the asynchronous event schedule, FedBuff and FedAsync
against hand computations, and runs on the clock (synchronous deadline and over-selection, FedBuff equal to
FedAvg where it must be, resumes bit for bit, bad settings in one line)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import QUICK_EVAL, SMALL_RUN, fit_killed_after
from fedlight.cli import main
from fedlight.clock.devices import Availability, ClockOptions, OnOff, TripCost, Windows, build_devices
from fedlight.clock.events import AsyncOptions, EventSchedule, staleness_weight
from fedlight.config import load_recipe
from fedlight.engine.loop.async_rounds import InFlight
from fedlight.engine.loop.federation import TIMING
from fedlight.engine.loop.sampling import sample_clients
from fedlight.engine.run.fit import fit
from fedlight.errors import UserError
from fedlight.server.asynchronous import Landed, apply_buffer, mix
from fedlight.server.fedavg import FedAvg
from fedlight.server.median import Median

CLOCK_COLUMNS = ("virtual_seconds", "round_virtual_seconds", "idle_share", "updates_applied", "updates_total")


def _global(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints/last.pt", weights_only=True)["global"]


def _history(run: Path, drop: tuple[str, ...] = ()) -> list[dict]:
    rows = json.loads((run / "results.json").read_text())["history"]
    return [{k: v for k, v in row.items() if k not in TIMING + drop} for row in rows]


def _same_model(a: Path, b: Path) -> bool:
    ga, gb = _global(a), _global(b)
    return ga.keys() == gb.keys() and all(torch.equal(ga[k], gb[k]) for k in ga)


# devices and availability

def test_a_trip_is_latency_both_ways_plus_bytes_over_bandwidth_plus_samples_times_speed() -> None:
    table = build_devices(ClockOptions(devices="fixed", seconds_per_sample=0.01, up_mbps=8, down_mbps=16,
                                       latency_s=0.5), 3, seed=0)
    # 1 + 2e6 B / 2e6 B/s + 100 x 0.01 + 1e6 B / 1e6 B/s = 1 + 1 + 1 + 1
    assert table.trip(1, 100, 2_000_000, 1_000_000) == pytest.approx(4.0)
    cost = TripCost(table, steps=lambda c: 5, batch_size=20, work=lambda r, c: 0.5, down_bytes=0, up_bytes=0)
    assert cost(2, 0) == pytest.approx(1.0 + 50 * 0.01)  # a straggler's half of 5 steps of 20


def test_device_draws_are_seeded_and_follow_their_distribution() -> None:
    lognormal = ClockOptions(devices="lognormal", seconds_per_sample=0.01, sigma=1.0)
    a, b = build_devices(lognormal, 2000, 7), build_devices(lognormal, 2000, 7)
    assert np.array_equal(a.seconds_per_sample, b.seconds_per_sample)
    assert np.median(a.seconds_per_sample) == pytest.approx(0.01, rel=0.1)
    assert np.std(np.log(a.seconds_per_sample)) == pytest.approx(1.0, rel=0.1)
    tiers = ClockOptions(devices="tiers", tiers=({"share": 0.25, "seconds_per_sample": 1.0, "up_mbps": 1.0},
                                                 {"share": 0.75, "seconds_per_sample": 3.0}))
    t = build_devices(tiers, 4000, 1)
    assert (t.seconds_per_sample == 1.0).mean() == pytest.approx(0.25, abs=0.03)
    assert set(t.up_rate[t.seconds_per_sample == 1.0]) == {1e6 / 8}  # a tier's own bandwidth, else the section's
    assert set(t.up_rate[t.seconds_per_sample == 3.0]) == {10e6 / 8}
    uniform = build_devices(ClockOptions(devices="uniform", seconds_per_sample=1, max_seconds_per_sample=2), 500, 3)
    assert 1 <= uniform.seconds_per_sample.min() and uniform.seconds_per_sample.max() <= 2


def test_on_off_availability_answers_the_same_in_any_order_and_next_online_is_online() -> None:
    forward, backward = OnOff(5, 3, 10.0, 30.0), OnOff(5, 3, 10.0, 30.0)
    times = np.linspace(0, 500, 101)
    seen = [[forward.online(c, t) for t in times] for c in range(5)]
    assert seen == [[backward.online(c, t) for t in times[::-1]][::-1] for c in range(5)]
    share = np.mean([forward.online(c, t) for c in range(5) for t in np.linspace(0, 5000, 2001)])
    assert share == pytest.approx(0.25, abs=0.08)  # online 10 of every 40 s on average
    for c in range(5):
        for t in times:
            nxt = forward.next_online(c, t)
            assert nxt >= t and forward.online(c, nxt) and (nxt == t) == forward.online(c, t)
    windows = Windows([[(0.0, 1.0), (5.0, 6.0)]])
    assert [windows.online(0, t) for t in (0, 0.5, 1, 3, 5, 6)] == [True, True, False, False, True, False]
    assert (windows.next_online(0, 2), windows.next_online(0, 7)) == (5.0, math.inf)


def _trace(tmp_path: Path, clients: list[dict]) -> str:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"clients": clients}))
    return str(path)


def test_a_trace_gives_each_client_its_device_and_windows(tmp_path: Path) -> None:
    path = _trace(tmp_path, [{"client": 1, "seconds_per_sample": 0.5, "online": [[10, 20]]},
                             {"client": 0, "seconds_per_sample": 0.25, "up_mbps": 1, "online": [[0, 5], [7, 9]]}])
    table = build_devices(ClockOptions(devices="trace", trace=path, availability="trace"), 2, 0)
    assert list(table.seconds_per_sample) == [0.25, 0.5] and table.up_rate[0] == 1e6 / 8
    assert table.availability.online(0, 8) and not table.availability.online(1, 8)
    assert table.availability.next_online(1, 8) == 10


@pytest.mark.parametrize("entries, says", [
    ([{"client": 0, "seconds_per_sample": 1}], "no entry for client 1"),
    ([{"client": 0, "seconds_per_sample": 1}, {"client": 1, "seconds_per_sample": -2}], "must be >= 0"),
    ([{"client": 0, "seconds_per_sample": 1}, {"client": 1}], "seconds_per_sample is missing"),
    ([{"client": 0, "seconds_per_sample": 1}, {"client": 1, "seconds_per_sample": 1, "speed": 3}], "'speed'"),
])
def test_a_bad_trace_is_one_line(tmp_path: Path, entries: list[dict], says: str) -> None:
    with pytest.raises(UserError, match=says):
        build_devices(ClockOptions(devices="trace", trace=_trace(tmp_path, entries)), 2, 0)


def test_trace_windows_must_be_sorted_and_disjoint(tmp_path: Path) -> None:
    path = _trace(tmp_path, [{"client": 0, "online": [[5, 9], [1, 3]]}])
    with pytest.raises(UserError, match="sorted, disjoint"):
        build_devices(ClockOptions(devices="fixed", trace=path, availability="trace"), 1, 0)


# staleness, FedBuff's buffer and FedAsync's mixing, by hand

def test_staleness_functions_are_xie_et_al_s_three() -> None:
    poly = AsyncOptions(mode="fedbuff", staleness="polynomial", staleness_a=0.5)
    hinge = AsyncOptions(mode="fedasync", staleness="hinge", staleness_a=10, staleness_b=4)
    assert [staleness_weight(poly, t) for t in (0, 3, 8)] == [1.0, 0.5, pytest.approx(1 / 3)]
    assert [staleness_weight(hinge, t) for t in (0, 4, 5, 6)] == [1.0, 1.0, 1 / 11, 1 / 21]
    assert staleness_weight(AsyncOptions(mode="fedasync", staleness="constant"), 99) == 1.0


def test_fedbuff_step_is_eta_times_weighted_staleness_scaled_changes_over_the_weights() -> None:
    x = {"w": torch.tensor([1.0, 2.0])}
    z1, z2 = {"w": torch.tensor([3.0, 2.0])}, {"w": torch.tensor([1.0, 6.0])}  # changes (2, 0) and (0, 4)
    updates = [Landed(0, 1.0, 1.0, z1), Landed(1, 3.0, 0.5, z2)]
    out = apply_buffer(FedAvg(), x, updates, server_lr=0.8)
    # x + 0.8 x (1 x 1 x (2, 0) + 3 x 0.5 x (0, 4)) / (1 + 3) = (1, 2) + 0.8 x (0.5, 1.5)
    assert torch.allclose(out["w"], torch.tensor([1.4, 3.2]))
    fresh = [Landed(0, 1.0, 1.0, z1), Landed(1, 3.0, 1.0, z2)]
    assert apply_buffer(FedAvg(), x, fresh, 1.0)["w"].tolist() == [1.5, 5.0]  # a full fresh buffer: the mean
    robust = apply_buffer(Median(), x, [*fresh, Landed(2, 1.0, 1.0, {"w": torch.tensor([9.0, 9.0])})], 1.0)
    assert robust["w"].tolist() == [3.0, 6.0]  # the rule sees the rebased models


def test_fedasync_mixes_each_landed_model_by_alpha_times_staleness() -> None:
    x, y = {"w": torch.tensor([0.0, 4.0]), "n": torch.tensor(10)}, {"w": torch.tensor([2.0, 0.0]), "n": torch.tensor(14)}
    out = mix(x, y, 0.25)
    assert out["w"].tolist() == [0.5, 3.0] and int(out["n"]) == 11


# the event schedule

def _schedule(options: AsyncOptions, seconds: dict[int, float], dropped: set[int] = frozenset(),
              availability: Availability | None = None) -> EventSchedule:
    return EventSchedule(options, sorted(seconds), 0, availability or Availability(),
                         lambda c, v: seconds[c], lambda v, c: c in dropped)


def test_events_land_in_time_order_and_fill_slots_from_the_version_of_their_moment() -> None:
    """Three clients of 1, 2 and 4 s, two in flight, a step every landed update (FedAsync)."""
    schedule = _schedule(AsyncOptions(mode="fedasync", concurrency=2), {0: 1.0, 1: 2.0, 2: 4.0})
    steps = []
    for _ in range(4):
        step = schedule.plan()
        schedule.commit()
        steps.append(([(t.client, t.version) for t in step.train], [(t.client, t.version) for t in step.applied],
                      step.now))
    first = sorted(sample_clients(0, 0, 3, 2 / 3))  # the version's first draw: a synchronous round's sample
    assert [c for c, _ in steps[0][0]] == first
    line = schedule.timeline
    assert line.version == 4 and all(t.end > line.now for t in line.flying)
    times = [now for *_, now in steps]
    assert times == sorted(times) and all(v <= i for i, (_, applied, _) in enumerate(steps) for _, v in applied)
    # every trip dispatched at version v trains in step v, and lands at start + its client's seconds
    for i, (train, _, _) in enumerate(steps):
        assert {v for _, v in train} <= {i}


def test_equal_trips_make_every_step_a_synchronous_round() -> None:
    schedule = _schedule(AsyncOptions(mode="fedbuff", concurrency=4, buffer=4), dict.fromkeys(range(10), 3.0))
    for v in range(5):
        step = schedule.plan()
        schedule.commit()
        assert [t.client for t in step.train] == sample_clients(0, v, 10, 0.4)
        assert [t.client for t in step.applied] == [t.client for t in step.train] and step.now == 3.0 * (v + 1)
        assert all(t.version == v for t in step.applied)


def test_a_dropped_client_frees_its_slot_without_filling_the_buffer() -> None:
    schedule = _schedule(AsyncOptions(mode="fedbuff", concurrency=2, buffer=2), {0: 1.0, 1: 1.0, 2: 5.0},
                         dropped={0})
    step = schedule.plan()
    assert 0 not in [t.client for t in step.applied] and len(step.applied) == 2


def test_a_plan_is_the_same_when_made_again_and_after_a_checkpoint() -> None:
    options, seconds = AsyncOptions(mode="fedbuff", concurrency=3, buffer=2), {c: 1.0 + c % 4 for c in range(8)}
    a = _schedule(options, seconds)
    for _ in range(3):
        a.plan()
        a.commit()
    b = _schedule(options, seconds)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))  # what a checkpoint keeps
    first, again = a.plan(), a.plan()
    assert first == again == b.plan()


def test_offline_clients_are_never_dispatched() -> None:
    windows = Windows([[(0.0, 100.0)], [(50.0, 100.0)], [(0.0, 100.0)]])
    schedule = _schedule(AsyncOptions(mode="fedasync", concurrency=2), {0: 10.0, 1: 10.0, 2: 10.0}, availability=windows)
    for _ in range(6):
        step = schedule.plan()
        schedule.commit()
        assert all(windows.online(t.client, t.start) for t in step.train)


def test_fedasync_over_a_short_event_sequence_matches_a_hand_computation() -> None:
    """Clients 0 (1 s) and 1 (3 s), both in flight from version 0, a step per landed model, alpha 0.5,
    s(tau) = (1 + tau)^-1. Client 0 lands at 1 s (tau 0) and again at 2 s (tau 0, from version 1); client 1
    lands at 3 s from version 0 while the server holds version 2 (tau 2)."""
    options = AsyncOptions(mode="fedasync", concurrency=2, alpha=0.5, staleness="polynomial", staleness_a=1.0)
    flight = InFlight(_schedule(options, {0: 1.0, 1: 3.0}), options, FedAvg(), {"w"})
    x = {"w": torch.tensor([0.0])}
    trained = {(0, 0): 4.0, (1, 0): 8.0, (0, 1): 2.0}  # (client, version) -> its model after training
    expected = [0.0 * 0.5 + 4.0 * 0.5]  # step 0: client 0, fresh
    expected.append(expected[0] * 0.5 + 2.0 * 0.5)  # step 1: client 0 again, from version 1
    expected.append(expected[1] * (1 - 0.5 / 3) + 8.0 * 0.5 / 3)  # step 2: client 1, two versions old
    for v in range(3):
        clients = flight.plan()
        kept = {c: (1.0, {"w": torch.tensor([trained[(c, v)]])}) for c in clients if (c, v) in trained}
        x = flight.land(kept, x)
        assert x["w"].item() == pytest.approx(expected[v])
    assert flight.staleness == [2]


# runs on the clock

def _fit(tiny_recipe: Path, run: Path, *overrides: str, resume: bool = False) -> dict:
    return fit(load_recipe(tiny_recipe, ["clients.num=6", *QUICK_EVAL, *SMALL_RUN, "fabric.threads=1",
                                         f"run.dir={run}", *overrides]), resume=resume)


def test_the_clock_alone_changes_no_number_and_adds_virtual_time(tmp_path: Path, tiny_recipe: Path) -> None:
    _fit(tiny_recipe, tmp_path / "plain", "rounds=3", "clients.fraction=0.5")
    _fit(tiny_recipe, tmp_path / "clock", "rounds=3", "clients.fraction=0.5", "clock.devices=lognormal")
    assert _history(tmp_path / "plain") == _history(tmp_path / "clock", CLOCK_COLUMNS)
    assert _same_model(tmp_path / "plain", tmp_path / "clock")
    rows = _history(tmp_path / "clock")
    assert [r["virtual_seconds"] for r in rows] == pytest.approx(np.cumsum([r["round_virtual_seconds"] for r in rows]))
    assert all(0 <= r["idle_share"] < 1 for r in rows)
    assert [r["updates_total"] for r in rows] == list(np.cumsum([r["answered"] for r in rows]))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "clock" / "tensorboard"))
    events.Reload()
    knn = events.Scalars("vs_virtual_seconds/knn_acc")
    assert [e.step for e in knn] == [round(r["virtual_seconds"]) for r in rows]
    assert [e.step for e in events.Scalars("vs_updates_applied/knn_acc")] == [r["updates_total"] for r in rows]
    assert {"clock/virtual_hours", "clock/idle_share"} <= set(events.Tags()["scalars"])


def test_a_resumed_run_keeps_its_curves_against_virtual_time(tmp_path: Path, tiny_recipe: Path) -> None:
    """TensorBoard's purge at round 3 drops every earlier event at a step of 3 or more, whatever its tag: the
    kept rounds' points against seconds and updates are drawn again after it."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, slow = tmp_path / "run", ["clock.devices=fixed", "clock.seconds_per_sample=0.05"]  # rounds of seconds
    _fit(tiny_recipe, run, "rounds=2", *slow)
    _fit(tiny_recipe, run, "rounds=4", *slow, resume=True)
    rows = _history(run)
    assert rows[0]["virtual_seconds"] >= 3  # so the purge would drop it
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    seconds = sorted({e.step for e in events.Scalars("vs_virtual_seconds/knn_acc")})
    assert seconds == [round(r["virtual_seconds"]) for r in rows]
    assert sorted({e.step for e in events.Scalars("vs_updates_applied/knn_acc")}) == [r["updates_total"] for r in rows]


def test_a_deadline_drops_late_clients_and_over_selection_keeps_the_first_to_land(tmp_path: Path,
                                                                               tiny_recipe: Path) -> None:
    run = tmp_path / "deadline"
    _fit(tiny_recipe, run, "rounds=2", "clock.devices=lognormal", "clock.sigma=2", "clock.deadline_s=2.5",
         "clock.seconds_per_sample=0.02")
    rows, faults = _history(run), (run / "faults.csv").read_text().splitlines()[1:]
    late = [line for line in faults if "clock.deadline_s=2.5" in line]
    assert late and sum(r["dropped"] for r in rows) == len(late)
    assert all(r["round_virtual_seconds"] == 2.5 for r in rows if r["dropped"])
    over = tmp_path / "over"
    _fit(tiny_recipe, over, "rounds=2", "clients.fraction=0.5", "clock.devices=lognormal", "clock.over_selection=0.5")
    for row in _history(over):
        assert len(row["clients"]) == 5 and row["answered"] == 3 and row["dropped"] == 2  # ceil(3 x 1.5), first 3


def test_fedbuff_with_a_full_buffer_of_equal_trips_is_synchronous_fedavg_bit_for_bit(tmp_path: Path,
                                                                                      tiny_recipe: Path) -> None:
    equal = ["clock.devices=fixed", "clock.seconds_per_sample=0", "rounds=3", "clients.fraction=0.5"]
    _fit(tiny_recipe, tmp_path / "sync", *equal)
    _fit(tiny_recipe, tmp_path / "buff", *equal, "asynchrony.mode=fedbuff", "asynchrony.concurrency=3",
         "asynchrony.buffer=3")
    assert _same_model(tmp_path / "sync", tmp_path / "buff")
    async_only = ("staleness", "staleness_mean", "staleness_max", "round_virtual_seconds", "idle_share")
    assert _history(tmp_path / "sync", async_only) == _history(tmp_path / "buff", async_only)
    assert all(r["staleness"] == [0, 0, 0] for r in _history(tmp_path / "buff"))


ASYNC = ["clock.devices=lognormal", "asynchrony.mode=fedbuff", "asynchrony.concurrency=4", "asynchrony.buffer=2"]


def test_fedbuff_resumed_ends_where_a_straight_run_ends_and_workers_change_no_event(tmp_path: Path,
                                                                                   tiny_recipe: Path) -> None:
    _fit(tiny_recipe, tmp_path / "straight", "rounds=4", *ASYNC)
    _fit(tiny_recipe, tmp_path / "split", "rounds=2", *ASYNC)
    _fit(tiny_recipe, tmp_path / "split", "rounds=4", *ASYNC, resume=True)
    assert _same_model(tmp_path / "straight", tmp_path / "split")
    assert _history(tmp_path / "straight") == _history(tmp_path / "split")
    staleness = [r["staleness"] for r in _history(tmp_path / "straight")]
    assert any(any(s) for s in staleness)  # the setting is asynchronous: some update is stale
    _fit(tiny_recipe, tmp_path / "workers", "rounds=4", *ASYNC, "fabric.workers=2", "fabric.threads=2")
    events = ("clients", "staleness", "virtual_seconds", "updates_applied")
    assert ([{k: r[k] for k in events} for r in _history(tmp_path / "workers")]
            == [{k: r[k] for k in events} for r in _history(tmp_path / "straight")])


def test_fedbuff_killed_between_two_checkpoints_resumes_from_the_earlier_and_ends_bit_for_bit(
        tmp_path: Path, tiny_recipe: Path) -> None:
    """run.checkpoint_every=2: a kill -9 after step 3 resumes from step 2's checkpoint (its updates in flight, the
    event schedule and the clock) and ends where a straight run saving every step ends."""
    _fit(tiny_recipe, tmp_path / "straight", "rounds=4", *ASYNC)
    run = tmp_path / "killed"
    fit_killed_after(3, tmp_path, ["--recipe", str(tiny_recipe), "clients.num=6", *QUICK_EVAL, *SMALL_RUN,
                                   "fabric.threads=1", "rounds=4", *ASYNC, "run.checkpoint_every=2", f"run.dir={run}"])
    assert torch.load(run / "checkpoints/last.pt", weights_only=True)["rounds_completed"] == 2
    _fit(tiny_recipe, run, "rounds=4", *ASYNC, "run.checkpoint_every=2", resume=True)
    assert _same_model(tmp_path / "straight", run)
    assert _history(tmp_path / "straight") == _history(run)


@pytest.mark.parametrize("overrides, says", [
    (["clock.deadline_s=3"], "clock.deadline_s needs the virtual clock"),
    (["asynchrony.mode=fedbuff"], "set clock.devices"),
    (["clock.devices=fixed", "asynchrony.mode=fedbuff", "asynchrony.concurrency=7"], "above the 6 clients"),
    (["clock.devices=fixed", "asynchrony.mode=fedasync", "asynchrony.concurrency=2", "server.name=median"],
     "server.name=fedavg"),
    (["clock.devices=fixed", "asynchrony.mode=fedbuff", "asynchrony.concurrency=2", "method.name=scaffold",
      "server.name=scaffold"], "control variates"),
    (["clock.devices=fixed", "asynchrony.mode=fedbuff", "asynchrony.concurrency=2", "clock.deadline_s=5"],
     "synchronous rounds"),
    (["clock.devices=fixed", "asynchrony.mode=fedbuff", "asynchrony.concurrency=2", "new_device.rotation=90"],
     "new_device.rotation joins a device in a synchronous round"),
    (["clock.devices=fixed", "asynchrony.mode=fedbuff", "asynchrony.concurrency=2", "faults.attack=alie",
      "faults.attackers=0.5"], "faults.attack=alie crafts its payload"),
    (["clock.devices=fixed", "asynchrony.mode=fedbuff", "asynchrony.concurrency=2", "asynchrony.buffer=7"],
     "asynchrony.buffer=7 is above the 6 clients"),
    (["clock.devices=fixed", "asynchrony.mode=fedbuff", "asynchrony.concurrency=3", "asynchrony.buffer=2",
      "server={name: krum, f: 1}"], "a step aggregates asynchrony.buffer=2 updates"),
    (["clock.devices=fixed", "asynchrony.mode=fedbuff", "asynchrony.concurrency=6", "asynchrony.buffer=6",
      "run.payload_budget_mb=1"], "holds every update in flight or in its buffer"),
    (["clock.devices=fixed", "clock.availability=markov", "new_device.rotation=90"],
     "new_device.rotation chooses each round's clients itself"),
    (["clock.devices=uniform"], "max_seconds_per_sample"),
    (["clock.devices=trace"], "clock.trace"),
    (["clock.devices=fixed", "clock.seconds_per_sample=-1"], "clock.seconds_per_sample"),
])
def test_bad_clock_settings_are_one_line_before_anything_is_written(tmp_path: Path, tiny_recipe: Path, capsys,
                                                                    overrides: list[str], says: str) -> None:
    run = tmp_path / "run"
    code = main(["fit", "--recipe", str(tiny_recipe), "clients.num=6", f"run.dir={run}", *overrides])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and says in err[0], err
    assert not run.exists()


def test_a_bad_trace_file_is_refused_before_anything_is_written(tmp_path: Path, tiny_recipe: Path, capsys) -> None:
    trace = _trace(tmp_path, [{"client": c, "seconds_per_sample": 1} for c in range(5)])  # client 5 has none
    run = tmp_path / "run"
    code = main(["fit", "--recipe", str(tiny_recipe), "clients.num=6", f"run.dir={run}", "clock.devices=trace",
                 f"clock.trace={trace}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "no entry for client 5" in err[0], err
    assert not run.exists()


def test_a_stop_between_two_clients_of_a_step_resumes_bit_for_bit(tmp_path: Path, tiny_recipe: Path,
                                                                   monkeypatch) -> None:
    """SIGTERM during a step's second client: the checkpoint holds the step's first client, the updates in
    flight, the event schedule and the clock; the resume ends where a straight run ends."""
    import os
    import signal

    from fedlight.engine.loop.local_loop import train_client
    from fedlight.engine.loop.preemption import Preempted
    from fedlight.engine.parts.fedavg import epoch_schedule as epochs

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    clocked = [*ASYNC, "clock.availability=markov", "clock.online_s=2", "clock.offline_s=1"]
    _fit(tiny_recipe, tmp_path / "straight", "rounds=4", *clocked)
    first, second = (len(row["clients"]) for row in _history(tmp_path / "straight")[:2])
    assert second >= 2
    trained = []

    def train_then_signal(*args, **kwargs):
        trained.append(1)
        if len(trained) == first + 1:  # step 2's first client: the run stops before its second
            os.kill(os.getpid(), signal.SIGTERM)
        return train_client(*args, **kwargs)

    monkeypatch.setattr(epochs, "train_client", train_then_signal)
    with pytest.raises(Preempted) as stop:
        _fit(tiny_recipe, tmp_path / "split", "rounds=4", *clocked)
    assert (stop.value.rounds_done, stop.value.clients_done) == (1, 1)
    monkeypatch.undo()
    _fit(tiny_recipe, tmp_path / "split", "rounds=4", *clocked, resume=True)
    assert _same_model(tmp_path / "straight", tmp_path / "split")
    assert _history(tmp_path / "straight") == _history(tmp_path / "split")


def test_a_synchronous_clock_resumes_where_it_stopped(tmp_path: Path, tiny_recipe: Path) -> None:
    clocked = ["clock.devices=tiers", "clock.tiers=[{share: 0.5, seconds_per_sample: 0.001}, "
               "{share: 0.5, seconds_per_sample: 0.05}]", "clock.availability=markov", "clock.online_s=30",
               "clients.fraction=0.5"]
    _fit(tiny_recipe, tmp_path / "straight", "rounds=3", *clocked)
    _fit(tiny_recipe, tmp_path / "split", "rounds=1", *clocked)
    _fit(tiny_recipe, tmp_path / "split", "rounds=3", *clocked, resume=True)
    assert _history(tmp_path / "straight") == _history(tmp_path / "split")


def test_a_trace_that_ends_stops_the_run_in_one_line(tmp_path: Path, tiny_recipe: Path, capsys) -> None:
    trace = _trace(tmp_path, [{"client": c, "online": [[0, 0.5]]} for c in range(6)])
    run = tmp_path / "run"
    code = main(["fit", "--recipe", str(tiny_recipe), "clients.num=6", "rounds=3", *QUICK_EVAL, *SMALL_RUN,
                 f"run.dir={run}", "clock.devices=fixed", "clock.availability=trace", f"clock.trace={trace}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "none comes online again" in err[-1]


def test_two_ranks_see_the_same_events_as_one(tmp_path: Path, tiny_recipe: Path) -> None:
    """The event schedule is planned from no training result: two processes deal each step's clients
    between them and land the same updates at the same virtual seconds as one."""
    import subprocess
    import sys

    common = ["clients.num=6", *QUICK_EVAL, *SMALL_RUN, "fabric.threads=1", "rounds=3", *ASYNC]
    _fit(tiny_recipe, tmp_path / "one", "rounds=3", *ASYNC)
    done = subprocess.run([sys.executable, "-m", "fedlight", "fit", "--recipe", str(tiny_recipe), *common,
                           "fabric.devices=2", "fabric.accelerator=cpu", f"run.dir={tmp_path / 'two'}"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    events = ("clients", "staleness", "virtual_seconds", "updates_applied")
    assert ([{k: r[k] for k in events} for r in _history(tmp_path / "two")]
            == [{k: r[k] for k in events} for r in _history(tmp_path / "one")])
    one, two = _global(tmp_path / "one"), _global(tmp_path / "two")
    assert all(torch.allclose(one[k].float(), two[k].float(), atol=1e-5) for k in one)
