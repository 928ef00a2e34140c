"""Atomic, verifiable checkpoints that cannot run code when loaded.

A checkpoint ``last.pt`` is written to a temporary file in the same folder, flushed and
fsync'ed, then renamed over the old one, so a kill at any moment leaves either the old or
the new file. Beside it:

* ``last.pt.prev``: the previous good checkpoint (a hard link, or a copy), so a checkpoint
  damaged after it was written (disk error, a stray write) costs one round, not the run;
* ``last.pt.sha256``: the sha256 of both files, in ``sha256sum`` format. It is written
  *before* the files are rotated and lists both digests, so at every moment each file on
  disk either matches a listed digest or is detected as damaged.

Loading verifies the digest, then reads with ``torch.load(weights_only=True)``: a
checkpoint file can hold tensors, containers and numbers, never code.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

import torch

from fedlight.atomic_files import atomic_write_bytes
from fedlight.atomic_files import fsync_dir as _fsync_dir
from fedlight.atomic_files import write_failed as _write_failed
from fedlight.atomic_files import write_synced as _write_synced
from fedlight.errors import UserError, warnings_if_it_works

PREV = ".prev"
DIGESTS = ".sha256"
_SHA256_LINE = re.compile(r"([0-9a-fA-F]{64}) [ *](.+)")  # sha256sum's text and binary modes
Check = Callable[[Any], "str | None"]


def sibling(path: Path, suffix: str) -> Path:
    """``last.pt`` -> ``last.pt<suffix>`` (``.prev``, ``.sha256``)."""
    return path.with_name(path.name + suffix)


def _keep_previous(path: Path) -> None:
    """Make ``path.prev`` the current ``path`` (hard link, else copy), atomically."""
    tmp = path.with_name(f".{path.name}{PREV}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(path, tmp)
    except OSError:  # file systems without hard links
        shutil.copyfile(path, tmp)
    os.replace(tmp, sibling(path, PREV))


def save_checkpoint(path: Path, obj: dict[str, Any]) -> None:
    """Serialise ``obj`` (tensors, dicts, lists, numbers, strings) to ``path`` atomically,
    keeping the previous checkpoint as ``path.prev`` and both digests in ``path.sha256``."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    data = buffer.getvalue()
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_synced(tmp, data)
    except OSError as exc:  # nothing of the old checkpoint has been touched yet
        raise _write_failed(path, tmp, exc) from None
    lines = f"{hashlib.sha256(data).hexdigest()}  {path.name}\n"
    listed, rotate = _listed(path), False
    if path.is_file():
        found = hashlib.sha256(path.read_bytes()).hexdigest()
        recorded = listed.get(path.name, found)
        # a damaged last.pt (a resume fell back to .prev) is not rotated over the intact .prev it was resumed from
        rotate = found == recorded or not sibling(path, PREV).is_file()
        kept = recorded if rotate else listed.get(path.name + PREV)  # damage stays detected either way
        if kept:
            lines = f"{kept}  {path.name}{PREV}\n" + lines
    atomic_write_bytes(sibling(path, DIGESTS), lines.encode())
    try:
        if rotate:
            _keep_previous(path)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as exc:
        raise _write_failed(path, tmp, exc) from None


def _listed(path: Path) -> dict[str, str]:
    """File name -> digest, as listed in ``path.sha256`` (empty when there is no such file)."""
    listing = sibling(path, DIGESTS)
    if not listing.is_file():
        return {}
    rows = [_SHA256_LINE.fullmatch(line) for line in listing.read_text(errors="replace").splitlines()]
    return {row.group(2): row.group(1).lower() for row in rows if row}


def _known_digests(path: Path) -> set[str] | None:
    """The digests listed in ``path.sha256`` (None when there is no such file)."""
    return set(_listed(path).values()) if sibling(path, DIGESTS).is_file() else None


def verified(path: Path) -> bool:
    """Whether the checkpoint file ``path`` is as written: it matches a digest of its intact listing
    (without a listing, only that it is there). Reads the file, loads nothing."""
    if not path.is_file() or _listing_problem(path):
        return False
    digests = _known_digests(path)
    return digests is None or hashlib.sha256(path.read_bytes()).hexdigest() in digests


