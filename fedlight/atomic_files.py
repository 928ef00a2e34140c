"""Writing a file atomically: a temporary file in the same folder, flushed and fsync'ed, renamed over
the old one, then the folder fsync'ed, so a kill at any moment leaves the old file or the new one.

Torch-free and outside the engine: ``fedlight sweep`` writes its manifest with it without importing
torch, ``fedlight report`` its tables and plots, ``fit --write-recipe`` its recipe, and the engine its
checkpoints and run files.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import secrets
import signal
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from fedlight.errors import UserError


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        _lock_while_written(f.fileno())
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_failed(path: Path, tmp: Path, exc: OSError, then: str = "rerun with --resume") -> UserError:
    """A full disk or a vanished folder mid-run: one line; the file's previous version is kept.

    Args:
        path: the file that was being written.
        tmp: the temporary file beside it, removed here.
        exc: what the write raised.
        then: what to do once there is space again (a run resumes; a report is made again).
    """
    try:
        tmp.unlink(missing_ok=True)
    except OSError:
        pass
    kept = "its previous version is kept" if path.exists() else "nothing was written"
    return UserError(f"cannot write '{path}' ({exc.strerror or exc}); {kept}: {disk_fix(path, exc)}, then {then}")


def disk_fix(path: Path, exc: OSError) -> str:
    """What the user does about ``exc``, raised writing ``path``: free space on a full disk, else make its
    folder writable (a vanished or read-only folder)."""
    return "free space on that disk" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else f"make '{path.parent}' writable"


LEFTOVER = re.compile(r"\..+\.[0-9a-f]{8}\.tmp")  # atomic_write_bytes's temporary file, which a kill can leave


def leftover_pattern(name: str) -> re.Pattern[str]:
    """The temporary files of writes of the file ``name`` only (``LEFTOVER``'s form)."""
    return re.compile(rf"\.{re.escape(name)}\.[0-9a-f]{{8}}\.tmp")


def remove_leftovers(folder: Path, pattern: re.Pattern[str] = LEFTOVER) -> list[Path]:
    """Delete the temporary files killed writes left in ``folder`` (those ``pattern`` matches), and return
    them. A live writer's file has the same form but is locked while it is written (``write_synced``):
    it is kept."""
    gone = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if pattern.fullmatch(entry.name) and entry.is_file(follow_symlinks=False) and _abandoned(entry.path):
                Path(entry.path).unlink(missing_ok=True)
                gone.append(Path(entry.path))
    return gone


def _lock_while_written(fd: int) -> None:
    """Mark a temporary file as being written: an exclusive ``flock`` the kernel drops when its writer
    ends, however it ends (a file system without locks: unmarked)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        pass


def _abandoned(path: str) -> bool:
    """Whether no live process writes the temporary file ``path`` (``_lock_while_written``)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:  # a file system without locks: only a killed write leaves one
        return True
    finally:
        os.close(fd)
    return True


class _Terminated(BaseException):
    """SIGTERM arrived while a temporary file existed (``_sigterm_removes``)."""


@contextmanager
def _sigterm_removes(tmp: Path) -> Iterator[None]:
    """Within the block, a SIGTERM that would end the process outright (no handler of its own) removes
    ``tmp`` first, then ends it as SIGTERM would have. A process that handles SIGTERM (a run's
    preemption, a sweep) keeps its handler; the caller removes ``tmp`` on the exception it raises."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def terminated(signum: int, frame: object) -> None:
        raise _Terminated

    signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    except _Terminated:
        tmp.unlink(missing_ok=True)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)  # ends the process here
        raise
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def atomic_write_bytes(path: Path, data: bytes, then: str = "rerun with --resume") -> None:
    """Write ``data`` to ``path`` atomically (temp file + fsync + rename + directory fsync).

    Raises:
        UserError: the write failed (``then`` says what to do once there is space again).
    """
    # a name of its own: two writers of one file (two `fedlight report --out` at once) must not rename each
    # other's half-written bytes into place; a kill's leftover starts with '.' and ends with '.tmp'
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")  # LEFTOVER's form
    try:
        with _sigterm_removes(tmp):
            path.parent.mkdir(parents=True, exist_ok=True)
            write_synced(tmp, data)
            os.replace(tmp, path)
            fsync_dir(path.parent)
    except OSError as exc:
        raise write_failed(path, tmp, exc, then) from None
    except BaseException:  # Ctrl-C (KeyboardInterrupt), a handler's exception: no full-size file left behind
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: object, then: str = "rerun with --resume") -> None:
    """Write ``obj`` to ``path`` as indented JSON, atomically (``atomic_write_bytes``)."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2) + "\n").encode(), then)
