"""The rendezvous of a multi-process run (fedlight/engine/run/rendezvous.py), on 127.0.0.1 only.

Each rank is started here as srun or torchrun would start it (``LOCAL_RANK``, ``WORLD_SIZE``,
``MASTER_ADDR`` / ``MASTER_PORT`` in its environment), so the peers that never join, die first
or get a signal are under the test's control. The scenarios of a test run side by side: their
cost is mostly importing torch.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedlight.engine.run import launch

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_MIN = 0.05  # 3 s: fabric.rendezvous_timeout_min of the tests whose peers never come
NO_HANG = 180  # seconds a test waits for a rank before calling it hung (the old wait was gloo's 30 min)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(recipe: Path, rank: int, port: int, log: Path, *overrides: str) -> subprocess.Popen:
    """Rank ``rank`` of a 2-process ``fedlight fit``, its stderr in ``log``."""
    env = {k: v for k, v in os.environ.items() if k not in launch.EXTERNAL_LAUNCH and not k.startswith("SLURM_")}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               WORLD_SIZE="2", LOCAL_RANK=str(rank), NODE_RANK="0")
    return subprocess.Popen([sys.executable, "-m", "fedlight", "fit", "--recipe", str(recipe), "fabric.devices=2",
                             "fabric.threads=1", *overrides], env=env, stdout=subprocess.DEVNULL,
                            stderr=log.open("wb"))


def _ended(proc: subprocess.Popen, log: Path) -> tuple[int, list[str]]:
    """(exit code, fedlight's lines on stderr) once ``proc`` ends; a test failure if it hangs."""
    try:
        code = proc.wait(timeout=NO_HANG)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the rank still waits after {NO_HANG} s:\n{log.read_text(errors='replace')[-2000:]}")
    return code, [line for line in log.read_text(errors="replace").splitlines() if line.startswith("fedlight:")]


def _listening(port: int) -> bool:
    """Whether a socket of this machine listens on ``port`` (read from /proc: no packet sent)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            local, state = row.split()[1], row.split()[3]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                return True
    return False


def test_a_rank_whose_peer_never_joins_or_was_killed_exits_in_one_line(tmp_path: Path, tiny_recipe: Path) -> None:
    """Rank 1 alone (its rank 0 never started: nothing listens) and rank 0 whose rank 1 was killed
    before it joined: each ends after fabric.rendezvous_timeout_min with one line naming the address
    and port it waited on and what to check, exit 2. Before, both waited for gloo's 30 minutes."""
    timeout = f"fabric.rendezvous_timeout_min={TIMEOUT_MIN}"
    alone_port, killed_port = _free_port(), _free_port()
    logs = {name: tmp_path / f"{name}.err" for name in ("alone", "rank0", "killed")}
    alone = _rank(tiny_recipe, 1, alone_port, logs["alone"], timeout, f"run.dir={tmp_path / 'alone'}")
    killed = _rank(tiny_recipe, 1, killed_port, logs["killed"], timeout, f"run.dir={tmp_path / 'run'}")
    killed.kill()  # before it has imported torch, let alone joined
    killed.wait()
    rank0 = _rank(tiny_recipe, 0, killed_port, logs["rank0"], timeout, f"run.dir={tmp_path / 'run'}")
    for proc, name, rank, port in ((alone, "alone", 1, alone_port), (rank0, "rank0", 0, killed_port)):
        code, lines = _ended(proc, logs[name])
        assert code == 2 and len(lines) == 1, logs[name].read_text()[-3000:]
        assert lines[0].startswith(f"fedlight: error: rank {rank} of 2 could not join the other ranks at "
                                   f"127.0.0.1:{port} within fabric.rendezvous_timeout_min={TIMEOUT_MIN}")
        assert "MASTER_ADDR" in lines[0] and "firewall" in lines[0] and "every rank was started" in lines[0]
    assert not (tmp_path / "run").exists()  # rank 0's claim on the run folder is given back as it was


ALONE = """
import sys, time
from lightning.fabric import Fabric
from fedlight.engine.loop import preemption
from fedlight.engine.run import rendezvous
from fedlight.errors import UserError
fabric = Fabric(accelerator="cpu", devices=2, strategy=rendezvous.strategy({minutes}))
start = time.monotonic()
try:
    with preemption.signals_handled():
        rendezvous.join(fabric, {minutes})
except UserError as exc:
    print(time.monotonic() - start)
    sys.exit(f"fedlight: error: {{exc}}")
"""


def test_a_rank_other_than_0_gives_up_at_the_deadline_in_one_line(tmp_path: Path) -> None:
    """Rank 1 whose rank 0 never starts ends within 2 s of fabric.rendezvous_timeout_min, and its stderr is
    the one line. Before, torch's store client retried after a random delay of up to the whole timeout
    (1.8-2.9 x the deadline) and logged two C++ backtraces (32 frame lines) first."""
    minutes = 0.1  # 6 s
    env = {k: v for k, v in os.environ.items() if k not in launch.EXTERNAL_LAUNCH and not k.startswith("SLURM_")}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
               WORLD_SIZE="2", NODE_RANK="0", LOCAL_RANK="1")
    done = subprocess.run([sys.executable, "-c", ALONE.format(minutes=minutes)], env=env, capture_output=True,
                          text=True, timeout=NO_HANG)
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done.stderr[-3000:]
    assert done.stderr.startswith("fedlight: error: rank 1 of 2 could not join the other ranks at 127.0.0.1:")
    assert minutes * 60 <= float(done.stdout) <= minutes * 60 + 2, done.stdout


