"""A run's and a sweep's own records, which no command writes over, and the file a command may write.

A run folder's ``results.json``, ``recipe.yaml``, ``checkpoints/`` and its bookkeeping (the lock, a
run kept aside while it is replaced) are what ``--resume``, ``fedlight export`` and ``fedlight report``
read back as the run; a sweep's manifest, task list, array script, task recipes, logs and TensorBoard
links are the sweep. A command that writes a file the user names (``fedlight export --out``,
``fedlight fit --write-recipe``) refuses them, with or without ``--overwrite``, and replaces any other
existing file only with ``--overwrite``.
"""

from __future__ import annotations

import os
from pathlib import Path

from fedlight.config.files import SWEEP_MANIFEST
from fedlight.engine.state.run_files import CHECKPOINT, RECIPE, RESULTS
from fedlight.errors import UserError

# what marks a folder as a run folder: a saved round, or a run's bookkeeping (run_folder.LOCK, REPLACED, MOVING)
RUN_BOOKKEEPING = (".fedlight.lock", ".fedlight-replaced", ".fedlight-replaced.partial")
RUN_MARKS = (RESULTS, CHECKPOINT, CHECKPOINT + ".prev", *RUN_BOOKKEEPING)
RUN_RECORDS = (RESULTS, RECIPE, Path(CHECKPOINT).parts[0], *RUN_BOOKKEEPING)  # a name, or a folder and all below
# a sweep's --out: its files (sweep.manifest.NAMES, sweep.command.SCRIPT) and folders (the task recipes,
# the logs, sweep.tensorboard_view.LINKS); its runs/ are run folders of their own
SWEEP_RECORDS = (SWEEP_MANIFEST, "tasks.txt", "array.sbatch", "recipes", "logs", "tensorboard")


def _is_run(folder: Path) -> bool:
    return any(os.path.lexists(folder / mark) for mark in RUN_MARKS)


def record_of(path: Path) -> str | None:
    """Whose record ``path`` is (``run folder 'runs/a'``, ``sweep 'sweeps/s'``), or None: the run's
    records in a folder that holds a run, the sweep's in a folder that holds a sweep's manifest."""
    path = Path(os.path.abspath(path))  # a link is replaced, not followed: its own folders decide
    for folder in path.parents:
        first = path.relative_to(folder).parts[0]
        if first in SWEEP_RECORDS and os.path.lexists(folder / SWEEP_MANIFEST):
            return f"sweep '{folder}'"
        if first in RUN_RECORDS and _is_run(folder):
            return f"run folder '{folder}'"
    return None


def refuse_record(path: Path, flag: str) -> None:
    """Refuse to write ``path`` where it is a run's or a sweep's own record.

    Raises:
        UserError: one line naming the file, whose it is and the fix.
    """
    owner = record_of(path)
    if owner is not None:
        raise UserError(f"{flag}: '{path}' is a record of {owner}, which no command writes over (not even with "
                        f"--overwrite); give {flag} another file")


def check_output_file(path: Path, flag: str, overwrite: bool) -> None:
    """Refuse to write the file ``path``: a run's or a sweep's record, a folder, or (without ``overwrite``)
    any existing file.

    Raises:
        UserError: one line naming the file and the fix.
    """
    refuse_record(path, flag)
    if path.is_dir():
        raise UserError(f"{flag}: '{path}' is a folder; give {flag} a file path")
    if os.path.lexists(path) and not overwrite:
        raise UserError(f"{flag}: '{path}' exists; add --overwrite to replace it, or give {flag} another file")
