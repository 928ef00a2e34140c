"""``fedlight sweep --executor local --parallel N``: a sweep's tasks as processes on this machine.

The same files as the SLURM executor (manifest, resolved recipes, ``tasks.txt``, run
folders) and the same rules: a finished task is skipped, and a task whose run folder holds a
checkpoint or a ``results.json`` continues with ``--resume`` (``--overwrite`` otherwise: a folder
where no round was saved holds nothing worth keeping), exactly as ``slurm/array.sbatch`` decides. Each
task's output goes to ``<out>/logs/<name>.out`` (appended, like SLURM's ``--open-mode=append``).

Ctrl-C (or SIGTERM to this process) sends SIGTERM to every running task: fedlight
checkpoints it at its next client and exits 3, so running the same command again resumes it.
A sweep killed outright (SIGKILL) sends nothing, so each task asks the kernel for that SIGTERM
when its parent dies (Linux's ``PR_SET_PDEATHSIG``): no task outlives its sweep.

A task that fails with a fedlight error (its run folder in use by another run, say) is reported
with that error's line from its log, not only as a failure.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, IO

import fedlight
from fedlight.cpus import QUIET, usable_cpus
from fedlight.engine.run.folder_contents import has_checkpoint
from fedlight.engine.state.run_files import RESULTS

POLL_SECONDS = 0.2
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
ERROR_PREFIX = "fedlight: error: "  # how the CLI starts a user error's one line


@dataclass(frozen=True)
class LocalTask:
    """One task to run: its index and name, its resolved recipe, run folder and log file."""

    index: int
    name: str
    recipe: Path
    run_dir: Path
    log: Path


@dataclass(frozen=True)
class Failure:
    """A task that exited non-zero: its exit code and, if it printed one, its one-line fedlight error."""

    task: LocalTask
    code: int
    error: str | None

    def describe(self) -> str:
        """``'task 1 alpha=5_seed=3 failed (exit 2): <its error>'``, or where to look when it printed none."""
        why = self.error or f"see {self.task.log}"
        return f"task {self.task.index} {self.task.name} failed (exit {self.code}): {why}"


def last_error(log: Path, since: int) -> str | None:
    """The last fedlight user error written to ``log`` after byte ``since`` (this attempt's), without its prefix."""
    try:
        with open(log, "rb") as f:
            f.seek(since)
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    return next((line[len(ERROR_PREFIX):] for line in reversed(lines) if line.startswith(ERROR_PREFIX)), None)


def die_with_parent(parent: int) -> Callable[[], None]:
    """A ``preexec_fn`` that has the kernel send the child SIGTERM when ``parent`` dies (Linux; elsewhere
    nothing), and sends it at once if ``parent`` died before the child asked. ``prctl`` is looked
    up here, before the fork: the child only calls it (no loader lock another thread may hold)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # no prctl: not Linux
        return lambda: None

    def ask() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)
    return ask


def resume_flag(run_dir: Path) -> str:
    """``--resume`` where ``run_dir`` holds a saved round, else ``--overwrite``: the array script's rule.

    A saved round is a checkpoint (``last.pt``, or the ``.prev`` that ``load_checkpoint`` falls back
    to) or a ``results.json``, written only after one: a run whose checkpoints were pruned since is
    refused by ``fit --resume`` in one line, where ``--overwrite`` would train it again and delete it.
    """
    return "--resume" if has_checkpoint(run_dir) or (run_dir / RESULTS).exists() else "--overwrite"


def fit_command(task: LocalTask, python: str = sys.executable) -> list[str]:
    """``python -m fedlight fit --recipe <recipe> --resume|--overwrite`` for ``task``."""
    return [python, "-m", "fedlight", "fit", "--recipe", str(task.recipe), resume_flag(task.run_dir)]


def task_environment(parallel: int = 1) -> dict[str, str]:
    """This environment, with each of the ``parallel`` tasks' share of this process's CPUs as its OpenMP
    threads unless ``OMP_NUM_THREADS`` is set (as the array script does: ``SLURM_CPUS_PER_TASK``), no
    busy-machine line (the tasks load the machine on purpose), and this fedlight importable from any
    working folder (a source checkout is not on ``sys.path`` there). One task at a time gets every CPU, as
    ``fedlight fit`` does, so its seed 0 is the same run as the same ``fit``."""
    env = os.environ.copy()
    env.setdefault("OMP_NUM_THREADS", str(max(1, usable_cpus() // max(1, parallel))))
    env.setdefault(QUIET, "1")
    source = str(Path(fedlight.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), source) if p)  # theirs first
    return env


def run_local(tasks: list[LocalTask], parallel: int, echo: Callable[[str], None] = print) -> list[Failure]:
    """Run ``tasks``, at most ``parallel`` at once, in order; returns those that failed.

    Written with ``subprocess.Popen`` rather than a thread pool: on an interrupt the running
    children must get SIGTERM (their checkpoint-and-stop signal), which a pool's futures cannot send.
    Each child runs in its own session, so a terminal's Ctrl-C reaches only this process, which
    passes it on as that SIGTERM.
    """
    waiting, running, failed, starts = list(tasks), {}, [], {}
    env = task_environment(parallel)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        while waiting or running:
            while waiting and len(running) < parallel:
                task = waiting.pop(0)
                command = fit_command(task)
                log = open(task.log, "a")
                log.write(f"fedlight sweep task {task.index} ({task.name}), local: {command[-1]}\n")
                log.flush()
                how = "started" if command[-1] == "--overwrite" else (
                    "resumed from its checkpoint" if has_checkpoint(task.run_dir) else "resumed (no checkpoint)")
                echo(f"task {task.index} {task.name}: {how}; log {task.log}")
                starts[task] = log.tell()
                running[task] = (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                                  stdin=subprocess.DEVNULL, start_new_session=True,
                                                  preexec_fn=die_with_parent(os.getpid())), log)
            for task, (proc, log) in list(running.items()):
                if proc.poll() is not None:
                    log.close()
                    del running[task]
                    if proc.returncode == 0:
                        echo(f"task {task.index} {task.name}: finished")
                        continue
                    failed.append(Failure(task, proc.returncode, last_error(task.log, starts[task])))
                    echo(failed[-1].describe())
            time.sleep(POLL_SECONDS if running else 0)
    except KeyboardInterrupt:
        _stop(running, echo)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    return failed


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _stop(running: dict[LocalTask, tuple[subprocess.Popen, IO[str]]], echo: Callable[[str], None]) -> None:
    """SIGTERM to every running task, then wait for each to checkpoint and exit."""
    for proc, _ in running.values():
        proc.send_signal(signal.SIGTERM)
    for task, (proc, log) in running.items():
        proc.wait()
        log.close()
        echo(f"task {task.index} {task.name}: stopped (exit {proc.returncode}); the same command resumes it")
