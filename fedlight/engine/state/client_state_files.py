"""Client states as files: one file per (client, version), each recorded by the checkpoints that need it.

Under ``checkpoints/clients/`` beside ``last.pt``, each file is named::

    c<client>-r<version>-<sha256 of its bytes>.pt

``version`` is the 1-based round in which the client's state changed. A file is written once,
atomically (temporary file, fsync, rename), by the rank that owns the client, and read back
with ``torch.load(weights_only=True)`` (``safetensors`` is not a dependency of fedlight; a
torch file that holds only tensors runs no code either) after its bytes match the digest it
was recorded with.

Names are not trusted: a checkpoint records, for every client holding a state, the one file that
is that client's state (``client_state_files``: client -> [version, sha256], 87 bytes a
client in ``last.pt``), and a resumed run reads exactly those files after checking their bytes.
A missing recorded file is an error naming it, never a client silently reset; a file copied or
renamed into a client's name does not match its record; a file no record names (a stray, or a
client that does not exist) is ignored. ``last.pt`` is written after every file of its round is
on disk, so a kill -9 anywhere leaves either the whole round recorded or none of it: files of a
later version that no record names are a round killed before its checkpoint, removed on resume.
``last.pt.prev`` (round r - 1) needs each client's file it records, which ``prune`` keeps, so a
damaged file of the last round falls back to the previous checkpoint, as ``last.pt`` does.

Checkpoints of an earlier fedlight recorded only the round's changed clients (``client_files``);
for those the other clients' files are still found by name (``legacy_record``), once: the next
checkpoint records every client.
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

from fedlight.engine.state.collectives import gather
from fedlight.errors import UserError, warnings_if_it_works

State = dict[str, torch.Tensor]
FOLDER = "clients"  # beside checkpoints/last.pt
MANIFEST = "client_state_files"  # the checkpoint's key: every client holding state, client -> [version, sha256]
LEGACY_MANIFEST = "client_files"  # an earlier fedlight's key: only the round's changed clients
Record = dict[int, tuple[int, str]]  # client -> (version, sha256) of the file that is its state
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


def _entries(manifest: Any) -> Record:
    return {int(c): (int(v), str(d)) for c, (v, d) in (manifest or {}).items()}


def recorded(ckpt: dict[str, Any], folder: Path) -> Record:
    """Every client's state file a checkpoint records (empty for one that holds its clients'
    states itself, ``clients``); for an earlier fedlight's checkpoint, found by name."""
    if MANIFEST in ckpt:
        return _entries(ckpt[MANIFEST])
    if LEGACY_MANIFEST in ckpt:
        return legacy_record(ckpt, folder)
    return {}


def legacy_record(ckpt: dict[str, Any], folder: Path) -> Record:
    """What an earlier fedlight's checkpoint (its round's changes only) commits: per client, the
    file its manifest lists, else the client's newest file of a round it had completed."""
    done, listed = int(ckpt["rounds_completed"]), _entries(ckpt[LEGACY_MANIFEST])
    found: dict[int, dict[int, str]] = {}
    for name in os.listdir(folder) if folder.is_dir() else []:
        match = _NAME.fullmatch(name)
        if match:
            found.setdefault(int(match.group(1)), {})[int(match.group(2))] = match.group(3)
    out = {}
    for client, versions in found.items():
        if client in listed and listed[client][0] in versions:
            out[client] = listed[client]
        elif older := [v for v in versions if v <= done]:
            out[client] = (max(older), versions[max(older)])
    return {**out, **{c: e for c, e in listed.items() if c not in out}}  # a listed file gone: named as missing


def manifest_damage(ckpt: dict[str, Any], folder: Path) -> str | None:
    """What makes the files a checkpoint records unusable (words that follow "needs"), or None.

    Every rank looks at every record (``stat`` for most: one per client holding state), so all
    ranks choose the same checkpoint; the bytes are hashed for the files of the checkpoint's own
    round (the few only it needs, where ``last.pt.prev`` may still serve), every file a rank
    restores is hashed by that rank in ``restore``.
    """
    records = _entries(ckpt.get(MANIFEST) or ckpt.get(LEGACY_MANIFEST))
    if records and not folder.is_dir():
        return f"the client state folder '{folder}', which is missing (or not a folder)"
    done = int(ckpt["rounds_completed"])
    for client, (version, digest) in sorted(records.items()):
        path = folder / file_name(client, version, digest)
        problem = damage(path, digest) if version >= done else None if path.is_file() else "is missing"
        if problem:
            return f"client state file '{path}' (client {client}'s state), which {problem}"
    return None


class StateFiles:
    """The client state files of this rank's clients in ``folder``: client -> version -> sha256,
    the newest version being the client's state.

    Args:
        folder: ``checkpoints/clients``.
        owns: whether this rank keeps a client (``sampling.owner``).
    """

    def __init__(self, folder: Path, owns: Callable[[int], bool]) -> None:
        self.folder, self.owns = folder, owns
        self.versions: dict[int, dict[int, str]] = {}

    def path(self, client: int, version: int) -> Path:
        return self.folder / file_name(client, version, self.versions[client][version])

    def newest(self) -> Record:
        """client -> (version, sha256) of its state: its newest file."""
        return {c: (max(v), v[max(v)]) for c, v in self.versions.items() if v}

    def add(self, client: int, version: int, digest: str) -> None:
        """Record a file just written; another file of the same client and version (a round
        written again after a kill) goes."""
        old = self.versions.setdefault(client, {}).get(version)
        if old is not None and old != digest:
            (self.folder / file_name(client, version, old)).unlink(missing_ok=True)
        self.versions[client][version] = digest

    def tidy(self, done: int) -> None:
        """On resume, with ``versions`` holding this rank's recorded files: remove its half-written
        temporary files and the files of a round killed before its checkpoint (a version above
        ``done`` no record names); index its clients' older files, for ``prune``. Any other file
        (a stray, another client's name) is left alone and never read."""
        if not self.folder.is_dir():
            return
        for entry in os.scandir(self.folder):
            temporary, found = _TMP.fullmatch(entry.name), _NAME.fullmatch(entry.name)
            if temporary and self.owns(int(temporary.group(1))):
                Path(entry.path).unlink(missing_ok=True)
            if not found or not self.owns(int(found.group(1))):
                continue
            client, version, digest = int(found.group(1)), int(found.group(2)), found.group(3)
            mine = self.versions.get(client, {})
            if mine.get(version) == digest:
                continue
            if version > done and version not in mine:
                Path(entry.path).unlink(missing_ok=True)
            elif mine and version < max(mine):
                mine[version] = digest

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
    """Check that every file ``ckpt`` records for this rank's clients is intact, then index them
    and tidy the folder (``StateFiles.tidy``) (every rank; one collective).

    Raises:
        UserError: on every rank, naming the first damaged file any rank found.
    """
    index = StateFiles(folder, owns)
    index.versions = {c: {v: d} for c, (v, d) in recorded(ckpt, folder).items() if owns(c)}
    problem = None
    for client, versions in sorted(index.versions.items()):
        (version, digest), = versions.items()
        found = damage(index.path(client, version), digest)
        if found:
            problem = str(_needed_by_all(index.path(client, version), found))
            break
    problems = [p for p in gather(fabric, problem) if p]
    if problems:
        raise UserError(problems[0])
    index.tidy(int(ckpt["rounds_completed"]))  # only once the run resumes: a refusal leaves the folder as it was
    return index