def _read_verified(path: Path, digests: set[str] | None) -> tuple[dict[str, Any] | None, str]:
    """(checkpoint, "") if ``path`` is intact, else (None, what is wrong with it)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror})"
    if digests is not None and hashlib.sha256(data).hexdigest() not in digests:
        return None, f"fails its sha256 check ({len(data)} bytes: truncated or corrupt)"
    try:
        with warnings_if_it_works():  # e.g. torch's note on the pickle protocol of a file it then refuses
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True), ""
    except Exception as exc:  # truncation and corruption surface as many exception types
        return None, f"is corrupt or truncated ({type(exc).__name__})"


def read_checkpoint(path: Path) -> tuple[dict[str, Any] | None, str]:
    """``path`` alone, never its ``.prev``: (checkpoint, "") if it matches a digest its ``.sha256``
    lists (or there is no listing) and loads, else (None, what is wrong with it)."""
    return _read_verified(path, _known_digests(path))


def load_checkpoint(path: Path, check: Check | None = None, needs: Check | None = None) -> dict[str, Any]:
    """Load the checkpoint at ``path``, or its ``.prev`` if ``path`` is damaged or holds the wrong thing.

    Args:
        path: ``checkpoints/last.pt``.
        check: what is wrong with a checkpoint that loads (``'no key history'``, ``'a model of
            another method'``), or None: the caller's idea of what it must hold.
        needs: what is wrong with the files a checkpoint that loads needs beside it (words that
            follow "needs": ``"client state file 'x', which fails its sha256 check"``), or None:
            such a checkpoint is damaged, not the wrong one, and ``.prev`` is tried the same way.

    Raises:
        UserError: one line naming the file at fault (a checkpoint, or ``last.pt.sha256``) and a
            fix, when no intact checkpoint that passes ``check`` is left.
    """
    prev = sibling(path, PREV)
    if not path.is_file() and not prev.is_file():
        raise UserError(f"checkpoint '{path}' not found; start without --resume")
    listing_problem = _listing_problem(path)
    if listing_problem:
        raise UserError(f"{listing_problem}; it only lists the checkpoints' digests: delete it and rerun "
                        "with --resume (the checkpoints then load unverified)")
    digests = _known_digests(path)
    checks = (_is_checkpoint, *([check] if check else []))
    problem, kinds = "is missing", set()
    if path.is_file():
        ckpt, problem, kind = _read_checked(path, digests, checks, needs)
        if ckpt is not None:
            return ckpt
        kinds.add(kind)
    if prev.is_file():
        ckpt, prev_problem, kind = _read_checked(prev, digests, checks, needs)
        if ckpt is not None:
            print(f"fedlight: warning: checkpoint '{path}' {problem}; resuming from the previous one '{prev}' "
                  f"(round {ckpt['rounds_completed']})", file=sys.stderr)
            return ckpt
        problem += f", and '{prev}' {prev_problem}"
        kinds.add(kind)
    wrong_content = "wrong" in kinds
    # files beside them that are missing or damaged are named, not the listing of their digests
    if digests is not None and "needs" not in kinds and _stale_listing(path, checks):
        raise UserError(f"checkpoints '{path}' and '{prev}' load, but neither matches a digest in "
                        f"'{sibling(path, DIGESTS)}' (a listing from another run, or edited); if they are this "
                        "run's checkpoints, delete that listing and rerun with --resume")
    if "needs" in kinds and not wrong_content:
        raise UserError(f"checkpoint '{path}' {problem}; put what is missing or damaged back from a backup of the "
                        "run folder and rerun with --resume, or rerun with --overwrite instead to train from round 0")
    if wrong_content:
        raise UserError(f"checkpoint '{path}' {problem}; copy this run's own checkpoint back into "
                        f"'{path.parent}', or set run.dir to a new folder to start over (this one is kept)")
    raise UserError(f"checkpoint '{path}' {problem}; no intact checkpoint is left: "
                    "rerun without --resume and with --overwrite")


def _is_checkpoint(ckpt: Any) -> str | None:
    """What every fedlight checkpoint holds: a mapping with its completed rounds."""
    if not isinstance(ckpt, dict):
        return f"a {type(ckpt).__name__}, not a fedlight checkpoint"
    if not isinstance(ckpt.get("rounds_completed"), int):
        return "no 'rounds_completed' count: not a fedlight checkpoint"
    return None


def _read_checked(path: Path, digests: set[str] | None, checks: tuple[Check, ...],
                  needs: Check | None = None) -> tuple[dict[str, Any] | None, str, str]:
    """(checkpoint, "", "") if ``path`` is intact, passes ``checks`` and the files it ``needs`` are
    intact; else (None, what is wrong with it, which of "damaged", "wrong" (it loaded but holds the
    wrong thing) or "needs" (a file it needs is missing or damaged))."""
    ckpt, problem = _read_verified(path, digests)
    if ckpt is None:
        return None, problem, "damaged"
    wrong = next((p for p in (c(ckpt) for c in checks) if p), None)
    if wrong:
        return None, f"holds {wrong}", "wrong"
    damaged = needs(ckpt) if needs is not None else None
    return (None, f"needs {damaged}", "needs") if damaged else (ckpt, "", "")


def _stale_listing(path: Path, checks: tuple[Check, ...]) -> bool:
    """Whether both checkpoint files pass ``checks`` when read without their digests: then the
    listing is what is wrong (two files damaged at once that still load is not a plausible story)."""
    files = [path, sibling(path, PREV)]
    return all(f.is_file() and _read_checked(f, None, checks)[0] is not None for f in files)


def _listing_problem(path: Path) -> str | None:
    """What makes ``path.sha256`` something other than sha256sum lines for ``path`` and
    ``path.prev`` (garbage, another file's listing), or None (it is, or there is none)."""
    listing = sibling(path, DIGESTS)
    if not listing.is_file():
        return None
    lines = [line for line in listing.read_text(errors="replace").splitlines() if line.strip()]
    names = {path.name, path.name + PREV}
    bad = [line for line in lines if not ((m := _SHA256_LINE.fullmatch(line)) and m.group(2) in names)]
    if lines and not bad:
        return None
    what = f"its line {bad[0][:40]!r} is not" if bad else "it holds no line"
    return f"digest listing '{listing}' is damaged ({what} '<sha256>  {path.name}')"
