"""Joining the other ranks of a multi-process run: a deadline, one line when it fails, and signals that end the wait.

Every rank's ``init_process_group`` meets the others at rank 0's TCP store, ``MASTER_ADDR:MASTER_PORT``
(set by ``fedlight fit`` on one node; under srun, Lightning takes the first node of
``SLURM_NODELIST`` and 15000 + the job id's last four digits unless they are set). torch waits
there as long as the process group's timeout, which is also every later collective's (30 min
for gloo), and a signal cannot end the wait: Python runs signal handlers in the main thread, and
the main thread is inside torch's C++ until the wait ends. A wrong address, a firewalled port or
a rank that died before it joined held the whole allocation for half an hour. So:

- the process group is created with what is left of ``fabric.rendezvous_timeout_min`` as its
  timeout, and its collectives get Lightning's default (30 min) back once every rank has joined;
- a rank other than 0 first waits for rank 0's store to take connections in its own loop, to the
  deadline: torch's store client retries a failed connection after a random delay of up to the
  whole timeout (a rank waited 1.8-2.9x the deadline) and logs two C++ backtraces for it;
- a rank whose wait fails (the deadline passed, a peer went away, a refused connection) raises
  a ``UserError`` naming the address, the port and what to check (exit 2);
- while a rank waits, a thread woken through ``signal.set_wakeup_fd`` ends it on SIGTERM or
  SIGUSR1 (exit 3, as a preempted run: nothing was trained since the last checkpoint, and rank
  0 requeues the SLURM job) or SIGINT (exit 130), after ``on_stop`` (rank 0 gives its claim on
  the run folder back) and ending the local ranks it started (``launch``), which would wait to the deadline;
- a rank leaves the process group before it exits: one that exits still in it can be aborted at
  interpreter exit by gloo's worker threads ("terminate called without an active exception",
  SIGABRT: a finished run that reports exit -6; pytorch/pytorch#190489).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from datetime import timedelta
from typing import Callable, Iterator

import torch.distributed as dist
from lightning.fabric import Fabric
from lightning.fabric.strategies import DDPStrategy
from torch.distributed.constants import default_pg_timeout

from fedlight.engine.loop import preemption
from fedlight.engine.run import launch
from fedlight.errors import PREEMPTED_EXIT, UserError

INTERRUPTED_EXIT = 128 + signal.SIGINT
PREEMPTING = (signal.SIGUSR1, signal.SIGTERM)  # a cluster's signals: requeue from rank 0, exit 3
# torch.distributed.set_timeout in recent torch; older ones (2.4) call it _set_pg_timeout
_set_timeout = getattr(dist, "set_timeout", None) or dist.distributed_c10d._set_pg_timeout
POLL_SECONDS = 0.5  # between two tries to reach rank 0's store


def strategy(timeout_min: float) -> DDPStrategy:
    """Lightning's DDP strategy whose process group must form within ``timeout_min`` minutes."""
    return DDPStrategy(timeout=timedelta(minutes=timeout_min))


@contextmanager
def joined(fabric: Fabric, timeout_min: float, on_stop: Callable[[], None] = lambda: None) -> Iterator[None]:
    """Within the block, this rank is in the process group (``join``); leaving it, the rank
    destroys its part of the group, on success or error alike."""
    join(fabric, timeout_min, on_stop)
    try:
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def join(fabric: Fabric, timeout_min: float, on_stop: Callable[[], None] = lambda: None) -> None:
    """``fabric.launch()``: every rank joins the process group within ``timeout_min`` minutes, or exits
    (after ``on_stop``, if a signal ends the wait).

    Raises:
        UserError: the rendezvous failed: the deadline passed, a peer went away or the address
            refused; the message names ``MASTER_ADDR:MASTER_PORT`` and what to check.
    """
    if fabric.world_size == 1:
        fabric.launch()
        return
    deadline = time.monotonic() + timeout_min * 60
    env = fabric.strategy.cluster_environment  # as fabric.launch() sets them, so that the wait can name them
    os.environ.update(MASTER_ADDR=env.main_address, MASTER_PORT=str(env.main_port))
    where = f"rank {fabric.global_rank} of {fabric.world_size}"
    with _signals_end_the_wait(where, requeues=fabric.global_rank == 0, on_stop=on_stop):
        try:
            if fabric.global_rank != 0:
                _reach(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), deadline)
            # Lightning's private field; the process group's timeout is set back below
            fabric.strategy._timeout = timedelta(seconds=max(deadline - time.monotonic(), 1.0))
            fabric.launch()
        except (RuntimeError, OSError) as exc:  # torch's DistStoreError, DistNetworkError, gloo's connect errors
            raise UserError(_failed(where, timeout_min, exc)) from None
    _set_timeout(default_pg_timeout)  # evaluation on rank 0 may keep the others in a collective for long


