"""The local-rank launcher of one-node multi-process runs (fedlight/engine/launch.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedlight.engine import launch

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("devices,nodes,env", [(1, 1, {}), (2, 2, {}), (2, 1, {"SLURM_NTASKS": "2"}),
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
    """Missing data is found once both ranks run: one line, exit 2, no rank left waiting."""
    env = {k: v for k, v in os.environ.items() if k not in launch.EXTERNAL_LAUNCH}
    cmd = [sys.executable, "-m", "fedlight", "fit", "--recipe", str(tiny_recipe), "fabric.devices=2",
           "fabric.threads=1", "data.name=fashion_mnist", f"data.root={tmp_path / 'nowhere'}"]
    proc = subprocess.run(cmd, env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("fedlight: error:")]
    assert len(errors) == 1 and "data.root" in errors[0], proc.stderr[-2000:]
