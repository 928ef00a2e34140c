"""Real SLURM (one node on 127.0.0.1): a sweep as an array job, preemption + requeue, srun over 2 ranks.

The cluster is started once for the module (tests/slurm_cluster.py) and stopped by PID at
the end. Skipped, with the reason, only where SLURM and munge are not installed or not root.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from slurm_cluster import SlurmCluster, unavailable

REPO = Path(__file__).resolve().parents[1]
REASON = unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=str(REASON))

# seconds, on a quiet CPU; generous so a loaded machine still passes
TIMEOUT = 240
RECIPE = """
defaults:
  - {repo}/configs/data/synthetic.yaml
seed: 1
rounds: {rounds}
data: {{subset: 240, test_subset: 60}}
model: {{backbone: tiny_cnn}}
partition: {{kind: dirichlet, alpha: 1.0, min_size: 5}}
clients: {{num: {clients}, fraction: 1.0}}
local: {{epochs: 1, batch_size: 32, lr: 0.001}}
method: {{name: simclr, hidden_dim: 32, output_dim: 16}}
server: {{name: fedavg}}
eval: {{every: 1, probe_epochs: 5, knn_k: 5, projector_samples: 0}}
fabric: {{accelerator: cpu, devices: 1, threads: 1}}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> SlurmCluster:
    c = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        yield c.start()
    finally:
        c.stop()


def _recipe(folder: Path, rounds: int = 1, clients: int = 2) -> Path:
    path = folder / "tiny.yaml"
    path.write_text(RECIPE.format(repo=REPO, rounds=rounds, clients=clients))
    return path


def _env(cluster: SlurmCluster) -> dict[str, str]:
    return {**cluster.env, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def _fedlight(cluster: SlurmCluster, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "fedlight", *args], env=_env(cluster), capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _wait_until_gone(cluster: SlurmCluster, job: str) -> None:
    """Wait (bounded) until no task of ``job`` is pending or running."""
    deadline = time.time() + TIMEOUT
    while time.time() < deadline:
        queue = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i %T"], env=cluster.env, capture_output=True,
                               text=True, timeout=30).stdout.strip()
        if not queue:
            return
        time.sleep(0.5)
    pytest.fail(f"job {job} still queued after {TIMEOUT} s:\n{queue}\n{cluster.logs()}")


def _job_field(cluster: SlurmCluster, job: str, key: str) -> str:
    text = subprocess.run(["scontrol", "show", "job", job], env=cluster.env, capture_output=True, text=True,
                          timeout=30).stdout
    return next(w.split("=", 1)[1] for w in text.split() if w.startswith(f"{key}="))


def _results(run: Path) -> dict:
    return json.loads((run / "results.json").read_text())


def test_sweep_runs_as_an_array_job_and_is_reported(cluster: SlurmCluster, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    submitted = _fedlight(cluster, "sweep", "--recipe", str(_recipe(tmp_path)), "--grid", "partition.alpha=0.5,5,50",
                          "--out", str(out), "--submit", "--max-running", "3")
    assert "submitted array job" in submitted.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    (submission,) = manifest["submissions"]
    assert submission["tasks"] == [0, 1, 2] and "--array=0-2%3" in submission["command"]
    _wait_until_gone(cluster, submission["job_id"])
    logs = "\n".join(p.read_text() for p in sorted((out / "logs").glob("*.out")))
    for i, alpha in enumerate((0.5, 5.0, 50.0)):
        res = _results(out / f"runs/{i:04d}")
        assert res["final"] is not None and res["rounds_completed"] == 1, logs[-3000:]
        assert res["recipe"]["partition"]["alpha"] == alpha and res["recipe"]["run"]["dir"] == str(out / f"runs/{i:04d}")
    again = _fedlight(cluster, "sweep", "--recipe", str(_recipe(tmp_path)), "--grid", "partition.alpha=0.5,5,50",
                      "--out", str(out), "--submit", "--resubmit-failed")
    assert "3 finished" in again.stdout and "0 to submit now" in again.stdout
    assert len(json.loads((out / "manifest.json").read_text())["submissions"]) == 1
    _fedlight(cluster, "report", str(out))
    report = (out / "report.md").read_text()
    assert "| partition.alpha | seeds |" in report
    assert all(f"| {a} | 1 |" in report for a in ("0.5", "5.0", "50.0"))
    assert (out / "accuracy_vs_round.png").stat().st_size > 0 and (out / "accuracy_vs_bytes.png").stat().st_size > 0


def test_usr1_before_the_time_limit_requeues_and_the_task_resumes(cluster: SlurmCluster, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    rounds = 12
    _fedlight(cluster, "sweep", "--recipe", str(_recipe(tmp_path, rounds=rounds)), "--out", str(out), "--submit")
    job = json.loads((out / "manifest.json").read_text())["submissions"][0]["job_id"]
    checkpoint = out / "runs/0000/checkpoints/last.pt"
    deadline = time.time() + TIMEOUT
    while time.time() < deadline and not checkpoint.exists():
        time.sleep(0.05)
    # what `#SBATCH --signal=B:USR1@120` does 120 s before the time limit
    subprocess.run(["scancel", "--batch", "--signal=USR1", f"{job}_0"], env=cluster.env, check=True, timeout=30)
    _wait_until_gone(cluster, job)
    log = "\n".join(p.read_text() for p in (out / "logs").glob("*.out"))
    assert "preempted: checkpoint after round" in log and f"requeued" in log, log[-3000:]
    assert "restart 1" in log and "--resume" in log, log[-3000:]
    res = _results(out / "runs/0000")
    assert res["rounds_completed"] == rounds and res["final"] is not None
    assert [row["round"] for row in res["history"]] == list(range(1, rounds + 1))
    assert _job_field(cluster, f"{job}_0", "Restarts") == "1"


def test_srun_over_two_ranks_matches_one_process(cluster: SlurmCluster, tmp_path: Path) -> None:
    from fedlight.config import load_recipe
    from fedlight.engine.fit import fit

    recipe = _recipe(tmp_path, rounds=2, clients=4)
    two = tmp_path / "two"
    # the multi-node template on one node: 2 srun tasks = 2 gloo ranks, Fabric reads SLURM's environment
    submit = subprocess.run(["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2", "--gpus-per-node=0",
                             "--cpus-per-task=1", "--time=10", f"--output={tmp_path / 'multinode.out'}",
                             str(REPO / "slurm/multinode.sbatch"), str(recipe), f"run.dir={two}"],
                            env={**_env(cluster), "PYTHON": sys.executable}, capture_output=True, text=True, timeout=30)
    assert submit.returncode == 0, submit.stderr
    fit(load_recipe(recipe, [f"run.dir={tmp_path / 'one'}"]))  # meanwhile, the 1-process run here
    _wait_until_gone(cluster, submit.stdout.strip())
    log = (tmp_path / "multinode.out").read_text()
    assert (two / "results.json").is_file(), log[-3000:]
    assert _results(two)["recipe"]["fabric"]["devices"] == 2
    one_g = torch.load(tmp_path / "one/checkpoints/last.pt", weights_only=True)["global"]
    two_g = torch.load(two / "checkpoints/last.pt", weights_only=True)["global"]
    for k in one_g:
        assert torch.allclose(one_g[k].double(), two_g[k].double(), atol=1e-5, rtol=1e-4), k
    assert _results(two)["comm"] == _results(tmp_path / "one")["comm"]
