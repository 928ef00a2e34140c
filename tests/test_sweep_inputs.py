"""A sweep refuses what `fit` refuses, before it writes anything; escaped interpolations survive
a sweep; `--recipe` finds the file it names; absurd values are refused or clamped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedlight.cli import main

REPO = Path(__file__).resolve().parents[1]
FMNIST = "/usr/share/datasets/fashion-mnist"  # where fit finds the data the sweep could not
LG = ["method.name=lg", "method.objective=supervised"]


def _errors(capsys) -> list[str]:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines and all(line.startswith("fedlight: error: ") for line in lines), err
    return lines


@pytest.mark.parametrize(("args", "bad_task", "fragment"), [
    # the data check (the data is on this machine): fit's take_subset refuses it
    (["--grid", "data.subset=100,5000"], "data.subset=5000 seed=3", "'data.subset' is 5000 but the dataset has 1200"),
    # the method's constructor: LG's layer names
    ([*LG, "--grid", "method.global_layers=[classifier],[no_such_layer]"], "method.global_layers=[no_such_layer] seed=3",
     "method.global_layers entry 'no_such_layer'"),
    # data that is not on this machine: the constructor still runs, against the dataset's shape
    ([*LG, "data.name=fashion_mnist", "data.root=/no/such/root", "--grid",
      "method.global_layers=[classifier],[no_such_layer]"], "method.global_layers=[no_such_layer] seed=3",
     "method.global_layers entry 'no_such_layer'"),
    # the new device against the test split
    (["new_device.rotation=90", "new_device.train=10", "--grid", "new_device.test=10,301"], "new_device.test=301 seed=3",
     "'new_device.test' is 301 but the test split has 300"),
])
def test_a_sweep_refuses_each_task_fit_would_refuse(tmp_path: Path, tiny_recipe: Path, capsys, args: list[str],
                                                    bad_task: str, fragment: str) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", "--recipe", str(tiny_recipe), *args, "--out", str(out)]) == 2
    (line,) = _errors(capsys)
    assert f"({bad_task})" in line and fragment in line, line
    assert not out.exists()
    # fit refuses the same task with the same words (the same check, not a copy of it)
    task = [a.replace("/no/such/root", FMNIST) for a in args if a != "--grid" and "," not in a] + bad_task.split()
    assert main(["fit", "--recipe", str(tiny_recipe), *task]) == 2
    (fit_line,) = _errors(capsys)
    assert fragment in fit_line and not (tiny_recipe.parent / "run").exists()


def test_each_problem_is_one_line_naming_its_tasks(tmp_path: Path, tiny_recipe: Path, capsys) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", "--recipe", str(tiny_recipe), *LG, "--grid", "data.subset=100,5000",
                 "--grid", "method.global_layers=[classifier],[no_such_layer]", "--out", str(out)]) == 2
    lines = _errors(capsys)
    assert len(lines) == 2, lines
    layers = next(line for line in lines if "global_layers entry" in line)
    (subset,) = set(lines) - {layers}
    assert "tasks 2 (data.subset=5000 method.global_layers=[classifier] seed=3), 3 (" in subset, subset
    assert "'data.subset' is 5000" in subset
    assert "task 1 (data.subset=100 method.global_layers=[no_such_layer] seed=3): " in layers  # 3 fails on its data first
    assert not out.exists()


def test_an_escaped_interpolation_stays_literal_in_a_task_recipe(tmp_path: Path, tiny_recipe: Path) -> None:
    """fit reads '\\${seed}' as the text '${seed}'; the task recipe a sweep writes must too (not
    the seed, nor an error), and a re-run sees the same sweep."""
    from fedlight.config import load_recipe

    base = tmp_path / "base.yaml"
    base.write_text(tiny_recipe.read_text() + 'name: "lit\\\\${seed}"\ndata: {root: "/data/\\\\${seed}\\\\\\\\${seed}"}\n')
    fit_sees = load_recipe(base)
    assert (fit_sees.name, fit_sees.data.root) == ("lit${seed}", "/data/${seed}\\3")
    out = tmp_path / "sweep"
    assert main(["sweep", "--recipe", str(base), "--grid", "partition.alpha=0.5,5", "--out", str(out)]) == 0
    for written in sorted((out / "recipes").glob("*.yaml")):
        task = load_recipe(written)  # as `fedlight fit --recipe <task recipe>` reads it
        assert (task.name, task.data.root) == (fit_sees.name, fit_sees.data.root)
    assert main(["sweep", "--recipe", str(base), "--grid", "partition.alpha=0.5,5", "--out", str(out)]) == 0


# ---------------------------------------------------------------- local sweeps and collisions

def _fake_sbatch(tmp_path: Path, monkeypatch) -> None:
    """An ``sbatch`` on PATH that accepts anything and answers a new job id each time (its PID)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho $$\n")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_two_sweeps_at_once_keep_each_others_manifest_entries(tmp_path: Path, tiny_recipe: Path, monkeypatch,
                                                             capsys) -> None:
    """Sweep B runs to its end while sweep A reads its tasks (after A read the manifest, before A
    writes it): A's manifest must keep B's submission, and A submits no task B already did."""
    import fedlight.sweep.command as command

    _fake_sbatch(tmp_path, monkeypatch)
    out = tmp_path / "sweep"
    sweep = ["sweep", "--recipe", str(tiny_recipe), "--grid", "partition.alpha=0.5,5", "--out", str(out), "--submit"]
    real_load, calls = command.load_recipe, []

    def load_while_another_sweep_runs(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # A's first task (the first call is the base recipe): B runs now, start to end
            monkeypatch.setattr(command, "load_recipe", real_load)
            assert main(sweep) == 0
            calls.append(capsys.readouterr().out.split("submitted array job ")[1].split()[0])  # B's job id
            monkeypatch.setattr(command, "load_recipe", load_while_another_sweep_runs)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(command, "load_recipe", load_while_another_sweep_runs)
    assert main(sweep) == 0
    submissions = json.loads((out / "manifest.json").read_text())["submissions"]
    assert [(s["job_id"], s["tasks"]) for s in submissions] == [(calls[2], [0, 1])], submissions  # B's, kept
    # and A found nothing left to submit
    assert "0 to submit now" in capsys.readouterr().out


def test_a_task_whose_run_folder_is_in_use_names_the_other_run(tmp_path: Path, tiny_recipe: Path, capsys) -> None:
    from fedlight.engine.rundir import LOCK, _Lock

    out = tmp_path / "sweep"
    sweep = ["sweep", "--recipe", str(tiny_recipe), "--out", str(out)]
    assert main(sweep) == 0  # written, not run
    run_dir = out / "runs" / "seed=3"
    run_dir.mkdir(parents=True)
    lock = _Lock.acquire(run_dir / LOCK, run_dir)  # as a fedlight fit still running there holds it
    try:
        assert main([*sweep, "--executor", "local"]) == 1
    finally:
        lock.release()
    err = capsys.readouterr().err
    assert f"task 0 seed=3 failed (exit 2): run folder '{run_dir}' is in use by another fedlight run (PID {os.getpid()})" in err, err
    assert "run the same command to retry" in err.splitlines()[-1]


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie waiting for its parent (init here) to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_local_sweep_leaves_no_task_running(tmp_path: Path, tiny_recipe: Path, signum: int) -> None:
    from fedlight.engine.rundir import LOCK

    out = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    sweep = subprocess.Popen([sys.executable, "-m", "fedlight", "sweep", "--recipe", str(tiny_recipe), "--out", str(out),
                              "--executor", "local", "rounds=1000", "eval.every=1000", "eval.projector_samples=0"],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    lock = out / "runs" / "seed=3" / LOCK
    deadline = time.monotonic() + 300  # bounds the wait for the task to start (imports), times nothing
    while not (lock.is_file() and lock.read_text().strip()) and time.monotonic() < deadline:
        assert sweep.poll() is None, "the sweep ended before its task started"
        time.sleep(0.2)
    task = int(lock.read_text().split()[0])
    assert _alive(task)
    sweep.send_signal(signum)
    sweep.wait()
    deadline = time.monotonic() + 120  # the task checkpoints at its next client, then exits
    while _alive(task) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(task):
        os.kill(task, signal.SIGKILL)
        pytest.fail(f"task process {task} still ran after its sweep got signal {signum}")
