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
