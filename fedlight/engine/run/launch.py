"""Starting a one-node multi-process run's local ranks before torch is imported.

Fabric's own launcher starts ranks 1..N-1 from ``fabric.launch()``: after rank 0 has
imported torch and Lightning and loaded the data, and rank 0 then waits while each new
rank imports them again (about 4 s on the 2-core CPU). Started here instead, as
``torchrun`` would, every rank imports at the same time, and Fabric sees ``LOCAL_RANK``
and leaves process creation to us. Measured on the cross-device workload with
``fabric.devices=2``: time outside the rounds 10.2 s -> 8.5 s (BENCHMARKS.md). Where a
cluster launcher already made the processes (srun, torchrun, MPI, LSF) or the run spans
nodes, nothing happens here and Fabric decides as before.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

from fedlight.errors import STOPPED_EXITS, UserError

# set by srun, torchrun, LSF, MPI, or by us: the processes exist already
EXTERNAL_LAUNCH = ("LOCAL_RANK", "WORLD_SIZE", "SLURM_NTASKS", "TORCHELASTIC_RUN_ID", "LSB_JOBID",
                   "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
CHILD = "FEDLIGHT_LOCAL_RANK_CHILD"  # marks ranks started here: they leave user-facing messages to rank 0
GRACE_SECONDS = 10.0  # after another rank failed, this one may still be saying the same user error
_started: list[subprocess.Popen] = []  # the local ranks this process started


def is_child() -> bool:
    """Whether this process is a rank that ``start_local_ranks`` started."""
    return os.environ.get(CHILD) == "1"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def require_launcher(devices: int, num_nodes: int) -> None:
    """Refuse a run over several nodes that no launcher started: its rank 0 would wait for the
    other nodes' ranks at "Initializing distributed" until fabric.rendezvous_timeout_min, for ranks nobody starts.

    Raises:
        UserError: ``num_nodes`` > 1 and none of the variables a cluster launcher sets is set.
    """
    if num_nodes > 1 and not any(k in os.environ for k in EXTERNAL_LAUNCH):
        raise UserError(f"fabric.num_nodes={num_nodes} needs a launcher that starts the {devices * num_nodes} "
                        f"processes on {num_nodes} nodes (srun in a SLURM allocation: sbatch slurm/multinode.sbatch; "
                        f"or torchrun --nnodes={num_nodes} on each node), and none started this one (no "
                        "SLURM_NTASKS, WORLD_SIZE or LOCAL_RANK set); run it through one, or set fabric.num_nodes=1")


def start_local_ranks(devices: int, num_nodes: int, argv: list[str]) -> list[subprocess.Popen]:
    """Start ranks 1..devices-1 of a one-node run as ``python -m fedlight *argv``.

    Makes this process rank 0 (``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` / ``MASTER_PORT``
    in its environment, which the children inherit). Returns no process where the run has one
    process, spans nodes, or was launched by something else.

    Raises:
        UserError: a run over several nodes that no launcher started (``require_launcher``).
    """
    require_launcher(devices, num_nodes)
    if devices < 2 or num_nodes != 1 or any(k in os.environ for k in EXTERNAL_LAUNCH):
        return []
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), NODE_RANK="0",
                      WORLD_SIZE=str(devices), LOCAL_RANK="0")
    procs = [subprocess.Popen([sys.executable, "-m", "fedlight", *argv],
                              env={**os.environ, "LOCAL_RANK": str(rank), CHILD: "1"})
             for rank in range(1, devices)]
    _started.extend(procs)
    threading.Thread(target=_watch, args=(procs,), daemon=True, name="fedlight-rank-watch").start()
    return procs


def _watch(procs: list[subprocess.Popen], period: float = 0.5) -> None:
    """A rank that fails leaves the others blocked in a collective: end them all, and this one
    unless it ends by itself within ``GRACE_SECONDS``."""
    while True:
        codes = [p.poll() for p in procs]
        if any(c not in (None, 0, *STOPPED_EXITS) for c in codes):
            stop_local_ranks(procs)
            time.sleep(GRACE_SECONDS)
            os.kill(os.getpid(), signal.SIGKILL)
        if None not in codes:
            return
        time.sleep(period)


def finish_local_ranks(procs: list[subprocess.Popen], code: int) -> int:
    """Rank 0 is done with exit ``code``: wait for the others if it succeeded or stopped cleanly
    (they finish the same collectives), end them otherwise; the first non-zero code wins."""
    if code not in (0, *STOPPED_EXITS):  # a preempted or interrupted rank 0: every rank stops at the same round
        stop_local_ranks(procs)
        return code
    codes = [p.wait() for p in procs]
    return next((c for c in [code, *codes] if c), 0)


def stop_started_ranks() -> None:
    """End the local ranks this process started: it is ending at once (a signal during the rendezvous),
    and they would wait for it to ``fabric.rendezvous_timeout_min``."""
    stop_local_ranks(_started)


def stop_local_ranks(procs: list[subprocess.Popen]) -> None:
    """SIGKILL: SIGTERM would be taken for a preemption, and a rank in a collective ignores it anyway."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
