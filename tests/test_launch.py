"""The local-rank launcher of one-node multi-process runs (fedlight/engine/run/launch.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedlight.engine.run import launch

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("devices,nodes,env", [(1, 1, {}), (2, 2, {"SLURM_NTASKS": "4"}), (2, 1, {"SLURM_NTASKS": "2"}),
                                               (2, 1, {"LOCAL_RANK": "0"}), (2, 1, {"TORCHELASTIC_RUN_ID": "x"})])
def test_nothing_started_for_one_process_many_nodes_or_an_external_launcher(
        monkeypatch: pytest.MonkeyPatch, devices: int, nodes: int, env: dict[str, str]) -> None:
    for key in launch.EXTERNAL_LAUNCH:
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    before = dict(os.environ)
    assert launch.start_local_ranks(devices, nodes, ["fit", "--recipe", "x.yaml"]) == []
    assert dict(os.environ) == before


def test_a_user_error_after_launch_is_said_once_and_every_rank_exits(tmp_path: Path, tiny_recipe: Path) -> None:
    """A method option the method refuses is found once both ranks run (missing data is refused
    before they start, with no torch imported): one line, exit 2, no rank left waiting."""
    env = {k: v for k, v in os.environ.items() if k not in launch.EXTERNAL_LAUNCH}
    cmd = [sys.executable, "-m", "fedlight", "fit", "--recipe", str(tiny_recipe), "fabric.devices=2",
           "fabric.threads=1", "method.no_such_option=1"]
    proc = subprocess.run(cmd, env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("fedlight: error:")]
    assert len(errors) == 1 and "method.no_such_option" in errors[0], proc.stderr[-2000:]


def test_a_failed_rank_ends_rank_zero_instead_of_leaving_it_waiting(tmp_path: Path) -> None:
    """Rank 1 fails at once (no such recipe); rank 0, standing in for one blocked in a collective,
    is killed after the grace period rather than waiting forever."""
    code = ("import time; from fedlight.engine.run import launch; launch.GRACE_SECONDS = 0.5; "
            f"launch.start_local_ranks(2, 1, ['fit', '--recipe', {str(tmp_path / 'missing.yaml')!r}]); time.sleep(60)")
    env = {k: v for k, v in os.environ.items() if k not in launch.EXTERNAL_LAUNCH}
    proc = subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert "missing.yaml" not in proc.stderr  # the child's user error is left to rank 0


@pytest.mark.parametrize("devices,nodes", [(1, 2), (2, 2), (4, 8)])
def test_several_nodes_without_a_launcher_fail_fast(tmp_path: Path, tiny_recipe: Path, devices: int,
                                                    nodes: int) -> None:
    """Today rank 0 waited at 'Initializing distributed' forever for ranks nobody started."""
    env = {k: v for k, v in os.environ.items() if k not in launch.EXTERNAL_LAUNCH}
    run = tmp_path / "run"
    try:
        proc = subprocess.run([sys.executable, "-m", "fedlight", "fit", "--recipe", str(tiny_recipe),
                               f"fabric.num_nodes={nodes}", f"fabric.devices={devices}", f"run.dir={run}"],
                              env={**env, "PYTHONPATH": str(Path(launch.__file__).parents[2]), "OMP_NUM_THREADS": "1"},
                              cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"fabric.num_nodes={nodes} without a launcher still waits for ranks nobody starts")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"fabric.num_nodes={nodes}" in proc.stderr and "launcher" in proc.stderr and "srun" in proc.stderr
    assert not run.exists()
