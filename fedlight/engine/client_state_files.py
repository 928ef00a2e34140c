"""Client states as files: one file per (client, version), committed by the round's checkpoint.

Under ``checkpoints/clients/`` beside ``last.pt``, each file is named::

    c<client>-r<version>-<sha256 of its bytes>.pt

``version`` is the 1-based round in which the client's state changed. A file is written once,
atomically (temporary file, fsync, rename), by the rank that owns the client, and read back
with ``torch.load(weights_only=True)`` (``safetensors`` is not a dependency of fedlight; a
torch file that holds only tensors runs no code either) after its bytes match the digest in
its name, so a truncated or edited file is detected by the name alone.

Nothing in the folder counts until a checkpoint commits it. A checkpoint that has completed
``r`` rounds commits, for every client, its newest file of a version <= r, plus the files its
manifest lists (``client_files``: client -> [version, sha256]; the clients that changed in the
checkpoint's round, and in a round a preemption stopped between clients, version r + 1 of
those that had trained). ``last.pt`` is written after every file of its round is on disk, so
a kill -9 anywhere leaves either the whole round visible or none of it: files of a later
version are a round killed before its checkpoint, ignored and removed on resume.
``last.pt.prev`` (round r - 1) needs each client's newest file <= r - 1, which ``prune`` keeps,
so a damaged file of the last round falls back to the previous checkpoint, as ``last.pt`` does.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from pathlib import Path
from typing import Any, Callable

import torch

from lightning.fabric import Fabric

from fedlight.engine.collectives import gather
from fedlight.errors import UserError, warnings_if_it_works

State = dict[str, torch.Tensor]
FOLDER = "clients"  # beside checkpoints/last.pt
MANIFEST = "client_files"  # the checkpoint's key: the round's changed clients, client -> [version, sha256]
_NAME = re.compile(r"c(\d+)-r(\d+)-([0-9a-f]{64})\.pt")
_TMP = re.compile(r"\.c(\d+)\.tmp")  # write_state's file while it writes


def file_name(client: int, version: int, digest: str) -> str:
    """``c<client>-r<version>-<sha256>.pt``."""
    return f"c{client}-r{version}-{digest}.pt"


def state_bytes(state: State) -> int:
    """The bytes of a state's tensors (what it takes in memory)."""
    return sum(v.numel() * v.element_size() for v in state.values())


def encode(state: State) -> bytes:
    """The bytes of a client's state (a torch file of named CPU tensors)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def write_state(folder: Path, client: int, version: int, state: State) -> tuple[str, int]:
    """Write ``state`` as ``client``'s file of ``version`` atomically; returns (its sha256, its bytes).

    Raises:
        UserError: the disk is full or the folder vanished (one line; nothing committed changes).
    """
    data = encode(state)
    digest = hashlib.sha256(data).hexdigest()
    path, tmp = folder / file_name(client, version, digest), folder / f".c{client}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write client state file '{path}' ({exc.strerror or exc}); the last checkpoint is "
                        "kept: free space on that disk, then rerun with --resume") from None
    return digest, len(data)


def sync_folder(folder: Path) -> None:
    """Make the renames of the files written so far durable (before a checkpoint commits them)."""
    if folder.is_dir():
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def damage(path: Path, digest: str) -> str | None:
    """What is wrong with the file at ``path`` whose bytes must hash to ``digest``, or None."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return "is missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if hashlib.sha256(data).hexdigest() != digest:
        return f"fails its sha256 check ({len(data)} bytes: truncated or corrupt)"
    return None


def read_state(path: Path, digest: str) -> State:
    """The state in ``path`` after its bytes match ``digest``.

    Raises:
        UserError: the file is missing, truncated or tampered with (one line naming it).
    """
    problem = damage(path, digest)
    if problem is None:
        try:
            with warnings_if_it_works():
                return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # matches its digest yet does not load: written by something else
            problem = f"does not load ({type(exc).__name__})"
    raise _needed_by_all(path, problem)


def _needed_by_all(path: Path, problem: str) -> UserError:
    """The one line for a damaged file that the last checkpoint and the one before both need."""
    return UserError(f"client state file '{path}' {problem}; every checkpoint left needs it: restore it from a "
                     "backup of the run folder, or rerun without --resume and with --overwrite")


