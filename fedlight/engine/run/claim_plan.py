"""What ``--resume`` and ``--overwrite`` do with a run folder as it is now: resume its run, replace
it, or refuse in one line that says what to do instead (another folder first, so the run there is
kept; then ``--resume`` where it takes that run; then ``--overwrite`` and what it deletes).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fedlight.engine.run.folder_contents import (finished_results, has_checkpoint, read_results,
                                                 refuse_more_than_a_run, run_entries, run_progress)
from fedlight.engine.run.replaced_run import kept_aside
from fedlight.engine.run.same_experiment import RESOLVED, check_same_experiment, saved_recipe
from fedlight.engine.state.run_files import CHECKPOINT, RECIPE, RESULTS
from fedlight.errors import UserError


def plan_claim(path: Path, recipe: dict[str, Any], resume: bool, overwrite: bool) -> tuple[bool, bool]:
    """(resume from its checkpoint, move the run there aside) for ``path`` as it is now.

    Raises:
        UserError: the folder does not fit the flags.
    """
    used = bool(run_entries(path))
    if resume:
        results = read_results(path)
        if not has_checkpoint(path) and not (path / RECIPE).is_file() and results is None:
            raise UserError(f"run folder '{path}' has no checkpoint to resume ({CHECKPOINT}); drop --resume")
        check_same_experiment(path, recipe)  # with recipe.yaml gone, against the recipe results.json records
        if not has_checkpoint(path) and results is not None:  # results.json comes after the first checkpoint
            what = "is a directory" if (path / CHECKPOINT).is_dir() else "is missing"
            raise UserError(f"run folder '{path}' has {RESULTS} ({run_progress(results)}) but '{path / CHECKPOINT}' "
                            f"{what}: put the run's checkpoints back to resume it, or pass --overwrite instead "
                            "of --resume to train it again from round 0 (in a sweep: delete the run folder)")
        # a run killed before its first checkpoint saved only its recipe: it starts again from round 0
        plan = has_checkpoint(path), not has_checkpoint(path)
    elif used and not overwrite:
        raise UserError(_used_folder(path, recipe))
    else:
        plan = False, used
    if plan[1]:  # what it holds goes: nothing but a run may
        refuse_more_than_a_run(path)
    return plan


def _used_folder(path: Path, recipe: dict[str, Any]) -> str:
    """The refusal of the used run folder ``path`` without a flag: another folder first (the run there
    is kept), then ``--resume`` where it takes that run, then ``--overwrite`` and what it deletes."""
    results = read_results(path)
    what = f"a run ({run_progress(results)})" if results else "a run"
    free = _free_name(path, recipe)
    elsewhere = f"name={free} or run.dir=PATH" if free else "run.dir=PATH"
    resume = _resume_hint(path, recipe)
    entries = sorted(p.name for p in run_entries(path))
    doomed = ", ".join(entries[:6]) + (", ..." if len(entries) > 6 else "")
    return (f"run folder '{path}' is not empty{kept_aside(path)}: it holds {what}; to keep that run, give this "
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
    saved_only = not has_checkpoint(path) and (path / RECIPE).is_file() and read_results(path) is None
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
