"""A replaced run, kept aside until the run that replaces it has finished.

Replacing a run (``--overwrite``, or ``--resume`` of a run that saved no round) moves the old
one into ``.fedlight-replaced/`` inside the folder, and deletes it once the new run has finished
(its ``results.json`` holds final metrics). A new run that ends before its first checkpoint puts
the old one back: at once if it raised, or, after a kill, at the next ``fedlight fit`` into the
folder. A new run stopped later (a kill, a preemption, an error) leaves both: the old run stays
aside while ``--resume`` finishes the new one, a second ``--overwrite`` starts the new one again
(the old run still aside), and the old run comes back by hand (delete the folder's other entries,
then move those of ``.fedlight-replaced/`` up one level). Moves go through
``.fedlight-replaced.partial/`` (entry by entry, then one rename), so a kill halfway through
either move is finished by the next claim.

Nothing is moved or deleted while another run holds a folder below it (a run started in a
sub-folder, a sweep's tasks under its ``--out``): the claim refuses in one line naming that folder,
and a run that ends leaves its folder for the next claim with a one-line warning.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from fedlight.engine.run.folder_contents import LOCK, MOVING, REPLACED, has_checkpoint, is_finished, run_entries
from fedlight.engine.run.folder_lock import held_below
from fedlight.errors import UserError

WAIT_FOR_IT = "wait for that run to end or stop it, or set run.dir elsewhere"


def _move_entries(source: Path, target: Path) -> None:
    for entry in run_entries(source):
        os.rename(entry, target / entry.name)


def delete_entry(entry: Path) -> None:
    """Delete one entry of a run folder: a folder with all below it, a file, or a link (never what it points to)."""
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink()


def in_use_below(path: Path, doomed: list[Path]) -> str | None:
    """Why the ``doomed`` entries of the run folder ``path`` cannot be moved or deleted (another run
    holds a folder among them), or None."""
    held = held_below(doomed, LOCK)
    if held is None:
        return None
    folder, holder = held
    return (f"'{folder}' is in use by another fedlight run ({holder}), and replacing run folder '{path}' "
            "would move or delete it")


def refuse_in_use_below(path: Path, doomed: list[Path]) -> None:
    """Raise ``in_use_below``'s one line where another run holds a folder among the ``doomed`` entries."""
    problem = in_use_below(path, doomed)
    if problem:
        raise UserError(f"{problem}; {WAIT_FOR_IT}")


def move_aside(path: Path) -> None:
    """The run in ``path`` goes to ``path/.fedlight-replaced``."""
    refuse_in_use_below(path, run_entries(path))
    moving = path / MOVING
    moving.mkdir()
    _move_entries(path, moving)
    os.rename(moving, path / REPLACED)


def _put_back(path: Path) -> None:
    """What ``path`` holds now goes; the run in ``path/.fedlight-replaced`` comes back."""
    for entry in run_entries(path):
        delete_entry(entry)
    os.rename(path / REPLACED, path / MOVING)
    _finish_move(path)


def _finish_move(path: Path) -> None:
    """A move either way stopped halfway: ``path`` holds only the old run's entries, so the rest join them."""
    _move_entries(path / MOVING, path)
    (path / MOVING).rmdir()


def recover(path: Path) -> str | None:
    """Finish what a killed run left half done: a move, or a replacement it never saved; returns why
    it left a replacement as it was (another run holds a folder it would delete), or None."""
    if (path / MOVING).is_dir():
        _finish_move(path)
    if not (path / REPLACED).is_dir():
        return None
    finished = is_finished(path)  # the new run finished: it has replaced the old one
    if not finished and has_checkpoint(path):
        return None
    # else the new run saved nothing: the old one comes back
    problem = in_use_below(path, [path / REPLACED] if finished else [*run_entries(path), path / REPLACED])
    if problem:
        return problem
    if finished:
        shutil.rmtree(path / REPLACED)
    else:
        _put_back(path)
    return None


def kept_aside(path: Path) -> str:
    """The words that say a run is kept in ``.fedlight-replaced`` while its replacement is unfinished."""
    if not (path / REPLACED).is_dir():
        return ""
    return (f" (the run it replaces is kept in '{path / REPLACED}' until it finishes; to get that one back, "
            f"delete the folder's other entries and move those in '{REPLACED}' up one level)")
