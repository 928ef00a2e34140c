"""The checks of ``fedlight fit`` that need neither torch nor Lightning, run before either is imported.

A user error they can tell (a method, server or backbone name that names nothing, the data not
under ``data.root``, a run folder that does not fit ``--resume`` / ``--overwrite`` or cannot be
written) is then one line within a second, where it came after the 7-9 s of imports before. ``fit`` checks all of it again where it acts; this adds
no rule of its own.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from fedlight.catalog import check_names
from fedlight.config.schema import Recipe
from fedlight.data.locate import check_data_root
from fedlight.engine.run import launch
from fedlight.engine.run.run_folder import check_run_dir
from fedlight.optional import require_hf_datasets, require_loggers


def preflight(recipe: Recipe, resume: bool, overwrite: bool) -> None:
    """Raise the UserError ``fit`` would raise for ``recipe``'s data or run folder, reading only.

    Raises:
        UserError: an unknown ``method.name``, ``server.name``, ``model.backbone`` or ``faults.attack``, a logger whose
            package is not installed, the data is not under ``data.root``, or the run folder is refused
            (rank 0 only: the ranks it starts may look while it is already writing there).
    """
    check_names(recipe.method, recipe.server, recipe.model.backbone, recipe.plugins, recipe.faults.attack)
    require_loggers(recipe.loggers)
    d = recipe.data
    require_hf_datasets(d.name)
    check_data_root(d.name, d.root, d.download)
    if not launch.is_child():  # rank 0 owns the run folder (it alone claims it)
        check_run_dir(Path(recipe.run_dir), asdict(recipe), resume, overwrite, recipe.run.min_free_mb)
