"""Shared fixtures: tiny recipes on synthetic data."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import cli_process

# Under pytest-xdist (`make test` runs PYTEST_WORKERS workers) each worker takes its share of the cores, and
# so do the processes it starts (OMP_NUM_THREADS): two workers of two threads each on two cores competed
# (`pytest -n 2` without this block took 955 s for the suite, with it 624 s, measured 2026-11-28).
if os.environ.get("PYTEST_XDIST_WORKER"):
    _threads = max(1, len(os.sched_getaffinity(0)) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    os.environ["OMP_NUM_THREADS"] = str(_threads)
    torch.set_num_threads(_threads)

# the suite loads the machine on purpose: no run warns that it is busy (tests/test_cpus.py checks the line)
os.environ["FEDLIGHT_NO_LOAD_WARNING"] = "1"

REPO = Path(__file__).resolve().parents[1]

TINY = """
defaults:
  - {repo}/configs/data/synthetic.yaml
  - {repo}/configs/model/small_cnn.yaml
  - {repo}/configs/views/simclr.yaml
seed: 3
rounds: 2
partition: {{kind: dirichlet, alpha: 1.0, min_size: 5}}
clients: {{num: 2, fraction: 1.0}}
local: {{epochs: 1, batch_size: 64, lr: 0.001}}
method: {{name: simclr, hidden_dim: 64, output_dim: 32}}
server: {{name: fedavg}}
eval: {{every: 1, probe_epochs: 20, knn_k: 20, projector_samples: 50}}
fabric: {{accelerator: cpu, devices: 1}}
"""


# overrides for a run whose point is what is logged, checkpointed or resumed, not what it learns (bit for
# bit holds or fails at any size): a small network on 400 samples, and an evaluation that costs little
SMALL_RUN = ["model.backbone=tiny_cnn", "data.subset=400"]
QUICK_EVAL = ["eval.probe_epochs=1", "eval.knn_k=5", "eval.projector_samples=0"]


KILL_AFTER_ROUND = """
import os, signal, sys
from fedlight.engine.loop.federation import Federation
from fedlight.cli import main
logged = Federation._log_and_save
def log_and_save(self, *args, **kwargs):  # the round logged (and saved only if a checkpoint was due): kill -9
    logged(self, *args, **kwargs)
    if self.run_state.rounds_done == {rounds}:
        os.kill(os.getpid(), signal.SIGKILL)
Federation._log_and_save = log_and_save
sys.exit(main(sys.argv[1:]))
"""


def fit_killed_after(rounds: int, tmp_path: Path, args: list[str]) -> None:
    """``fedlight fit ARGS`` as its own process, killed with SIGKILL once round ``rounds`` is logged."""
    script = tmp_path / f"kill_after_round_{rounds}.py"
    script.write_text(KILL_AFTER_ROUND.format(rounds=rounds))
    proc = cli_process.run_python([str(script), "fit", *args], env={**os.environ, "PYTHONPATH": str(REPO)},
                                  timeout=600)
    assert proc.returncode == -9, proc.stderr[-2000:]


@pytest.fixture
def tiny_recipe(tmp_path: Path) -> Path:
    """A 2-client x 2-round SimCLR + FedAvg recipe on synthetic data, run folder in tmp."""
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY.format(repo=REPO) + f"run: {{dir: {tmp_path / 'run'}}}\n")
    return path


@pytest.fixture
def forked_sweep_tasks(monkeypatch) -> None:
    """``fedlight sweep --executor local`` starts its tasks (``python -m fedlight fit``) forked from
    ``cli_process``'s server: processes of their own without the seconds of imports each."""
    from fedlight.sweep import local

    monkeypatch.setattr(local, "subprocess", SimpleNamespace(**{**vars(local.subprocess), "Popen": cli_process.popen}))