def _reach(host: str, port: int, deadline: float) -> None:
    """Return once ``host:port`` takes a TCP connection (rank 0's store listens there).

    Raises:
        OSError: the last try's error (refused, timed out, a name that does not resolve) once
            ``deadline`` (``time.monotonic()``) has passed.
    """
    while True:
        try:
            with socket.create_connection((host, port), timeout=min(max(deadline - time.monotonic(), 0.05),
                                                                    POLL_SECONDS)):
                return
        except OSError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            time.sleep(min(left, POLL_SECONDS))


def _address() -> str:
    """Where the ranks meet, as ``join`` has set it by the time the wait starts."""
    return f"{os.environ.get('MASTER_ADDR', '(MASTER_ADDR unset)')}:{os.environ.get('MASTER_PORT', '(MASTER_PORT unset)')}"


def _failed(where: str, timeout_min: float, exc: Exception) -> str:
    """One line: who waited where, what torch said (its first line: C++ frames may follow), what to check."""
    said = (str(exc).strip().splitlines() or [""])[0]
    return (f"{where} could not join the other ranks at {_address()} within fabric.rendezvous_timeout_min="
            f"{timeout_min:g} ({type(exc).__name__}: {said}); check that every rank was started "
            "(fabric.num_nodes x fabric.devices processes, srun --ntasks), that MASTER_ADDR is rank 0's node and "
            "resolves and is reachable from this one, that no firewall blocks MASTER_PORT, or raise "
            f"fabric.rendezvous_timeout_min={timeout_min:g}")


def _say(line: str) -> None:
    if not launch.is_child():  # ranks fedlight started on this node leave the talking to rank 0
        sys.stderr.write(f"fedlight: {line}\n")
        sys.stderr.flush()


@contextmanager
def _signals_end_the_wait(where: str, requeues: bool, on_stop: Callable[[], None]) -> Iterator[None]:
    """Within the block, SIGTERM / SIGUSR1 / SIGINT end the process at once, whatever the main thread
    is doing: CPython's C-level handler writes a caught signal's number to the wakeup fd, where a
    thread reads it. The signals need Python handlers for that (``preemption.signals_handled``
    installs them)."""
    if threading.current_thread() is not threading.main_thread():  # the wakeup fd is the main thread's
        yield
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    watcher = threading.Thread(target=_watch, args=(read, where, requeues, on_stop), daemon=True,
                               name="fedlight-rendezvous-watch")
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        os.close(write)  # the watcher reads end-of-file and returns
        watcher.join()
        os.close(read)


def _watch(read: int, where: str, requeues: bool, on_stop: Callable[[], None]) -> None:
    """Read signal numbers from the wakeup fd until it closes; SIGTERM, SIGUSR1 or SIGINT end the process."""
    while data := os.read(read, 64):
        for signum in data:
            if signum in (*PREEMPTING, signal.SIGINT):
                _stop(signal.Signals(signum), where, requeues, on_stop)


def _stop(sig: signal.Signals, where: str, requeues: bool, on_stop: Callable[[], None]) -> None:
    """End the process for ``sig`` with one line, after ``on_stop`` and the local ranks it started; a
    preemption signal requeues the SLURM job from rank 0."""
    try:
        on_stop()
    finally:  # the process ends here, whatever on_stop raised
        launch.stop_started_ranks()
        _say_and_exit(sig, where, requeues)


def _say_and_exit(sig: signal.Signals, where: str, requeues: bool) -> None:
    then = "continue with --resume"
    if sig in PREEMPTING and requeues:
        try:
            job = preemption.requeue()
            then = f"SLURM job {job} requeued; it resumes from there" if job else then
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            then = f"{exc}; resubmit with --resume"
    _say(f"stopped by {sig.name} while {where} waited for the other ranks at {_address()}: nothing was trained "
         f"since the last checkpoint; {then}")
    os._exit(PREEMPTED_EXIT if sig in PREEMPTING else INTERRUPTED_EXIT)
