"""A real one-node SLURM cluster on 127.0.0.1 for tests: munged, slurmctld and slurmd as root.

Everything lives in one temporary folder (config, key, sockets, state, logs); the daemons
run in the foreground as children of the test process and are stopped by their PIDs. The
timers are short (munge credentials, slurmd polling, scheduling) so that jobs start within
a second or two. Needs Debian's ``slurm-wlm`` and ``munge`` (``scripts/setup.sh``) and root.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CPUS = 8  # declared to SLURM (slurmd's config_overrides accepts more than the machine has)

SLURM_CONF = """\
ClusterName=fedlight-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge.socket,cred_expire=5
# cred_expire (the minimum, 5 s) is also how long a requeued job waits before it may start again
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MailProg=/bin/true
SchedulerParameters=sched_interval=1,batch_sched_delay=0
JobRequeue=1
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
MessageTimeout=10
TCPTimeout=5
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""

CGROUP_CONF = "CgroupPlugin=autodetect\nIgnoreSystemd=yes\n"


def _which(tool: str) -> str | None:
    """``tool``'s path; daemons live in /usr/sbin, which a non-login PATH may lack."""
    return shutil.which(tool, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")


def unavailable() -> str | None:
    """Why a cluster cannot be started here (None if it can)."""
    missing = [d for d in (*DAEMONS, "sbatch", "srun", "scontrol", "squeue", "scancel") if _which(d) is None]
    if missing:
        return f"SLURM/munge not installed ({', '.join(missing)} missing; scripts/setup.sh installs slurm-wlm and munge)"
    if os.geteuid() != 0:
        return "starting slurmd/slurmctld needs root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    """Start with ``start()``, stop with ``stop()``; ``env`` is what SLURM client commands need."""

    def __init__(self, folder: Path) -> None:
        self.dir = folder
        self.conf = folder / "slurm.conf"
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def _write_config(self) -> None:
        for sub in ("state", "spool"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        host = socket.gethostname().split(".")[0]
        self.conf.write_text(SLURM_CONF.format(host=host, dir=self.dir, cpus=CPUS,
                                               ctld_port=_free_port(), slurmd_port=_free_port()))
        (self.dir / "cgroup.conf").write_text(CGROUP_CONF)
        key = self.dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = open(self.dir / f"{name}.out", "wb")
        self.procs[name] = subprocess.Popen([_which(cmd[0]) or cmd[0], *cmd[1:]], env=self.env, stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def _wait(self, what: str, ready, timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}) while waiting for {what}:\n{self.logs()}")
            if ready():
                return
            time.sleep(0.1)
        raise RuntimeError(f"timed out waiting for {what}:\n{self.logs()}")

    def start(self, timeout: float = 60) -> "SlurmCluster":
        """Write the config and start munged, slurmctld and slurmd; returns once the node is idle."""
        self._write_config()
        d = self.dir
        self._spawn("munged", ["munged", "-F", "--force", f"--key-file={d / 'munge.key'}",
                               f"--socket={d / 'munge.socket'}", f"--pid-file={d / 'munged.pid'}",
                               f"--log-file={d / 'munged.log'}", f"--seed-file={d / 'munged.seed'}"])
        self._wait("munged", lambda: (d / "munge.socket").exists(), timeout)
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._wait("slurmctld", lambda: self._run(["scontrol", "ping"]).stdout.count("UP") >= 1, timeout)
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf)])
        self._wait("an idle node", lambda: "idle" in self._run(["sinfo", "-h", "-o", "%t"]).stdout, timeout)
        return self

    def _run(self, cmd: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=30)

    def logs(self, tail: int = 30) -> str:
        out = []
        for name in ("munged.log", "slurmctld.log", "slurmd.log", *(f"{d}.out" for d in DAEMONS)):
            path = self.dir / name
            if path.is_file():
                lines = path.read_text(errors="replace").splitlines()[-tail:]
                out.append(f"--- {name}\n" + "\n".join(lines))
        return "\n".join(out)

    def stop(self) -> None:
        """Stop the daemons this object started (by PID; slurmd first), then their children."""
        for name in reversed(DAEMONS):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
