"""The run folder: one run at a time, nothing replaced before the new run has saved, and its files.

Rank 0 of a run holds an exclusive ``flock`` on ``.fedlight.lock`` in the folder for the life of
the run; the kernel releases it when the process ends, however it ends. A second ``fedlight fit``
into a held folder is refused in one line naming the PID that holds it.

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

A replacement takes one run: a folder that holds more (another run below it, a sweep, a
repository, see ``NOT_A_RUN``) is refused in one line naming what it holds.

Every check that can refuse the folder runs before any of this: a refusal leaves it as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from fedlight.atomic_files import remove_leftovers
from fedlight.config.files import SWEEP_MANIFEST, length_problem, output_folder_problem
from fedlight.engine.run.folder_lock import FolderLock, held_below, not_writable
from fedlight.engine.run.same_experiment import RESOLVED, check_same_experiment, saved_recipe
from fedlight.engine.state.run_files import CHECKPOINT, RECIPE, RESULTS
from fedlight.errors import UserError

LOCK = ".fedlight.lock"
REPLACED = ".fedlight-replaced"
MOVING = REPLACED + ".partial"
WRITE_PROBE = ".write-test"  # written and deleted to see that the folder takes files (a kill can leave it)
BOOKKEEPING = frozenset({LOCK, REPLACED, MOVING, WRITE_PROBE})  # entries that belong to the folder, not to a run
CHECKPOINT_FOLDER = Path(CHECKPOINT).parent
WAIT_FOR_IT = "wait for that run to end or stop it, or set run.dir elsewhere"

# What a run folder never holds, each a whole of its own that replacing the folder's run would delete
# with it (the file that marks it -> what it is). A rule of what it never holds, not a list of what it
# may: a logger added later (a folder of its own, as wandb/ and mlruns/ are) needs no change here, and
# nothing a run writes bears one of these names below its top level.
NOT_A_RUN = {SWEEP_MANIFEST: "a sweep", ".git": "a git repository", ".hg": "a Mercurial repository",
             ".svn": "a Subversion checkout"}
ANOTHER_RUN = {**dict.fromkeys((RESULTS, RECIPE, CHECKPOINT, CHECKPOINT + ".prev"), "another run"), **NOT_A_RUN}


def has_checkpoint(path: Path) -> bool:
    """Whether the run folder ``path`` holds a checkpoint to resume (``load_checkpoint`` falls back to ``.prev``)."""
    return (path / CHECKPOINT).is_file() or (path / (CHECKPOINT + ".prev")).is_file()


def _results(path: Path) -> dict[str, Any] | None:
    """The run's ``results.json`` as a mapping; None when there is none, {} when it is not one."""
    try:
        found = json.loads((path / RESULTS).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError):  # damaged, binary, nested past the recursion limit
        return {}
    return found if isinstance(found, dict) else {}


def is_finished(path: Path) -> bool:
    """Whether the run in ``path`` has finished: its ``results.json`` holds final metrics, written
    after its last round's checkpoint and its final logging."""
    return bool((_results(path) or {}).get("final"))


def _progress(results: dict[str, Any]) -> str:
    done = results.get("rounds_completed")
    rounds = f"{done} rounds" if isinstance(done, int) and not isinstance(done, bool) else "rounds"
    return f"finished after {rounds}" if results.get("final") else f"{rounds} done"


def finished_results(path: Path, recipe: dict[str, Any]) -> dict[str, Any] | None:
    """The results of the finished run in ``path`` that ``--resume`` with ``recipe`` would only repeat
    (every round done, final metrics logged), or None when there is something left to do.

    Raises:
        UserError: ``recipe`` is another experiment than the run's.
    """
    results = _results(path)
    if not results or not results.get("final") or not has_checkpoint(path) or (path / REPLACED).exists():
        return None
    if results.get("rounds_completed") != recipe["rounds"]:
        return None
    check_same_experiment(path, recipe)
    return results


def _run_entries(path: Path) -> list[Path]:
    return [p for p in path.iterdir() if p.name not in BOOKKEEPING] if path.is_dir() else []


def _move_entries(source: Path, target: Path) -> None:
    for entry in _run_entries(source):
        os.rename(entry, target / entry.name)


