"""The run folder: one run at a time, nothing replaced before the new run has saved.

Rank 0 of a run holds an exclusive ``flock`` on ``.fedlight.lock`` in the folder for the life of
the run (``folder_lock``); the kernel releases it when the process ends, however it ends. A second
``fedlight fit`` into a held folder is refused in one line naming the PID that holds it. Under the
lock, the claim finishes what a killed run left half done and moves a run it replaces aside
(``replaced_run``), after ``claim_plan`` has decided from the flags and what the folder holds
(``folder_contents``) whether the run resumes, replaces or is refused.

Every check that can refuse the folder runs before any of this: a refusal leaves it as it was.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from fedlight.atomic_files import remove_leftovers
from fedlight.config.files import length_problem, output_folder_problem
from fedlight.engine.run.claim_plan import plan_claim
from fedlight.engine.run.folder_contents import LOCK, MOVING, REPLACED, WRITE_PROBE, run_entries
from fedlight.engine.run.folder_lock import FolderLock, not_writable
from fedlight.engine.run.replaced_run import WAIT_FOR_IT, delete_entry, move_aside, recover, refuse_in_use_below
from fedlight.engine.state.run_files import CHECKPOINT
from fedlight.errors import UserError

CHECKPOINT_FOLDER = Path(CHECKPOINT).parent


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (None if ``path`` exists)."""
    missing = None
    for folder in [path, *path.parents]:
        if folder.exists():
            return missing
        missing = folder
    return missing


def _remove_empty(path: Path, top: Path | None) -> None:
    """Remove the empty folders from ``path`` up to ``top`` (what this run created); stop at one that is not empty."""
    if top is None:
        return
    for folder in [path, *path.parents]:
        try:
            if folder.exists():
                folder.rmdir()
        except OSError:
            return
        if folder == top:
            return


class RunFolder:
    """Rank 0's hold on a run folder, from ``claim_run_dir`` to ``release``.

    Attributes:
        path: the run folder.
        resume: whether the run continues from the folder's checkpoint.
    """

    def __init__(self, path: Path, lock: FolderLock, created: Path | None, resume: bool) -> None:
        self.path, self.resume = path, resume
        self._lock, self._created = lock, created

    def release(self, warn: bool = True) -> None:
        """The run ended: a run it replaced is gone if it finished, back if it saved nothing, else kept
        aside (also when another run holds a folder that would go: one warning line unless not
        ``warn``); a folder it made and left empty goes."""
        try:
            problem = recover(self.path)
            if problem and warn:
                print(f"fedlight: warning: {problem}; both runs are kept in it until the next fedlight fit "
                      "into it", file=sys.stderr)
        finally:
            empty = self._created is not None and not run_entries(self.path)
            self._lock.release()
            if empty:
                _remove_empty(self.path, self._created)


def claim_run_dir(path: Path, recipe: dict[str, Any], resume: bool, overwrite: bool,
                  min_free_mb: int = 0) -> RunFolder:
    """Lock ``path`` for this run and make it ready, or refuse it in one line with the folder as it was.

    A used folder needs ``resume`` (the same experiment: ``recipe`` is compared with the saved
    one) or ``overwrite``; the disk must have ``min_free_mb`` MiB free and the folder must take
    writes. A run it replaces is moved aside, not deleted (see the module docstring).

    Raises:
        UserError: the flags contradict each other or do not fit the folder, it is held by another
            run, it is not writable, or its disk is too full.
    """
    _check_flags_and_disk(path, resume, overwrite, min_free_mb)
    created = _first_missing(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _remove_empty(path, created)
        raise not_writable(path, exc) from None
    try:
        lock = FolderLock.acquire(path / LOCK, path)
    except UserError:
        _remove_empty(path, created)  # a folder another run has just locked is not empty: it stays
        raise
    folder = RunFolder(path, lock, created, resume=False)
    try:
        for part in (path, path / CHECKPOINT_FOLDER):  # the lock is held: no one else writes there now
            if part.is_dir():
                remove_leftovers(part)
        problem = recover(path)
        if problem:
            raise UserError(f"{problem}; {WAIT_FOR_IT}")
        folder.resume, replace = plan_claim(path, recipe, resume, overwrite)
        _probe_writes(path)
        if replace and (path / REPLACED).is_dir():  # an unfinished replacement: the run it replaces stays aside
            refuse_in_use_below(path, run_entries(path))
            for entry in run_entries(path):
                delete_entry(entry)
        elif replace:
            move_aside(path)
    except BaseException as exc:
        folder.release(warn=not isinstance(exc, UserError))  # a refusal says it once
        raise
    return folder


def check_run_dir(path: Path, recipe: dict[str, Any], resume: bool, overwrite: bool, min_free_mb: int = 0) -> None:
    """Refuse ``path`` as ``claim_run_dir`` would, only reading: no lock taken, no folder made, nothing moved.

    ``fedlight fit`` asks before it imports torch, so a wrong flag or a folder in the way is one
    line within a second, not after the 7-9 s of imports. Two refusals stay the claim's: a folder
    another run holds (only the lock tells) and one a killed run left half replaced (the claim
    finishes that move first, under the lock, which can change what the folder holds).

    Raises:
        UserError: as ``claim_run_dir``.
    """
    _check_flags_and_disk(path, resume, overwrite, min_free_mb)
    problem = output_folder_problem(path)
    if problem:
        raise UserError(f"run folder: {problem}; set run.dir to a writable folder")
    if not (path / MOVING).exists() and not (path / REPLACED).exists():
        plan_claim(path, recipe, resume, overwrite)


def _check_flags_and_disk(path: Path, resume: bool, overwrite: bool, min_free_mb: int) -> None:
    if resume and overwrite:
        raise UserError("--resume and --overwrite contradict each other; pass only one")
    too_long = length_problem(path)  # first: a name too long for the file system cannot even be looked at
    if too_long:
        raise UserError(f"run.dir {too_long}; set run.dir to a shorter path")
    for stray in (path / REPLACED, path / MOVING):  # names a replacement moves a run through: folders of its own
        if stray.is_symlink() or stray.exists() and not stray.is_dir():
            raise UserError(f"run folder '{path}' holds '{stray}', which is not a folder fedlight made to keep "
                            "a replaced run in; move or delete it and rerun")
    check_free_space(path, min_free_mb)


def _probe_writes(path: Path) -> None:
    try:
        probe = path / WRITE_PROBE
        probe.write_bytes(b"x" * 4096)
        probe.unlink()
    except OSError as exc:
        raise not_writable(path, exc) from None


def check_free_space(path: Path, min_free_mb: int) -> None:
    """Raise a one-line UserError if the disk that will hold ``path`` has less than ``min_free_mb`` MiB free."""
    anchor = path.absolute()
    while not anchor.exists() and anchor != anchor.parent:
        anchor = anchor.parent
    try:
        free = shutil.disk_usage(anchor).free
    except OSError:
        return  # cannot tell: the write probe decides
    if free < min_free_mb * 2**20:
        raise UserError(f"run folder '{path}': its disk has {free / 2**20:.0f} MiB free, less than "
                        f"run.min_free_mb={min_free_mb}; free space or set run.dir to another disk")
