"""benchmarks/gpu_profile.py: says so and exits 0 without a GPU; its code path runs on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import cli_process

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_profile.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    """``python benchmarks/gpu_profile.py ARGS``, a process forked with torch imported (``cli_process``)."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU, even on a machine that has one
    return cli_process.run_python([str(SCRIPT), *args], env=env, cwd=REPO, timeout=120)


def test_without_cuda_it_says_so_and_exits_0() -> None:
    proc = _run()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "no CUDA device: the GPU profile needs one; nothing measured"


def test_allow_cpu_runs_the_engine_path_and_writes_sane_numbers(tmp_path: Path) -> None:
    out = tmp_path / "profile.json"
    proc = _run("--allow-cpu", "--steps", "2", "--batch-size", "8", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "images/s" in proc.stdout and "outside forward/backward" in proc.stdout
    r = json.loads(out.read_text())
    assert (r["method"], r["backbone"]) == ("simclr", "resnet18")
    assert r["steps"] == r["clients"] * 2
    assert r["images"] == r["steps"] * 8  # full batches: batch x steps
    assert r["images_per_s"] > 0 and r["wall_s"] > 0
    assert 0 <= r["share_outside_forward_backward"] <= 1
    assert r["time_s"]["forward_loss"] > 0 and r["time_s"]["backward"] > 0
    assert all(0 <= s <= 1 for s in r["share_of_wall"].values())
    assert r["peak_allocated_mib"] is None  # no CUDA, no GPU memory