def test_a_signal_ends_a_rank_waiting_at_the_rendezvous(tmp_path: Path, tiny_recipe: Path) -> None:
    """Three ranks 0 wait for ranks 1 that never come (the default 10-minute deadline); SIGTERM or
    SIGUSR1 end theirs at once with one line and exit 3, as a preempted run, and SIGINT with exit
    130; none leaves its run folder behind (before, one with only the lock file stayed). Before, SIGTERM and SIGUSR1 only set the preemption flag and SIGINT's KeyboardInterrupt
    waited too: the main thread, inside torch's wait, never ran their handlers."""
    sigs = {signal.SIGTERM: 3, signal.SIGUSR1: 3, signal.SIGINT: 130}
    ranks = {sig: (_free_port(), tmp_path / f"{sig.name}.err") for sig in sigs}
    procs = {sig: _rank(tiny_recipe, 0, port, log, f"run.dir={tmp_path / sig.name}") for sig, (port, log) in ranks.items()}
    for sig, proc in procs.items():
        port, log = ranks[sig]
        deadline = time.time() + NO_HANG
        while not _listening(port) and proc.poll() is None and time.time() < deadline:  # torch's store waits there
            time.sleep(0.1)
        assert _listening(port), log.read_text()[-3000:]
        proc.send_signal(sig)
    for sig, proc in procs.items():
        port, log = ranks[sig]
        code, lines = _ended(proc, log)
        assert code == sigs[sig] and len(lines) == 1, log.read_text()[-3000:]
        assert lines[0] == (f"fedlight: stopped by {sig.name} while rank 0 of 2 waited for the other ranks at "
                            f"127.0.0.1:{port}: nothing was trained since the last checkpoint; continue with --resume")
        assert not (tmp_path / sig.name).exists()  # rank 0 gave its claim on the run folder back


def _environ(pid: int) -> dict[str, str]:
    """A process's environment as /proc shows it."""
    return dict(v.split("=", 1) for v in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in v)


