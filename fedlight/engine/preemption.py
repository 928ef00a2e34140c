"""Preemption: SIGUSR1 or SIGTERM make a run stop at the next safe point, requeue itself and exit 3.

SLURM sends SIGUSR1 ahead of the time limit (``#SBATCH --signal=B:USR1@120``) and SIGTERM
when it preempts or cancels a job. The handler only sets a flag; the orchestrator reads it
at the next safe point, where ``--resume`` continues bit for bit: after the current client
(one process: the round's accumulator and client reports go into the checkpoint) or after
the current round's checkpoint (several ranks, which agree through one ``all_reduce``).
Rank 0 then runs ``scontrol requeue $SLURM_JOB_ID`` when inside SLURM; the CLI exits with 3.
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

SIGNALS = (signal.SIGUSR1, signal.SIGTERM)
_received: list[int] = []


class Preempted(Exception):
    """The run stopped after ``rounds_done`` rounds because a signal asked it to; its checkpoint is saved."""

    def __init__(self, rounds_done: int, rank: int, clients_done: int = 0) -> None:
        super().__init__(f"stopped by a signal after round {rounds_done} (+{clients_done} clients)")
        self.rounds_done, self.rank, self.clients_done = rounds_done, rank, clients_done
        self.requeued: str | None = None  # the SLURM job id requeued (rank 0, inside SLURM)
        self.requeue_error: str | None = None

    def describe(self, run_dir: str) -> str:
        """One line for the user: where the checkpoint is and what happens next."""
        if self.requeued:
            then = f"SLURM job {self.requeued} requeued; it resumes from there"
        elif self.requeue_error:
            then = f"{self.requeue_error}; resubmit with --resume"
        else:
            then = "continue with --resume"
        where = f"round {self.rounds_done}" + (f" and {self.clients_done} clients of the next" if self.clients_done else "")
        return f"preempted: checkpoint after {where} saved in '{run_dir}'; {then}"


def requeue_after(stop: Preempted) -> None:
    """Requeue the SLURM job (rank 0 only), noting the outcome on ``stop``."""
    if stop.rank != 0:
        return
    try:
        stop.requeued = requeue()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        stop.requeue_error = str(exc)


def _handler(signum: int, frame: object) -> None:
    _received.append(signum)


@contextmanager
def signals_handled() -> Iterator[None]:
    """Within the block, SIGUSR1 and SIGTERM set the preemption flag instead of killing the process."""
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
