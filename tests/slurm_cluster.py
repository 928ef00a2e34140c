"""A real SLURM cluster of one or more nodes on 127.0.0.1 for tests: munged, slurmctld and one slurmd a node, as root.

Everything lives in one temporary folder (config, key, sockets, state, logs); the daemons
run in the foreground as children of the test process and are stopped by their PIDs. The
timers are short (munge credentials, slurmd polling, scheduling) so that jobs start within
a second or two. Several nodes share this host: node ``nI`` is ``slurmd -N nI`` with its own
port, spool folder, PID file and log (``%n`` in their paths), and every node's address is
127.0.0.1, so no traffic leaves the loopback interface. The node names resolve nowhere, as a
real cluster's would not from outside it: whoever needs a node's address asks SLURM
(``scontrol show node``), as ``slurm/multinode.sbatch`` does. Needs Debian's ``slurm-wlm``
and ``munge`` (``scripts/setup.sh``) and root.
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
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge.socket,cred_expire=5
# cred_expire (the minimum, 5 s) is also how long a requeued job waits before it may start again
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool-%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd-%n.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd-%n.log
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
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""

NODE = "NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs={cpus} RealMemory=4000 State=UNKNOWN"
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
    """Start with ``start()``, stop with ``stop()``; ``env`` is what SLURM client commands need.

    Args:
        folder: where everything lives.
        nodes: how many nodes (``n1``, ``n2``, ...), each a ``slurmd`` on this host.
    """

    def __init__(self, folder: Path, nodes: int = 1) -> None:
        self.dir = folder
        self.conf = folder / "slurm.conf"
        self.nodes = [f"n{i}" for i in range(1, nodes + 1)]
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def _write_config(self) -> None:
        (self.dir / "state").mkdir(parents=True, exist_ok=True)
        for name in self.nodes:
            (self.dir / f"spool-{name}").mkdir(exist_ok=True)
        host = socket.gethostname().split(".")[0]
        nodes = "\n".join(NODE.format(name=name, host=host, port=_free_port(), cpus=CPUS) for name in self.nodes)
        self.conf.write_text(SLURM_CONF.format(host=host, dir=self.dir, ctld_port=_free_port(), nodes=nodes))
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
        """Write the config and start munged, slurmctld and a slurmd per node; returns once every node is idle."""
        self._write_config()
        d = self.dir
        self._spawn("munged", ["munged", "-F", "--force", f"--key-file={d / 'munge.key'}",
                               f"--socket={d / 'munge.socket'}", f"--pid-file={d / 'munged.pid'}",
                               f"--log-file={d / 'munged.log'}", f"--seed-file={d / 'munged.seed'}"])
        self._wait("munged", lambda: (d / "munge.socket").exists(), timeout)
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._wait("slurmctld", lambda: self._run(["scontrol", "ping"]).stdout.count("UP") >= 1, timeout)
        for name in self.nodes:
            self._spawn(f"slurmd-{name}", ["slurmd", "-D", "-N", name, "-f", str(self.conf)])
        states = lambda: self._run(["sinfo", "-h", "-N", "-o", "%t"]).stdout.split()
        self._wait(f"{len(self.nodes)} idle node(s)", lambda: states().count("idle") == len(self.nodes), timeout)
        return self

    def _run(self, cmd: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=30)

    def logs(self, tail: int = 30) -> str:
        out = []
        for name in ("munged.log", "slurmctld.log", *(f"slurmd-{n}.log" for n in self.nodes),
                     *(f"{p}.out" for p in self.procs)):
            path = self.dir / name
            if path.is_file():
                lines = path.read_text(errors="replace").splitlines()[-tail:]
                out.append(f"--- {name}\n" + "\n".join(lines))
        return "\n".join(out)

    def stop(self) -> None:
        """Stop the daemons this object started (by PID; the slurmds first, munged last), then their children."""
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
