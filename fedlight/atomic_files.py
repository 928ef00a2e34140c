"""Writing a file atomically: a temporary file in the same folder, flushed and fsync'ed, renamed over
the old one, then the folder fsync'ed, so a kill at any moment leaves the old file or the new one.

Torch-free and outside the engine: ``fedlight sweep`` writes its manifest with it without importing
torch, ``fedlight report`` its tables and plots, ``fit --write-recipe`` its recipe, and the engine its
checkpoints and run files.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
from pathlib import Path

from fedlight.errors import UserError


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
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


def remove_leftovers(folder: Path) -> None:
    """Delete the temporary files killed writes left in ``folder`` (only while no one else writes there:
    a live writer's file has the same form)."""
    with os.scandir(folder) as entries:
        for entry in entries:
            if LEFTOVER.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                Path(entry.path).unlink(missing_ok=True)


def atomic_write_bytes(path: Path, data: bytes, then: str = "rerun with --resume") -> None:
    """Write ``data`` to ``path`` atomically (temp file + fsync + rename + directory fsync).

    Raises:
        UserError: the write failed (``then`` says what to do once there is space again).
    """
    # a name of its own: two writers of one file (two `fedlight report --out` at once) must not rename each
    # other's half-written bytes into place; a kill's leftover starts with '.' and ends with '.tmp'
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")  # LEFTOVER's form
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_synced(tmp, data)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        raise write_failed(path, tmp, exc, then) from None


def atomic_write_json(path: Path, obj: object, then: str = "rerun with --resume") -> None:
    """Write ``obj`` to ``path`` as indented JSON, atomically (``atomic_write_bytes``)."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2) + "\n").encode(), then)
