"""benchmarks/gpu_check.sh and its measurements (benchmarks/gpu_bench.py), on the CPU at toy size.

The whole ``--smoke`` call starts a Python process a step (a minute on two busy cores), so the
suite checks the script's syntax and usage and runs each measurement in this process instead.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_check.sh"
sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_bench  # noqa: E402

XDEV = ["round", "--recipe", str(REPO / "benchmarks/workloads/cross_device_fmnist.yaml"), "--smoke", "--images", "100",
        "clients.num=5", "clients.fraction=1.0", "partition.kind=iid", "data.subset=null", "data.test_subset=null"]


def test_the_script_parses_and_says_its_steps() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)], check=False).returncode == 0
    helped = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True, check=False)
    assert helped.returncode == 0
    for name in ("tput-64", "tput-256", "xdev-single", "xdev-batched", "moon", "profile", "fits", "--smoke"):
        assert name in helped.stdout
    assert subprocess.run(["bash", str(SCRIPT)], capture_output=True, check=False).returncode == 2


def test_throughput_measures_both_views_and_the_plain_loop(tmp_path: Path) -> None:
    assert gpu_bench.main(["--smoke", "throughput", "--json", str(tmp_path / "t.json")]) == 0
    r = json.loads((tmp_path / "t.json").read_text())
    assert r["fedlight_views_on_device"] > 0 and r["fedlight_views_on_cpu"] > 0 and r["plain_loop"] > 0
    assert r["fedlight_best_over_plain"] > 0 and r["batch_size"] == 8


def test_round_times_each_round_and_batched_clients_unknown_or_refused_are_recorded(tmp_path: Path) -> None:
    assert gpu_bench.main([*XDEV, "--json", str(tmp_path / "r.json")]) == 0
    r = json.loads((tmp_path / "r.json").read_text())
    assert len(r["train_seconds"]) == 2 and all(t > 0 for t in r["train_seconds"]) and r["clients_per_round"] == 5
    assert gpu_bench.main([*XDEV, "--batched", "local.no_such_key=4", "--json", str(tmp_path / "b.json")]) == 0
    assert json.loads((tmp_path / "b.json").read_text())["train_seconds"] == gpu_bench.NOT_AVAILABLE
    refused = [*XDEV, "--batched", "local.batched_clients=5", "fabric.precision=bf16-mixed", "--json",
               str(tmp_path / "m.json")]
    assert gpu_bench.main(refused) == 0  # batched clients refuse mixed precision: recorded, not raised
    assert json.loads((tmp_path / "m.json").read_text())["train_seconds"].startswith(
        "refused: local.batched_clients=5 trains in full precision")


def test_report_writes_a_row_a_step_in_order(tmp_path: Path) -> None:
    steps = tmp_path / "steps"
    steps.mkdir()
    records = {"tput-64": {"step": "throughput", "batch_size": 64, "precision": "bf16-mixed", "wall_s": 20.0,
                           "fedlight_views_on_device": 9000.0, "fedlight_views_on_cpu": 7000.0, "plain_loop": 9100.0},
               "xdev-batched": {"step": "round", "recipe": "x.yaml", "batched": "local.batched_clients=100",
                                "train_seconds": gpu_bench.NOT_AVAILABLE, "wall_s": 5.0},
               "moon": {"step": "moon", "status": "timed out after 75 s"}}
    for name, record in records.items():
        (steps / f"{name}.json").write_text(json.dumps(record))
    (steps / "order.txt").write_text("\n".join(records) + "\n")
    (steps / "tput-64.seconds").write_text("31\n")
    rows = gpu_bench.report(tmp_path)
    assert [row.split(" | ")[0] for row in rows[2:]] == ["| tput-64", "| xdev-batched", "| moon"]
    assert "| 31.0 |" in rows[2] and "views on the device 9,000.0, on the CPU 7,000.0; plain loop 9,100.0" in rows[2]
    assert "not available" in rows[3] and "timed out after 75 s" in rows[4]
    assert [s["name"] for s in json.loads((tmp_path / "results.json").read_text())] == list(records)


@pytest.mark.parametrize("argv", [["round"], ["report"]])
def test_missing_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        gpu_bench.parse_args(argv)
