"""Preemption and Ctrl-C: SIGUSR1, SIGTERM or SIGINT make a run stop at the next safe point.

SLURM sends SIGUSR1 ahead of the time limit (``#SBATCH --signal=B:USR1@120``) and SIGTERM
when it preempts or cancels a job. The handler only sets a flag; the orchestrator reads it
at the next safe point, where ``--resume`` continues bit for bit: after the current client
(one process: the round's accumulator and client reports go into the checkpoint) or after
the current round's checkpoint (several ranks, which agree through one ``all_reduce``).
Rank 0 then runs ``scontrol requeue $SLURM_JOB_ID`` when inside SLURM; the CLI exits with 3.

SIGINT (Ctrl-C) stops the run the same way, without a requeue (a person asked it to stop), and
the CLI exits with 130, the shell's code for an interrupted command. A second Ctrl-C stops at
once (``KeyboardInterrupt``), losing only the work since the last checkpoint.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from contextlib import contextmanager
from typing import Iterator

import torch
from lightning.fabric import Fabric

from fedlight.engine.output.console import interactive

SIGNALS = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)
_received: list[int] = []


class Preempted(Exception):
    """The run stopped after ``rounds_done`` rounds because a signal asked it to; its checkpoint is saved."""

    def __init__(self, rounds_done: int, rank: int, clients_done: int = 0) -> None:
        super().__init__(f"stopped by a signal after round {rounds_done} (+{clients_done} clients)")
        self.rounds_done, self.rank, self.clients_done = rounds_done, rank, clients_done
        self.interrupted = signal.SIGINT in _received  # Ctrl-C: no requeue, exit 130
        self.requeued: str | None = None  # the SLURM job id requeued (rank 0, inside SLURM)
        self.requeue_error: str | None = None

    def describe(self, run_dir: str, resume: str = "--resume") -> str:
        """One line for the user: where the checkpoint is and what happens next (``resume``: the
        command that continues the run)."""
        if self.requeued:
            then = f"SLURM job {self.requeued} requeued; it resumes from there"
        elif self.requeue_error:
            then = f"{self.requeue_error}; resubmit with --resume"
        else:
            then = f"continue with: {resume}"
        where = f"round {self.rounds_done}" + (f" and {self.clients_done} clients of the next" if self.clients_done else "")
        stopped = "interrupted" if self.interrupted else "preempted"
        return f"{stopped}: checkpoint after {where} saved in '{run_dir}'; {then}"


def requeue_after(stop: Preempted) -> None:
    """Requeue the SLURM job (rank 0 only, not after Ctrl-C), noting the outcome on ``stop``."""
    if stop.rank != 0 or stop.interrupted:
        return
    try:
        stop.requeued = requeue()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        stop.requeue_error = str(exc)


def _handler(signum: int, frame: object) -> None:
    if signum == signal.SIGINT:
        if signal.SIGINT in _received:  # the second Ctrl-C: stop now
            raise KeyboardInterrupt
        if interactive():  # a person waits at the terminal (os.write: safe inside a signal handler)
            os.write(2, b"\nfedlight: stopping after the current client; Ctrl-C again stops at once\n")
    _received.append(signum)


@contextmanager
def signals_handled() -> Iterator[None]:
    """Within the block, SIGUSR1, SIGTERM and SIGINT set the preemption flag instead of stopping the process."""
    if threading.current_thread() is not threading.main_thread():  # signal handlers live in the main thread
        yield
        return
    _received.clear()
    previous = {s: signal.signal(s, _handler) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def received() -> bool:
    """Whether this process received a preemption signal."""
    return bool(_received)


def requested(fabric: Fabric) -> bool:
    """Whether any rank received a preemption signal (a collective when there are several ranks)."""
    flag = bool(_received)
    if fabric.world_size == 1:
        return flag
    return bool(fabric.all_reduce(torch.tensor(float(flag), device=fabric.device), reduce_op="sum").item() > 0)


def requeue() -> str | None:
    """``scontrol requeue $SLURM_JOB_ID`` inside SLURM; returns the job id requeued, None outside SLURM.

    Raises:
        RuntimeError: scontrol is missing or refused (the checkpoint is saved all the same).
    """
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return None
    if shutil.which("scontrol") is None:
        raise RuntimeError(f"SLURM_JOB_ID={job} is set but scontrol is not on PATH")
    proc = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"scontrol requeue {job} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return job
