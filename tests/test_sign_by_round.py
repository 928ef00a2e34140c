"""benchmarks/sign_by_round.py: a claim's sign and each row's lift / sd by round, on hand-made runs in
reproduce.py's layout (REPRODUCTION.md's SOFed horizon table is its output)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def write_run(block: Path, row: str, seed: int, knn: float, final: bool = True) -> None:
    run = block / row / f"seed{seed}" / "runs" / f"seed={seed}"
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps({
        "history": [{"round": 8, "knn_acc": knn}], "baseline": {"knn_acc": 0.1},
        "final": {"knn_acc": knn} if final else None}))


def test_the_difference_the_seeds_ahead_and_each_rows_lift_over_sd_by_hand(tmp_path: Path) -> None:
    """a - b = 10, 10, 20 points (mean 13.33, sd 5.77, t_2 4.303: +- 14.34); a's lifts 40, 50, 60 (5.0 sd);
    b's 30, 40, 40 (36.67 / 5.77 = 6.4); an unfinished run of a fourth seed is left out."""
    for seed, (a, b) in enumerate([(0.5, 0.4), (0.6, 0.5), (0.7, 0.5)], 1):
        write_run(tmp_path, "a", seed, a)
        write_run(tmp_path, "b", seed, b)
    write_run(tmp_path, "a", 4, 0.9, final=False)
    write_run(tmp_path, "b", 4, 0.1)
    out = subprocess.run([sys.executable, str(BENCHMARKS / "sign_by_round.py"), str(tmp_path), "a", "b"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "3 seeds (1-3), knn_acc, points"
    assert out[3] == ("| 8 | 60.00 | 46.67 | +13.33 [-1.01, +27.68] | 3 of 3 | 50.00 / 10.00 = 5.0, "
                      "36.67 / 5.77 = 6.4 |")
