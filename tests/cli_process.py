"""``python -m fedlight ARGS`` as a real process that skips the seconds of imports: forked from a server
that imported torch, Lightning and fedlight once.

A test that needs the command line as a process of its own (its exit code, its output, a signal or
a SIGKILL mid-run, a run another process resumes) started one with ``subprocess``; each paid
Python's start and the imports of torch, Lightning and torchmetrics (about 5 s of CPU, three
times that on a busy 2-core machine) before fedlight ran a line. Here the process comes from
multiprocessing's fork server, which imports ``PRELOAD`` once per test session and forks a
child per command. The child is a process like any other: its own pid, environment and working
folder, its output to the files or pipes asked for, signals delivered to it, an exit code as
``subprocess`` reports it (``-9`` when killed); it runs ``fedlight.cli.run`` as ``python -m
fedlight`` does, ``atexit`` handlers included. The server only imports: it runs no torch kernel, so
no thread pool exists to be broken by the fork (``tests/test_cli_process.py`` checks it has one thread).

Where the Python start itself is what a test checks (what ``import fedlight`` or a command imports, a
rank ``launch`` starts) the test keeps ``subprocess``.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import subprocess
import sys
import tempfile
import traceback
from multiprocessing.reduction import DupFd
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[1]
# what ``python -m fedlight fit`` imports before it trains (``python -X importtime``): the rest is
# fedlight's own small modules, imported by the child
PRELOAD = ["torch", "torchvision", "lightning", "torchmetrics", "lightly.loss", "lightly.models.modules",
           "tensorboard", "fedlight.cli", "fedlight.engine.run.fit", "cli_process"]
_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(PRELOAD)


def _stop_server() -> None:
    """At the session's end, stop the server and reap it, so that no process outlives the tests and
    the CPU time of every forked command counts in this process's children (``/usr/bin/time pytest``)."""
    from multiprocessing import forkserver

    stop = getattr(forkserver._forkserver, "_stop", None)  # Python's own tests stop it so (3.9+)
    if stop is not None:
        stop()


atexit.register(_stop_server)


class _Fd:
    """A file descriptor of this process that the forked child receives as its own (sent over the
    fork server's socket: the child is not this process's fork)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        return _received, (DupFd(self.fd),)


def _received(dup: Any) -> int:
    return dup.detach()


def _child(args: list[str], env: dict[str, str], cwd: str, fds: tuple[int, int, int]) -> None:
    """The forked process: this environment, folder and standard streams, then ``fedlight.cli.run()``
    with ``args``; exits with its code as the interpreter would."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)  # block-buffered unless a terminal, as Python opens it
    sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    entries = [os.getcwd(), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    sys.path[:0] = [p for p in entries if p not in sys.path]  # what `python -m` puts first
    sys.argv = [str(REPO / "fedlight" / "__main__.py"), *args]
    multiprocessing.set_start_method(None, force=True)  # the platform's default again, not the fork server
    from fedlight.cli import run

    try:
        run()
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if stop.code is not None and not isinstance(stop.code, int):
            print(stop.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - what the interpreter does with an uncaught exception
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()  # an interpreter's exit runs them; a fork server's child would not
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


class ForkedProcess:
    """The ``subprocess.Popen`` of a forked ``python -m fedlight``: ``pid``, ``returncode``, ``poll``,
    ``wait``, ``send_signal``, ``terminate``, ``kill`` and ``communicate``."""

    def __init__(self, process: Any, captured: dict[str, IO[bytes]], text: bool) -> None:
        self.process, self.captured, self.text = process, captured, text
        self.pid: int = process.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self.process.exitcode is not None:
            self.returncode = self.process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.process.name, timeout)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(15)

    def kill(self) -> None:
        self.send_signal(9)

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Wait, then what went to each ``subprocess.PIPE`` (None for the others)."""
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.wait()
            raise
        return tuple(self._read(name) for name in ("stdout", "stderr"))

    def _read(self, name: str) -> Any:
        if name not in self.captured:
            return None
        file = self.captured.pop(name)
        file.seek(0)
        data = file.read()
        file.close()
        return data.decode(errors="replace") if self.text else data

    def __enter__(self) -> ForkedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.poll() is None:
            self.kill()
            self.wait()
        for name in list(self.captured):
            self._read(name)


def _stream(where: Any, name: str, captured: dict[str, IO[bytes]], opened: list[IO[bytes]], stdout: int) -> int:
    """The fd the child's stream ``name`` gets: PIPE is a temporary file read by ``communicate``
    (nothing to drain while the child runs), STDOUT the child's stdout, None this process's own."""
    if where == subprocess.PIPE:
        captured[name] = tempfile.TemporaryFile()
        return captured[name].fileno()
    if where == subprocess.DEVNULL:
        opened.append(open(os.devnull, "r+b"))
        return opened[-1].fileno()
    if where == subprocess.STDOUT:
        return stdout
    if where is None:
        return {"stdin": 0, "stdout": 1, "stderr": 2}[name]
    return where if isinstance(where, int) else where.fileno()


def start(args: list[str], env: dict[str, str] | None = None, cwd: str | Path | None = None,
          stdin: Any = subprocess.DEVNULL, stdout: Any = None, stderr: Any = None,
          text: bool = False) -> ForkedProcess:
    """``subprocess.Popen([sys.executable, "-m", "fedlight", *args], ...)``, forked: see the module."""
    captured: dict[str, IO[bytes]] = {}
    opened: list[IO[bytes]] = []
    fds = [_stream(stdin, "stdin", captured, opened, -1), _stream(stdout, "stdout", captured, opened, -1)]
    fds.append(_stream(stderr, "stderr", captured, opened, fds[1]))
    process = _CONTEXT.Process(target=_child, name=f"fedlight {' '.join(args[:2])}",
                               args=(list(args), dict(os.environ if env is None else env), str(cwd or os.getcwd()),
                                     tuple(_Fd(fd) for fd in fds)))
    process.start()  # the child has its own copies of the fds now
    for file in opened:
        file.close()
    return ForkedProcess(process, captured, text)


def run(args: list[str], env: dict[str, str] | None = None, cwd: str | Path | None = None,
        timeout: float | None = 300) -> subprocess.CompletedProcess:
    """``subprocess.run([sys.executable, "-m", "fedlight", *args], capture_output=True, text=True, ...)``, forked."""
    with start(args, env, cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        out, err = process.communicate(timeout=timeout)
    return subprocess.CompletedProcess([sys.executable, "-m", "fedlight", *args], process.returncode, out, err)


def popen(command: list[str], stdin: Any = None, stdout: Any = None, stderr: Any = None, env: dict[str, str] | None = None,
          cwd: str | Path | None = None, **ignored: Any) -> ForkedProcess:
    """``subprocess.Popen(command, ...)`` for a ``command`` that is ``[python, "-m", "fedlight", *args]``, forked,
    where a test lets fedlight start its own processes so (``fedlight sweep --executor local``'s tasks).

    ``start_new_session`` and ``preexec_fn`` are among the ``ignored``: the child is in the fork
    server's session, and the server ends with the tests.
    """
    if command[1:3] != ["-m", "fedlight"]:
        raise ValueError(f"not a `python -m fedlight` command: {command}")
    return start(command[3:], env, cwd, stdin, stdout, stderr)

