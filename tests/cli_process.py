"""``python -m fedlight ARGS`` (or ``python SCRIPT ARGS``) as a real process that skips the seconds of
imports: forked from a server that imported torch, Lightning and fedlight once.

A test that needs the command line as a process of its own (its exit code, its output, a SIGKILL
mid-run, a run another process resumes, the ranks a run starts) started one with ``subprocess``;
each paid Python's start and the imports of torch, Lightning and torchmetrics (about 5 s of CPU,
three times that on a busy 2-core machine) before fedlight ran a line. Here the process comes from
multiprocessing's fork server, which imports ``PRELOAD`` once per test session and forks a child
per command. The child is a process like any other: its own pid, environment (OMP_NUM_THREADS too,
which OpenMP read as the server imported torch), working folder and ``sys.path`` (the
interpreter's, after the module's folder and PYTHONPATH), its output to the files
or pipes asked for, signals delivered to it, an exit code as ``subprocess`` reports it (``-9`` when
killed); it runs the module or script as ``__main__`` through ``runpy``, as ``python`` does, and
its ``atexit`` handlers. The server only imports: it runs no torch kernel and touches no GPU, so
the fork copies no thread pool or CUDA context (``tests/test_cli_process.py`` checks both).

Where the interpreter's start itself is what a test checks (what ``import fedlight`` or a command
imports, a signal's handling by the real entry point, locks and rendezvous between processes), the
test keeps ``subprocess``. The children's modules are the server's: a test cannot run another
checkout of fedlight this way.
"""

from __future__ import annotations

import atexit
import functools
import json
import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
import traceback
from multiprocessing.reduction import DupFd
from pathlib import Path
from typing import IO, Any

import torch

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


@functools.cache
def interpreter_path() -> tuple[str, ...]:
    """The ``sys.path`` this interpreter starts with, before PYTHONPATH and the script's folder: the
    standard library and site-packages (a test's own additions to this process's path are no part of it)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    found = subprocess.run([sys.executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
                           env=env, capture_output=True, text=True, check=True)
    return tuple(json.loads(found.stdout))


def _child(command: list[str], env: dict[str, str], cwd: str, fds: tuple[int, int, int], path: tuple[str, ...]) -> None:
    """The forked ``python COMMAND`` (``-m MODULE ARGS`` or ``SCRIPT ARGS``): its environment, folder,
    ``sys.path`` and standard streams, then the module or script as ``__main__``; exits with its code
    as the interpreter would."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)  # block-buffered unless a terminal, as Python opens it
    sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    module = command[1] if command[0] == "-m" else None
    first = os.getcwd() if module else os.path.dirname(os.path.abspath(command[0]))  # what python puts first
    sys.path[:] = [first, *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p), *path]
    sys.argv = command[1:] if module else command  # runpy sets a module's argv[0] to its file
    multiprocessing.set_start_method(None, force=True)  # the platform's default again, not the fork server
    # OpenMP read OMP_NUM_THREADS when the server imported torch: this environment's, as a fresh process reads it
    threads = env.get("OMP_NUM_THREADS", "").split(",")[0]
    torch.set_num_threads(int(threads) if threads.isdigit() and int(threads) > 0 else len(os.sched_getaffinity(0)))
    try:
        if module:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(command[0], run_name="__main__")
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


def start(command: list[str], env: dict[str, str] | None = None, cwd: str | Path | None = None,
          stdin: Any = subprocess.DEVNULL, stdout: Any = None, stderr: Any = None,
          text: bool = False) -> ForkedProcess:
    """``subprocess.Popen([sys.executable, *command], ...)``, forked (see the module): ``command`` is
    ``["-m", MODULE, *args]`` or ``[SCRIPT, *args]``."""
    captured: dict[str, IO[bytes]] = {}
    opened: list[IO[bytes]] = []
    fds = [_stream(stdin, "stdin", captured, opened, -1), _stream(stdout, "stdout", captured, opened, -1)]
    fds.append(_stream(stderr, "stderr", captured, opened, fds[1]))
    process = _CONTEXT.Process(target=_child, name=" ".join(command[:3]),
                               args=(list(command), dict(os.environ if env is None else env), str(cwd or os.getcwd()),
                                     tuple(_Fd(fd) for fd in fds), interpreter_path()))
    process.start()  # the child has its own copies of the fds now
    for file in opened:
        file.close()
    return ForkedProcess(process, captured, text)


def run_python(command: list[str], env: dict[str, str] | None = None, cwd: str | Path | None = None,
               timeout: float | None = 300) -> subprocess.CompletedProcess:
    """``subprocess.run([sys.executable, *command], capture_output=True, text=True, ...)``, forked."""
    with start(command, env, cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        out, err = process.communicate(timeout=timeout)
    return subprocess.CompletedProcess([sys.executable, *command], process.returncode, out, err)


def run(args: list[str], env: dict[str, str] | None = None, cwd: str | Path | None = None,
        timeout: float | None = 300) -> subprocess.CompletedProcess:
    """``python -m fedlight ARGS``: ``run_python(["-m", "fedlight", *args], ...)``."""
    return run_python(["-m", "fedlight", *args], env, cwd, timeout)


def popen(command: list[str], stdin: Any = None, stdout: Any = None, stderr: Any = None,
          env: dict[str, str] | None = None, cwd: str | Path | None = None, **ignored: Any) -> ForkedProcess:
    """``subprocess.Popen(command, ...)`` for a ``command`` of this interpreter (``[sys.executable, *rest]``),
    forked, where a test lets fedlight start its processes so (``fedlight sweep --executor local``'s tasks).

    ``start_new_session`` and ``preexec_fn`` are among the ``ignored``: the child is in the fork
    server's session, and the server ends with the tests.
    """
    if command[0] != sys.executable:
        raise ValueError(f"not a command of this interpreter ({sys.executable}): {command}")
    return start(command[1:], env, cwd, stdin, stdout, stderr)

