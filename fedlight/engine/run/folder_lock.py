"""One run at a time in a run folder: an exclusive ``flock`` on a file that names its holder.

Rank 0 holds it for the life of the run; the kernel releases it when the process ends, however
it ends. A second ``fedlight fit`` into a held folder is refused in one line naming the PID, and so
is a command that would move or delete a folder holding a held one (``held_below``).
"""

from __future__ import annotations

import fcntl
import os
import socket
import sys
from pathlib import Path

from fedlight.errors import UserError


class FolderLock:
    """An exclusive ``flock`` on a file that names its holder (PID and host)."""

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path, self.fd = path, fd

    @classmethod
    def acquire(cls, path: Path, folder: Path) -> FolderLock:
        """Lock ``path`` without waiting, and write this process's PID and host into it.

        Raises:
            UserError: another process holds it (its PID named), or ``folder`` refuses the file.
        """
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise not_writable(folder, exc) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode(errors="replace").split()
                os.close(fd)
                raise UserError(f"run folder '{folder}' is in use by another fedlight run "
                                f"({_describe_holder(holder)}); wait for it to end or stop it, "
                                "or set run.dir elsewhere") from None
            except OSError as exc:  # a file system without locks (some NFS / Lustre mounts)
                print(f"fedlight: warning: run folder '{folder}' cannot be locked ({exc.strerror}); "
                      "nothing stops a second run from using it at the same time", file=sys.stderr)
                return cls(path, fd)
            if _same_file(fd, path):
                break
            os.close(fd)  # its holder removed it while we opened it: lock the one there now
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        """Remove the file, then unlock it: a process that locks the removed file finds it gone and
        locks the one at its path instead (``acquire``)."""
        if self.fd is None:
            return
        try:
            if _same_file(self.fd, self.path):
                self.path.unlink()
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


def held_below(entries: list[Path], name: str) -> tuple[Path, str] | None:
    """The first folder under ``entries`` (each one a folder, or a file that is skipped) whose lock file
    ``name`` another process holds, with its holder's words (``PID 12``); None when no lock there is held.

    Asking takes a shared lock for a moment, so a run that starts in one of them at that very moment
    is refused as if the folder were held.
    """
    for entry in entries:
        if not entry.is_dir() or entry.is_symlink():
            continue
        for folder, _, files in os.walk(entry):
            if name in files:
                holder = _holder_if_held(Path(folder, name))
                if holder is not None:
                    return Path(folder), _describe_holder(holder)
    return None


def _holder_if_held(path: Path) -> list[str] | None:
    """The words of the lock file ``path`` when another process holds it, else None."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # gone since the folder was listed: its run has ended
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.pread(fd, 200, 0).decode(errors="replace").split()
    except OSError:  # a file system without locks: nothing to honour
        return None
    finally:
        os.close(fd)  # closing it lets a lock this took go
    return None


def _describe_holder(holder: list[str]) -> str:
    if not holder:
        return "its PID is not written yet"
    return f"PID {holder[0]}" + (f" on {holder[1]}" if len(holder) > 1 and holder[1] != socket.gethostname() else "")


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def not_writable(path: Path, exc: OSError) -> UserError:
    return UserError(f"run folder '{path}' is not writable ({exc.strerror}); set run.dir to a writable folder")