def _delete(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink()


def _in_use_below(path: Path, doomed: list[Path]) -> str | None:
    """Why the ``doomed`` entries of the run folder ``path`` cannot be moved or deleted (another run
    holds a folder among them), or None."""
    held = held_below(doomed, LOCK)
    if held is None:
        return None
    folder, holder = held
    return (f"'{folder}' is in use by another fedlight run ({holder}), and replacing run folder '{path}' "
            "would move or delete it")


def _refuse_in_use_below(path: Path, doomed: list[Path]) -> None:
    problem = _in_use_below(path, doomed)
    if problem:
        raise UserError(f"{problem}; {WAIT_FOR_IT}")


def _move_aside(path: Path) -> None:
    """The run in ``path`` goes to ``path/.fedlight-replaced``."""
    _refuse_in_use_below(path, _run_entries(path))
    moving = path / MOVING
    moving.mkdir()
    _move_entries(path, moving)
    os.rename(moving, path / REPLACED)


def _put_back(path: Path) -> None:
    """What ``path`` holds now goes; the run in ``path/.fedlight-replaced`` comes back."""
    for entry in _run_entries(path):
        _delete(entry)
    os.rename(path / REPLACED, path / MOVING)
    _finish_move(path)


def _finish_move(path: Path) -> None:
    """A move either way stopped halfway: ``path`` holds only the old run's entries, so the rest join them."""
    _move_entries(path / MOVING, path)
    (path / MOVING).rmdir()


def _recover(path: Path) -> str | None:
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
    problem = _in_use_below(path, [path / REPLACED] if finished else [*_run_entries(path), path / REPLACED])
    if problem:
        return problem
    if finished:
        shutil.rmtree(path / REPLACED)
    else:
        _put_back(path)
    return None


def _listing(folder: Path) -> tuple[set[str], list[str]]:
    """(the names in ``folder``, those of its folders in order), symbolic links not taken for folders (a
    replacement moves and deletes a link, never what it points to).

    Raises:
        OSError: ``folder`` cannot be read (a folder gone meanwhile has nothing).
    """
    try:
        with os.scandir(folder) as entries:
            found = list(entries)
    except FileNotFoundError:
        return set(), []
    return {e.name for e in found}, sorted(e.name for e in found if e.is_dir(follow_symlinks=False))


def _first_mark(folder: Path, names: set[str], marks: dict[str, str]) -> str | None:
    """The first of ``marks`` (a name, or a path such as ``checkpoints/last.pt``) in ``folder``, whose
    entries are ``names``."""
    for mark in marks:
        first = mark.split("/")[0]
        if first in names and (first == mark or os.path.lexists(folder / mark)):
            return mark
    return None


def _more_than_a_run(path: Path) -> str | None:
    """What in the run folder ``path`` is no part of its run, and replacing that run would delete with it:
    a sweep's manifest or a repository, or another run in any folder below (the run kept in
    ``.fedlight-replaced`` is the folder's own), or a folder below that cannot be read to tell; None when it
    holds one run at most. Depth first, by name, stopping at the first found: one listing a folder
    (``benchmarks/nested_runs.py``)."""
    marks, waiting = NOT_A_RUN, [path]  # the folder's own run's files mark it as a run folder: only below another
    while waiting:
        folder = waiting.pop()
        try:
            names, subs = _listing(folder)
        except OSError as exc:
            return f"a folder it cannot read to rule out another run ('{folder}': {exc.strerror}; make it readable)"
        found = _first_mark(folder, names, marks)
        if found:
            return f"{marks[found]} ('{folder / found}')"
        waiting += [folder / sub for sub in reversed(subs) if folder != path or sub not in BOOKKEEPING]
        marks = ANOTHER_RUN
    return None


def _refuse_more_than_a_run(path: Path) -> None:
    found = _more_than_a_run(path)
    if found:
        raise UserError(f"run folder '{path}' holds {found}, which replacing the run there would delete; set run.dir "
                        "to the folder of the one run to replace (runs/<name> by default)")


def _plan(path: Path, recipe: dict[str, Any], resume: bool, overwrite: bool) -> tuple[bool, bool]:
    """(resume from its checkpoint, move the run there aside) for ``path`` as it is now.

    Raises:
        UserError: the folder does not fit the flags.
    """
    used = bool(_run_entries(path))
    if resume:
        results = _results(path)
        if not has_checkpoint(path) and not (path / RECIPE).is_file() and results is None:
            raise UserError(f"run folder '{path}' has no checkpoint to resume ({CHECKPOINT}); drop --resume")
        check_same_experiment(path, recipe)  # with recipe.yaml gone, against the recipe results.json records
        if not has_checkpoint(path) and results is not None:  # results.json comes after the first checkpoint
            what = "is a directory" if (path / CHECKPOINT).is_dir() else "is missing"
            raise UserError(f"run folder '{path}' has {RESULTS} ({_progress(results)}) but '{path / CHECKPOINT}' "
                            f"{what}: put the run's checkpoints back to resume it, or pass --overwrite instead "
                            "of --resume to train it again from round 0 (in a sweep: delete the run folder)")
        # a run killed before its first checkpoint saved only its recipe: it starts again from round 0
        plan = has_checkpoint(path), not has_checkpoint(path)
    elif used and not overwrite:
        raise UserError(_used_folder(path, recipe))
    else:
        plan = False, used
    if plan[1]:  # what it holds goes: nothing but a run may
        _refuse_more_than_a_run(path)
    return plan


def _used_folder(path: Path, recipe: dict[str, Any]) -> str:
    """The refusal of the used run folder ``path`` without a flag: another folder first (the run there
    is kept), then ``--resume`` where it takes that run, then ``--overwrite`` and what it deletes."""
    results = _results(path)
    what = f"a run ({_progress(results)})" if results else "a run"
    free = _free_name(path, recipe)
    elsewhere = f"name={free} or run.dir=PATH" if free else "run.dir=PATH"
    resume = _resume_hint(path, recipe)
    entries = sorted(p.name for p in _run_entries(path))
    doomed = ", ".join(entries[:6]) + (", ..." if len(entries) > 6 else "")
    return (f"run folder '{path}' is not empty{_kept_aside(path)}: it holds {what}; to keep that run, give this "
            f"one its own folder with {elsewhere}{resume}; or pass --overwrite to replace it, which deletes "
            f"what the folder holds ({doomed}) once this run finishes")


def _free_name(path: Path, recipe: dict[str, Any]) -> str | None:
    """A ``name`` whose ``runs/<name>`` is free beside ``path``, or None where ``run.dir`` picks the folder."""
    name = recipe.get("name")
    if not isinstance(name, str) or (recipe.get("run") or {}).get("dir"):
        return None
    runs = Path(*path.parts[:len(path.parts) - len(Path(name).parts)])  # runs/ of runs/<name>, name=exp1/seed0 too
    return next(f"{name}_{i}" for i in range(2, 10**6) if not os.path.lexists(runs / f"{name}_{i}"))


def _resume_hint(path: Path, recipe: dict[str, Any]) -> str:
    """What ``--resume`` with ``recipe`` would do with the run in ``path``, as the refusal's words; empty
    where it would be refused (another experiment, no checkpoint beside results.json) or there is none."""
    saved_only = not has_checkpoint(path) and (path / RECIPE).is_file() and _results(path) is None
    if not recipe or not (has_checkpoint(path) or saved_only):
        return ""
    try:
        check_same_experiment(path, recipe)
        saved = saved_recipe(path)
        done = finished_results(path, recipe) is not None
    except UserError:
        return ""
    if RESOLVED not in recipe and saved is not None:  # before torch (preflight) the sections' raw text decides
        if any(saved[1].get(k) != recipe.get(k) for k in ("method", "server", "plugins", "faults")):
            return ""
    if saved_only:
        return "; pass --resume to start it again from round 0 (it saved no round)"
    return "; raise rounds and pass --resume to train it further" if done else "; pass --resume to continue it"


def _kept_aside(path: Path) -> str:
    """The words that say a run is kept in ``.fedlight-replaced`` while its replacement is unfinished."""
    if not (path / REPLACED).is_dir():
        return ""
    return (f" (the run it replaces is kept in '{path / REPLACED}' until it finishes; to get that one back, "
            f"delete the folder's other entries and move those in '{REPLACED}' up one level)")


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
            problem = _recover(self.path)
            if problem and warn:
                print(f"fedlight: warning: {problem}; both runs are kept in it until the next fedlight fit "
                      "into it", file=sys.stderr)
        finally:
            empty = self._created is not None and not _run_entries(self.path)
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
        problem = _recover(path)
        if problem:
            raise UserError(f"{problem}; {WAIT_FOR_IT}")
        folder.resume, replace = _plan(path, recipe, resume, overwrite)
        _probe_writes(path)
        if replace and (path / REPLACED).is_dir():  # an unfinished replacement: the run it replaces stays aside
            _refuse_in_use_below(path, _run_entries(path))
            for entry in _run_entries(path):
                _delete(entry)
        elif replace:
            _move_aside(path)
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
        _plan(path, recipe, resume, overwrite)


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
