"""benchmarks/drift_check.py: the v4 MOON block's drift check, on hand-made runs in reproduce.py's layout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import drift_check  # noqa: E402


def write_run(block: Path, row: str, seed: int, cka: list[float | None]) -> None:
    run = block / row / f"seed{seed}" / "runs" / f"seed={seed}"
    run.mkdir(parents=True)
    history = [{"round": r + 1, "drift_cka": c} for r, c in enumerate(cka)]
    (run / "results.json").write_text(json.dumps({"history": history}))


def test_drift_is_the_mean_over_rounds_of_one_minus_cka(tmp_path: Path) -> None:
    write_run(tmp_path, "fedavg", 3300, [0.9, None, 0.7])  # a round without the reading is skipped
    assert drift_check.drift_by_seed(tmp_path, "fedavg") == {3300: pytest.approx(0.2)}


@pytest.mark.parametrize("far, verdict", [([0.8, 0.8], "passes"),   # 0.2 and 0.2 against 0.1 and 0.1: 2x
                                          ([0.8, 0.95], "fails"),   # seed 2 drifts less than its reference
                                          ([0.86, 0.86], "fails")])  # further in both, but 1.4x < 1.5x
def test_the_check_needs_every_seed_and_one_and_a_half_times(tmp_path: Path, far: list[float], verdict: str) -> None:
    for seed, cka in zip((1, 2), far):
        write_run(tmp_path, "e10", seed, [cka])
        write_run(tmp_path, "e2", seed, [0.9])
    out = subprocess.run([sys.executable, str(BENCHMARKS / "drift_check.py"), str(tmp_path), "e10", "e2"],
                         capture_output=True, text=True, check=True).stdout
    assert f"the drift check {verdict}" in out


def write_pilot_run(block: Path, row: str, seed: int, points: dict[int, float], floor: float, cka: float) -> None:
    run = block / row / f"seed{seed}" / "runs" / f"seed={seed}"
    run.mkdir(parents=True)
    history = [{"round": r, "test_acc": p / 100, "drift_cka": cka} for r, p in points.items()]
    (run / "results.json").write_text(json.dumps({"history": history, "final": {"test_acc": history[-1]["test_acc"]},
                                                  "baseline": {"test_acc": floor / 100}}))


@pytest.mark.parametrize("step, said", [(0.1, "mean +2.00, sd 0.16"), (1.0, "mean +2.00, sd 1.58")])
def test_the_moon_pilot_reading_follows_the_plan(tmp_path: Path, step: float, said: str) -> None:
    """FedAvg at 50 + min(r, 25) points: R = 10 moves 2 (against round 8), 20 moves 4, 30 moves exactly 1
    (not under it), 40 none: R = 40; its lift over a floor of 10 is 65, so min_lift 65 / 3; MOON - FedAvg
    per seed 1.8..2.2 at R (mean 2, sd 0.16) sizes n by rule v3; a spread of 0..4 (sd 1.58) needs more than the
    cap of 24."""
    from fedlight import stats

    curve = {r: 50.0 + min(r, 25) for r in range(1, 61)}
    for i, seed in enumerate(range(3300, 3305)):
        write_pilot_run(tmp_path, "fedavg", seed, curve, 10.0, 0.8)
        write_pilot_run(tmp_path, "moon", seed, {r: p + 2 + (i - 2) * step for r, p in curve.items()}, 10.0, 0.9)
        write_pilot_run(tmp_path, "fedavg-e2", seed, curve, 10.0, 0.9)
    out = subprocess.run([sys.executable, str(BENCHMARKS / "moon_drift_pilot.py"), str(tmp_path)],
                         capture_output=True, text=True, check=True, env={"PYTHONPATH": str(BENCHMARKS.parent)}).stdout
    assert "(2.00x); fedavg drifts further in 5 of 5 seeds: the drift check passes" in out
    assert "R = 30: +1.00 against round 24; R = 40: +0.00 against round 32 -> R = 40" in out
    assert "lift 65.00" in out and "min_lift 21.67" in out
    n = stats.seeds_from_pilot([2 + (i - 2) * step for i in range(5)], 1.0, cap=24)
    assert said in out
    assert out.rstrip().endswith(f"n = {n}") if n else "n = 24 (reaches +-" in out