def _state(pid: int) -> str:
    """The process's state letter (R, S, T stopped, Z ended but not reaped), or '' once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return ""


def test_a_signal_to_rank_0_at_the_rendezvous_ends_the_local_ranks_it_started(tmp_path: Path,
                                                                              tiny_recipe: Path) -> None:
    """fedlight fit starts rank 1 of fabric.devices=2 itself; stopped (SIGSTOP) before it can join, it
    keeps rank 0 waiting. SIGTERM to rank 0 ends both. Before, rank 1 waited on to the deadline."""
    env = {k: v for k, v in os.environ.items() if k not in launch.EXTERNAL_LAUNCH and not k.startswith("SLURM_")}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    log = tmp_path / "rank0.err"
    rank0 = subprocess.Popen([sys.executable, "-m", "fedlight", "fit", "--recipe", str(tiny_recipe), "fabric.devices=2",
                              "fabric.threads=1"], env=env, stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    children = Path(f"/proc/{rank0.pid}/task/{rank0.pid}/children")
    deadline = time.time() + NO_HANG
    while not children.read_text().split() and time.time() < deadline:
        time.sleep(0.01)
    rank1 = int(children.read_text().split()[0])
    try:
        # forked but not yet exec'd, rank 1 still shows rank 0's environment (no MASTER_PORT): wait for its own;
        # it joins only after seconds of imports, so it is stopped well before
        while "MASTER_PORT" not in (rank1_env := _environ(rank1)) and time.time() < deadline:
            time.sleep(0.01)
        os.kill(rank1, signal.SIGSTOP)
        port = int(rank1_env["MASTER_PORT"])
        while not _listening(port) and rank0.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        rank0.send_signal(signal.SIGTERM)
        code, lines = _ended(rank0, log)
        assert code == 3 and len(lines) == 1 and lines[0].startswith("fedlight: stopped by SIGTERM"), log.read_text()
        while _state(rank1) not in ("", "Z") and time.time() < deadline:
            time.sleep(0.1)
        assert _state(rank1) in ("", "Z")
    finally:
        if _state(rank1):
            os.kill(rank1, signal.SIGKILL)
    assert not (tmp_path / "run").exists()


COLLECTIVE = """
import time
from pathlib import Path
import torch.distributed as dist
from lightning.fabric import Fabric
from fedlight.engine.loop import preemption
from fedlight.engine.run import rendezvous
fabric = Fabric(accelerator="cpu", devices=2, strategy=rendezvous.strategy({minutes}))
Path("{ready}", str(fabric.global_rank)).touch()  # the deadline is the rendezvous's, not the imports'
while len(list(Path("{ready}").iterdir())) < 2:
    time.sleep(0.05)
with preemption.signals_handled(), rendezvous.joined(fabric, {minutes}):
    if fabric.global_rank == 1:
        time.sleep({late})
    print(int(fabric.all_reduce(fabric.global_rank + 1, reduce_op="sum")))
print(dist.is_initialized())
"""


def test_collectives_after_the_rendezvous_keep_their_long_timeout(tmp_path: Path) -> None:
    """Rank 1 reaches its first all_reduce 2 x fabric.rendezvous_timeout_min after rank 0 (as
    ranks do while rank 0 evaluates): rank 0 waits for it instead of failing at the rendezvous's deadline.
    Each rank leaves the process group before it exits (one that did not was once aborted at exit, -6)."""
    env = {k: v for k, v in os.environ.items() if k not in launch.EXTERNAL_LAUNCH and not k.startswith("SLURM_")}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
               WORLD_SIZE="2", NODE_RANK="0")
    (tmp_path / "ready").mkdir()
    code = COLLECTIVE.format(minutes=TIMEOUT_MIN, late=2 * TIMEOUT_MIN * 60, ready=tmp_path / "ready")
    ranks = [subprocess.Popen([sys.executable, "-c", code], env={**env, "LOCAL_RANK": str(r)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    outs = [p.communicate(timeout=NO_HANG) for p in ranks]
    assert [p.returncode for p in ranks] == [0, 0], [err[-2000:] for _, err in outs]
    assert [out.split() for out, _ in outs] == [["3", "False"], ["3", "False"]]


def test_a_run_resumes_with_another_rendezvous_deadline_but_not_another_world(tmp_path: Path, tiny_recipe: Path) -> None:
    """The deadline models the cluster: --resume accepts a new one; fabric.devices stays the experiment's."""
    from dataclasses import asdict

    from fedlight.config import load_recipe
    from fedlight.engine.run.run_folder import check_run_dir
    from fedlight.engine.state.run_files import RECIPE, write_yaml
    from fedlight.errors import UserError

    run = tmp_path / "run"
    run.mkdir()
    write_yaml(run / RECIPE, asdict(load_recipe(tiny_recipe)))
    check_run_dir(run, asdict(load_recipe(tiny_recipe, ["fabric.rendezvous_timeout_min=30"])), resume=True, overwrite=False)
    with pytest.raises(UserError, match="differs from .* in fabric.devices; resume") as refused:
        check_run_dir(run, asdict(load_recipe(tiny_recipe, ["fabric.devices=2", "fabric.rendezvous_timeout_min=30"])),
                      resume=True, overwrite=False)
    assert "rendezvous" not in str(refused.value)
