"""Preemption: a signal makes a run checkpoint, requeue and exit 3; --resume ends where a straight run ends."""

from __future__ import annotations

import json
import shlex
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fedlight.config import load_recipe
from fedlight.engine.loop.federation import TIMING
from fedlight.engine.loop.local_loop import train_client
from fedlight.engine.loop.preemption import Preempted
from fedlight.engine.parts.fedavg import epoch_schedule as epochs
from fedlight.engine.run.fit import fit
from fedlight.errors import PREEMPTED_EXIT

REPO = Path(__file__).resolve().parents[1]
FAST = ["rounds=5", "data.subset=400", "data.test_subset=100", "eval.probe_epochs=5", "eval.projector_samples=0",
        "model.backbone=tiny_cnn", "fabric.threads=1"]


def _global(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints/last.pt", weights_only=True)["global"]


def _strip_time(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in TIMING} for row in history]


def _wait_for(path: Path, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and not path.exists():
        time.sleep(0.02)
    assert path.exists(), f"{path} never appeared"


def _assert_same_run(a: Path, b: Path) -> None:
    ga, gb = _global(a), _global(b)
    assert ga.keys() == gb.keys() and all(torch.equal(ga[k], gb[k]) for k in ga)
    ra, rb = (json.loads((p / "results.json").read_text()) for p in (a, b))
    assert _strip_time(ra["history"]) == _strip_time(rb["history"]) and ra["final"] == rb["final"]
    assert ra["comm"] == rb["comm"] and ra["rounds_completed"] == rb["rounds_completed"] == 5


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> tuple[Path, Path]:
    """The tiny recipe run straight through, in this process: (recipe file, run folder)."""
    from conftest import TINY

    tmp = tmp_path_factory.mktemp("straight")
    recipe = tmp / "tiny.yaml"
    recipe.write_text(TINY.format(repo=REPO))
    fit(load_recipe(recipe, [*FAST, f"run.dir={tmp / 'run'}"]))
    return recipe, tmp / "run"


def test_sigusr1_to_a_subprocess_requeues_exits_3_and_resume_is_bit_exact(tmp_path: Path, straight) -> None:
    recipe, straight_run = straight
    run = tmp_path / "run"
    # inside SLURM the run calls `scontrol requeue $SLURM_JOB_ID`; this scontrol records its arguments
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'scontrol.log'}\n")
    (bin_dir / "scontrol").chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "SLURM_JOB_ID": "4242",
           "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    cmd = [sys.executable, "-m", "fedlight", "fit", "--recipe", str(recipe), *FAST, f"run.dir={run}"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for(run / "checkpoints/last.pt")
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == PREEMPTED_EXIT, err[-2000:]
    assert "preempted: checkpoint after round" in err and "SLURM job 4242 requeued" in err
    assert (tmp_path / "scontrol.log").read_text() == "requeue 4242\n"
    stopped = torch.load(run / "checkpoints/last.pt", weights_only=True)["rounds_completed"]
    assert 1 <= stopped < 5
    assert json.loads((run / "results.json").read_text())["final"] is None
    fit(load_recipe(recipe, [*FAST, f"run.dir={run}"]), resume=True)  # what the requeued task does
    _assert_same_run(run, straight_run)


def test_sigterm_between_two_clients_checkpoints_the_half_round(tmp_path: Path, straight, monkeypatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)  # never requeue a job this test runs in
    recipe, straight_run = straight
    run = tmp_path / "run"
    before = signal.getsignal(signal.SIGTERM)
    trained = []

    def train_then_signal(*args, **kwargs):  # the real local training; SIGTERM arrives during the 3rd client
        trained.append(1)
        if len(trained) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1.0)  # a slow client: its second of round 2 is in the first process only
        return train_client(*args, **kwargs)

    monkeypatch.setattr(epochs, "train_client", train_then_signal)
    with pytest.raises(Preempted) as stop:
        fit(load_recipe(recipe, [*FAST, f"run.dir={run}"]))
    assert (stop.value.rounds_done, stop.value.clients_done, stop.value.requeued) == (1, 1, None)
    assert "after round 1 and 1 clients of the next" in stop.value.describe(str(run))
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is gone once fit returns
    ckpt = torch.load(run / "checkpoints/last.pt", weights_only=True)
    assert ckpt["rounds_completed"] == 1 and [r["client"] for r in ckpt["partial"]["reports"]] == [0]
    monkeypatch.undo()
    resumed: list[int] = []

    def count(*args, **kwargs):
        resumed.append(1)
        return train_client(*args, **kwargs)

    monkeypatch.setattr(epochs, "train_client", count)
    fit(load_recipe(recipe, [*FAST, f"run.dir={run}"]), resume=True)
    assert len(resumed) == 1 + 3 * 2  # client 1 of round 2, then rounds 3-5: not a restart from round 1
    _assert_same_run(run, straight_run)
    split = json.loads((run / "results.json").read_text())["history"][1]  # round 2, in both processes
    assert split["seconds"] >= split["train_seconds"] >= 1.0  # the round's time counts its part before the stop
    assert split["seconds"] >= split["eval_seconds"] + 1.0


def test_ctrl_c_mid_round_says_one_line_exits_130_and_its_command_resumes_bit_exact(tmp_path: Path, straight) -> None:
    """Ctrl-C (SIGINT) stops the run as a preemption does: no traceback, one line naming the
    checkpoint and the exact command that continues it, exit 130; that command ends where a
    straight run ends."""
    recipe, straight_run = straight
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "fedlight", "fit", "--recipe", str(recipe), *FAST, f"run.dir={run}"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for(run / "checkpoints/last.pt")  # round 1 is saved: round 2 is under way
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    said = [line for line in err.splitlines() if "checkpoint" in line]
    assert len(said) == 1 and said[0] == err.splitlines()[-1], err
    assert said[0].startswith("fedlight: interrupted: checkpoint after round ") and f"saved in '{run}'" in said[0]
    resume = said[0].split("; continue with: ")[1]
    assert resume.endswith(shlex.join(["fedlight", "fit", "--recipe", str(recipe), *FAST, f"run.dir={run}", "--resume"]))
    # as printed, in the same shell: `fedlight ...` off an activated venv would be "command not found"
    done = subprocess.run(["bash", "-c", resume], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    _assert_same_run(run, straight_run)
