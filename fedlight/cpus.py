"""How many CPU threads a run may use here: the CPUs this process may run on, not the machine's.

torch's default is the machine's cores, which on a shared machine or in a container with a CPU quota (a
SLURM job, a Kubernetes pod, a CI runner) is more than the process may use: its OpenMP threads then wait
on each other, and a 46 s quickstart took 1,248 s of wall time on a busy 2-core machine. So fedlight
takes its default from the process's CPU affinity capped by the cgroup's CPU quota, split over the
processes it starts on this machine, unless ``OMP_NUM_THREADS`` or ``fabric.threads`` says otherwise;
and it says so in one line when the machine is already busier than its CPUs at start.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
QUIET = "FEDLIGHT_NO_LOAD_WARNING"  # set (to anything) to skip the busy-machine line (the test suite does)


def cgroup_cpus(root: Path = CGROUP) -> int | None:
    """The CPUs the cgroup's quota allows, rounded up (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``);
    None without a quota."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu/cpu.cfs_quota_us").read_text())
        period = int((root / "cpu/cpu.cfs_period_us").read_text())
        return None if quota <= 0 else max(1, math.ceil(quota / period))
    except (OSError, ValueError):
        return None


def usable_cpus() -> int:
    """The CPUs this process may use: its affinity, capped by the cgroup's quota."""
    mine = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cgroup_cpus()
    return max(1, min(mine, quota) if quota else mine)


def default_threads(processes: int = 1) -> int:
    """A process's torch threads when the recipe sets none: ``OMP_NUM_THREADS`` where it is a positive
    integer (a sweep task's share, a SLURM script's), else this process's CPUs over the ``processes`` a run
    starts on this machine."""
    try:
        threads = int(os.environ.get("OMP_NUM_THREADS", ""))
        if threads > 0:
            return threads
    except ValueError:
        pass
    return max(1, usable_cpus() // max(1, processes))


def busy_machine() -> str | None:
    """The warning for a machine whose load is above this process's CPUs at start (None: not busy, or
    ``FEDLIGHT_NO_LOAD_WARNING`` set)."""
    if os.environ.get(QUIET) or not hasattr(os, "getloadavg"):
        return None
    load, cpus = os.getloadavg()[0], usable_cpus()
    if load <= cpus:
        return None
    return (f"the machine is busy (load {load:.1f} on {cpus} CPUs): this run's threads share them and may run "
            "many times slower; set fabric.threads=1, or start it when the machine is quieter")
