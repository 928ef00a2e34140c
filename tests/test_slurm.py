"""Real SLURM (two nodes on this host, both at 127.0.0.1): a sweep as an array job with preemption +
requeue, and slurm/multinode.sbatch over one node and over two, with a requeue across both.

The cluster is started once for the module (tests/slurm_cluster.py) and stopped by PID at
the end. Skipped, with the reason, only where SLURM and munge are not installed or not root.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fedlight.cli import main
from fedlight.engine.loop.federation import TIMING
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
eval: {{every: {every}, probe_epochs: 5, knn_k: 5, projector_samples: 0}}
fabric: {{accelerator: cpu, devices: 1, threads: 1}}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> SlurmCluster:
    c = SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes=2)
    try:
        yield c.start()
    finally:
        c.stop()


def _recipe(folder: Path, rounds: int = 1, clients: int = 2, every: int = 1) -> Path:
    path = folder / "tiny.yaml"
    path.write_text(RECIPE.format(repo=REPO, rounds=rounds, clients=clients, every=every))
    return path


def _env(cluster: SlurmCluster) -> dict[str, str]:
    return {**cluster.env, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def _wait_until_gone(cluster: SlurmCluster, job: str) -> None:
    """Wait (bounded) until no task of ``job`` is pending or running."""
    deadline = time.time() + TIMEOUT
    while time.time() < deadline:
        queue = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i %T"], env=cluster.env, capture_output=True,
                               text=True, timeout=30).stdout.strip()
        if not queue:
            return
        time.sleep(0.3)
    pytest.fail(f"job {job} still queued after {TIMEOUT} s:\n{queue}\n{cluster.logs()}")


def _job_field(cluster: SlurmCluster, job: str, key: str) -> str:
    text = subprocess.run(["scontrol", "show", "job", job], env=cluster.env, capture_output=True, text=True,
                          timeout=30).stdout
    return next(w.split("=", 1)[1] for w in text.split() if w.startswith(f"{key}="))


def _results(run: Path) -> dict:
    return json.loads((run / "results.json").read_text())


def _global(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints/last.pt", weights_only=True)["global"]


def test_sweep_on_slurm_with_a_preempted_task_then_report(cluster: SlurmCluster, tmp_path: Path, monkeypatch,
                                                          capsys) -> None:
    from fedlight.config import load_recipe
    from fedlight.engine.run.fit import fit

    for key, value in _env(cluster).items():  # sbatch hands the submitting environment to the tasks
        monkeypatch.setenv(key, value)
    out, rounds = tmp_path / "sweep", 10
    sweep = ["sweep", "--recipe", str(_recipe(tmp_path, rounds=rounds, every=rounds)),
             "--grid", "partition.alpha=0.5,5,50", "--out", str(out), "--submit"]
    assert main([*sweep, "--max-running", "3"]) == 0
    assert "submitted array job" in capsys.readouterr().out
    (submission,) = json.loads((out / "manifest.json").read_text())["submissions"]
    job = submission["job_id"]
    assert submission["tasks"] == [0, 1, 2] and "--array=0-2%3" in submission["command"]
    assert main([*sweep, "--resubmit-failed"]) == 0  # all three are pending or running: none goes twice
    assert "0 to submit now" in capsys.readouterr().out

    # task 0 gets what `#SBATCH --signal=B:USR1@120` sends 120 s before its time limit
    names = [f"alpha={a}_seed=1" for a in ("0.5", "5", "50")]  # run folders named by their grid values
    assert (out / "tasks.txt").read_text().splitlines() == names
    checkpoint = out / "runs" / names[0] / "checkpoints/last.pt"
    deadline = time.time() + TIMEOUT
    while time.time() < deadline and not checkpoint.exists():
        time.sleep(0.05)
    subprocess.run(["scancel", "--batch", "--signal=USR1", f"{job}_0"], env=cluster.env, check=True, timeout=30)
    fit(load_recipe(out / "recipes" / f"{names[0]}.yaml", [f"run.dir={tmp_path / 'straight'}"]))  # meanwhile, uninterrupted
    _wait_until_gone(cluster, job)

    log = (out / f"logs/{job}_0.out").read_text()
    assert "preempted: checkpoint after round" in log and "SLURM job" in log and "requeued" in log, log[-3000:]
    assert "restart 1" in log and "--resume" in log, log[-3000:]
    assert _job_field(cluster, f"{job}_0", "Restarts") == "1"
    straight, resumed = _global(tmp_path / "straight"), _global(out / "runs" / names[0])
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)  # requeued = uninterrupted, bit for bit
    for i, alpha in enumerate((0.5, 5.0, 50.0)):
        res = _results(out / "runs" / names[i])
        assert res["final"] is not None and res["rounds_completed"] == rounds
        assert [row["round"] for row in res["history"]] == list(range(1, rounds + 1))
        assert res["recipe"]["partition"]["alpha"] == alpha and res["recipe"]["run"]["dir"] == str(out / "runs" / names[i])

    assert main([*sweep, "--resubmit-failed"]) == 0  # nothing left to run: nothing submitted
    assert "3 finished" in capsys.readouterr().out
    assert len(json.loads((out / "manifest.json").read_text())["submissions"]) == 1
    assert main(["report", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "| partition.alpha | seeds |" in report
    assert all(f"| {a} | 1 |" in report for a in ("0.5", "5.0", "50.0"))
    assert all((out / f"{m}_vs_{kind}.png").stat().st_size > 0 for m in ("linear_probe_acc@1", "knn_acc@1")
               for kind in ("round", "bytes"))


def _submit_multinode(cluster: SlurmCluster, recipe: Path, overrides: list[str], run: Path, nodes: int) -> str:
    """``sbatch slurm/multinode.sbatch`` of 2 ranks over ``nodes`` nodes; returns the job id."""
    with socket.socket() as s:  # a port of its own, not 15000 + the job id, which another test cluster may use
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    submit = subprocess.run(["sbatch", "--parsable", f"--nodes={nodes}", f"--ntasks-per-node={2 // nodes}",
                             "--gpus-per-node=0", "--cpus-per-task=1", "--time=10", f"--output={run}.out",
                             str(REPO / "slurm/multinode.sbatch"), str(recipe), *overrides, f"run.dir={run}"],
                            env={**_env(cluster), "PYTHON": sys.executable, "MASTER_PORT": str(port)},
                            capture_output=True, text=True, timeout=30)
    assert submit.returncode == 0, submit.stderr
    return submit.stdout.strip()


def _assert_same_run(a: Path, b: Path) -> None:
    """Bit for bit: the global model, every history row (but its seconds), the final metrics, the bytes."""
    ga, gb = _global(a), _global(b)
    assert ga.keys() == gb.keys() and all(torch.equal(ga[k], gb[k]) for k in ga)
    ra, rb = _results(a), _results(b)
    assert [{k: v for k, v in row.items() if k not in TIMING} for row in ra["history"]] == \
        [{k: v for k, v in row.items() if k not in TIMING} for row in rb["history"]]
    assert ra["final"] == rb["final"] and ra["comm"] == rb["comm"] and ra["rounds_completed"] == rb["rounds_completed"]


@pytest.mark.skipif(not Path("/usr/share/datasets/fashion-mnist").is_dir(),
                    reason="the quickstart recipe needs Debian's dataset-fashion-mnist (scripts/setup.sh)")
def test_two_nodes_equal_one_node_and_a_requeue_across_both_resumes_to_the_same_numbers(cluster: SlurmCluster,
                                                                                         tmp_path: Path) -> None:
    """slurm/multinode.sbatch on the quickstart recipe at tiny size with 2 ranks on one node, 2 ranks
    on two nodes, and 2 ranks on two nodes that get SIGUSR1 (what --signal=USR1@120 sends every
    rank) after their first round: the two-node runs equal the one-node run bit for bit, the
    preempted one after its requeue too, and the one-node run equals a 1-process run within float tolerance."""
    from fedlight.config import load_recipe
    from fedlight.engine.run.fit import fit

    recipe, rounds = REPO / "recipes/quickstart_fmnist.yaml", 4
    tiny = [f"rounds={rounds}", "data.subset=240", "data.test_subset=60", "model.backbone=tiny_cnn", "clients.num=4",
            "local.batch_size=32", "eval.every=4", "eval.probe_epochs=5", "eval.knn_k=5", "eval.projector_samples=0",
            "fabric.accelerator=cpu", "fabric.threads=1"]
    one_node, two_nodes, preempted = tmp_path / "one_node", tmp_path / "two_nodes", tmp_path / "preempted"
    jobs = {run: _submit_multinode(cluster, recipe, tiny, run, nodes)
            for run, nodes in ((preempted, 2), (two_nodes, 2), (one_node, 1))}
    deadline = time.time() + TIMEOUT
    while time.time() < deadline and not (preempted / "checkpoints/last.pt").exists():
        time.sleep(0.05)
    # the job's steps, i.e. every rank on both nodes (not the batch shell, which waits in srun)
    subprocess.run(["scancel", "--signal=USR1", jobs[preempted]], env=cluster.env, check=True, timeout=30)
    fit(load_recipe(recipe, [*tiny, f"run.dir={tmp_path / 'one_process'}"]))  # meanwhile, the 1-process run here
    for job in jobs.values():
        _wait_until_gone(cluster, job)

    logs = {run: Path(f"{run}.out").read_text() for run in jobs}
    for run, nodes in ((one_node, ("n1", "n2")), (two_nodes, ("n[1-2]",)), (preempted, ("n[1-2]",))):
        assert (run / "results.json").is_file(), logs[run][-3000:]
        assert _job_field(cluster, jobs[run], "NodeList") in nodes
    assert _results(two_nodes)["recipe"]["fabric"]["num_nodes"] == 2
    assert _results(one_node)["recipe"]["fabric"]["devices"] == 2
    _assert_same_run(one_node, two_nodes)
    log = logs[preempted]
    assert "preempted: checkpoint after round" in log and f"SLURM job {jobs[preempted]} requeued" in log, log[-3000:]
    assert _job_field(cluster, jobs[preempted], "Restarts") == "1"
    _assert_same_run(two_nodes, preempted)
    assert _results(preempted)["rounds_completed"] == rounds

    one_g, process_g = _global(one_node), _global(tmp_path / "one_process")
    for k in one_g:
        assert torch.allclose(one_g[k].double(), process_g[k].double(), atol=1e-5, rtol=1e-4), k
    assert _results(one_node)["comm"] == _results(tmp_path / "one_process")["comm"]