def listed(ckpt: dict[str, Any]) -> dict[int, tuple[int, str]]:
    """The checkpoint's manifest: client -> (version, sha256); empty for a checkpoint that holds
    its clients' states itself (``clients``)."""
    return {int(c): (int(v), str(d)) for c, (v, d) in (ckpt.get(MANIFEST) or {}).items()}


def manifest_damage(ckpt: dict[str, Any], folder: Path) -> str | None:
    """What makes the files a checkpoint's manifest lists unusable (words that follow "needs"), or None.

    Every rank checks every listed file (a round's clients, not the population), so all ranks
    choose the same checkpoint.
    """
    for client, (version, digest) in sorted(listed(ckpt).items()):
        path = folder / file_name(client, version, digest)
        problem = damage(path, digest)
        if problem:
            return f"client state file '{path}', which {problem}"
    return None


class StateFiles:
    """The client state files of this rank's clients in ``folder``: client -> version -> sha256.

    Args:
        folder: ``checkpoints/clients``.
        owns: whether this rank keeps a client (``sampling.owner``).
    """

    def __init__(self, folder: Path, owns: Callable[[int], bool]) -> None:
        self.folder, self.owns = folder, owns
        self.versions: dict[int, dict[int, str]] = {}

    def scan(self) -> None:
        """Index this rank's files in the folder (on resume); its half-written temporary files go
        (another rank's may be being written now)."""
        self.versions = {}
        if not self.folder.is_dir():
            return
        for entry in os.scandir(self.folder):
            temporary = _TMP.fullmatch(entry.name)
            if temporary:
                if self.owns(int(temporary.group(1))):
                    Path(entry.path).unlink(missing_ok=True)
                continue
            found = _NAME.fullmatch(entry.name)
            if found and self.owns(int(found.group(1))):
                self.versions.setdefault(int(found.group(1)), {})[int(found.group(2))] = found.group(3)

    def path(self, client: int, version: int) -> Path:
        return self.folder / file_name(client, version, self.versions[client][version])

    def add(self, client: int, version: int, digest: str) -> None:
        """Record a file just written; another file of the same client and version (a round
        written again after a kill) goes."""
        old = self.versions.setdefault(client, {}).get(version)
        if old is not None and old != digest:
            (self.folder / file_name(client, version, old)).unlink(missing_ok=True)
        self.versions[client][version] = digest

    def committed(self, ckpt: dict[str, Any]) -> dict[int, int]:
        """client -> the version of its state that ``ckpt`` commits, for this rank's clients."""
        done, manifest = int(ckpt["rounds_completed"]), listed(ckpt)
        out = {}
        for client, versions in self.versions.items():
            if client in manifest and manifest[client][0] in versions:
                out[client] = manifest[client][0]
            elif older := [v for v in versions if v <= done]:
                out[client] = max(older)
        return out

    def drop_uncommitted(self, ckpt: dict[str, Any]) -> None:
        """Remove the files of a round killed before its checkpoint (nothing commits them)."""
        keep = self.committed(ckpt)
        done = int(ckpt["rounds_completed"])
        for client, versions in list(self.versions.items()):
            for version in [v for v in versions if v > done and keep.get(client) != v]:
                self._remove(client, version)

    def prune(self, kept_round: int) -> None:
        """Remove every file no checkpoint that has completed ``kept_round`` rounds or more can
        need: per client, those older than its newest file <= ``kept_round``."""
        for client, versions in list(self.versions.items()):
            floor = max((v for v in versions if v <= kept_round), default=None)
            for version in [v for v in versions if floor is not None and v < floor]:
                self._remove(client, version)

    def _remove(self, client: int, version: int) -> None:
        self.path(client, version).unlink(missing_ok=True)
        del self.versions[client][version]


def restore(fabric: Fabric, ckpt: dict[str, Any], folder: Path, owns: Callable[[int], bool]) -> StateFiles:
    """Index this rank's client state files, drop a round killed before its checkpoint and check
    that every file ``ckpt`` commits is intact (every rank; one collective).

    Raises:
        UserError: on every rank, naming the first damaged file any rank found.
    """
    index = StateFiles(folder, owns)
    index.scan()
    problem = None
    for client, version in sorted(index.committed(ckpt).items()):
        found = damage(index.path(client, version), index.versions[client][version])
        if found:
            problem = str(_needed_by_all(index.path(client, version), found))
            break
    problems = [p for p in gather(fabric, problem) if p]
    if problems:
        raise UserError(problems[0])
    index.drop_uncommitted(ckpt)  # only once the run resumes: a refusal leaves the folder as it was
    return index
