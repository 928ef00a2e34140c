"""What a run folder holds, read without changing anything: the run's results and checkpoint, whether
it finished, and whether the folder holds more than one run.

The folder's own bookkeeping (the lock, the replaced run kept aside and its move, the write probe)
belongs to the folder, not to its run. A replacement takes one run: a folder that holds more
(another run below it, a sweep, a repository, see ``NOT_A_RUN``) is refused in one line naming
what it holds.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fedlight.config.files import SWEEP_MANIFEST
from fedlight.engine.run.same_experiment import check_same_experiment
from fedlight.engine.state.run_files import CHECKPOINT, RECIPE, RESULTS
from fedlight.errors import UserError

LOCK = ".fedlight.lock"
REPLACED = ".fedlight-replaced"
MOVING = REPLACED + ".partial"
WRITE_PROBE = ".write-test"  # written and deleted to see that the folder takes files (a kill can leave it)
BOOKKEEPING = frozenset({LOCK, REPLACED, MOVING, WRITE_PROBE})  # entries that belong to the folder, not to a run

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


def read_results(path: Path) -> dict[str, Any] | None:
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
    return bool((read_results(path) or {}).get("final"))


def run_progress(results: dict[str, Any]) -> str:
    """How far the run whose ``results.json`` holds ``results`` got, in words (``finished after 5 rounds``)."""
    done = results.get("rounds_completed")
    rounds = f"{done} rounds" if isinstance(done, int) and not isinstance(done, bool) else "rounds"
    return f"finished after {rounds}" if results.get("final") else f"{rounds} done"


def finished_results(path: Path, recipe: dict[str, Any]) -> dict[str, Any] | None:
    """The results of the finished run in ``path`` that ``--resume`` with ``recipe`` would only repeat
    (every round done, final metrics logged), or None when there is something left to do.

    Raises:
        UserError: ``recipe`` is another experiment than the run's.
    """
    results = read_results(path)
    if not results or not results.get("final") or not has_checkpoint(path) or (path / REPLACED).exists():
        return None
    if results.get("rounds_completed") != recipe["rounds"]:
        return None
    check_same_experiment(path, recipe)
    return results


def run_entries(path: Path) -> list[Path]:
    """The entries of the run folder ``path`` that belong to its run (not its bookkeeping); none if it is no folder."""
    return [p for p in path.iterdir() if p.name not in BOOKKEEPING] if path.is_dir() else []


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


def more_than_a_run(path: Path) -> str | None:
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


def refuse_more_than_a_run(path: Path) -> None:
    """Raise a one-line UserError where the run folder ``path`` holds more than a run (``more_than_a_run``)."""
    found = more_than_a_run(path)
    if found:
        raise UserError(f"run folder '{path}' holds {found}, which replacing the run there would delete; set run.dir "
                        "to the folder of the one run to replace (runs/<name> by default)")
