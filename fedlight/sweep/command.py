"""``fedlight sweep``: grid x seeds -> resolved recipes, manifest, array script, ``sbatch``.

Every task's recipe is composed, overridden and type-checked (method and server keys against
their classes) before anything is written, so a bad grid writes nothing. Files are written
in this order: manifest, recipes, array script; finished tasks' files are left alone.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Callable

from fedlight.engine.fit import check_recipe
from fedlight.config import load_recipe
from fedlight.config.files import output_folder_problem
from fedlight.engine.rundir import write_json
from fedlight.errors import UserError
from fedlight.sweep import manifest as mf
from fedlight.sweep.grid import expand, parse_grid
from fedlight.sweep.plan import is_finished, summary, to_submit
from fedlight.sweep.slurm import (queued_tasks, render_array_script, require_sbatch, sbatch_command,
                                  split_slurm_args, submit)

SCRIPT = "array.sbatch"


def run_sweep(recipe: str, grid: list[str], seeds: int, out: str, submit_now: bool = False,
              resubmit_failed: bool = False, slurm_args: str = "", max_running: int | None = None,
              echo: Callable[[str], None] = print) -> dict:
    """Write (or refresh) the sweep in ``out``; submit it with ``submit_now``. Returns the manifest."""
    base = Path(recipe).resolve()
    out_dir = Path(out).resolve()
    blocked = output_folder_problem(out_dir)
    if blocked:
        raise UserError(f"--out {blocked}; choose another --out")
    extra_sbatch = split_slurm_args(slurm_args)
    axes = parse_grid(grid)
    if seeds < 1:
        raise UserError(f"--seeds {seeds}: give at least 1")
    if max_running is not None and max_running < 1:
        raise UserError(f"--max-running {max_running}: give at least 1 (or leave it out: no limit)")
    first = load_recipe(base)
    seed_list = [first.seed + i for i in range(seeds)]  # the recipe's seed, then the next ones
    tasks = expand(axes, seed_list)
    entries, texts = [], {}
    for task in tasks:
        overrides = [*task.overrides, f"run.dir={mf.run_path(out_dir, task.index)}"]
        resolved = load_recipe(base, overrides)
        check_recipe(resolved)  # what fit would refuse, each task refuses here, before anything is written
        entries.append(mf.task_entry(out_dir, task.index, task.overrides, resolved))
        texts[task.index] = (mf.recipe_text(resolved), resolved.rounds)
    grid_record = [{"key": a.key, "values": list(a.raw)} for a in axes]
    manifest = mf.new_manifest(base, grid_record, seed_list, entries)
    old = mf.read_manifest(out_dir)
    if old is not None:
        mf.check_same_sweep(old, manifest, out_dir)
        manifest["submissions"] = old.get("submissions", [])
    if submit_now:
        require_sbatch()

    finished = {i for i, (_, rounds) in texts.items() if is_finished(mf.run_path(out_dir, i), rounds)}
    queued = queued_tasks([sub["job_id"] for sub in manifest["submissions"]]) if resubmit_failed else set()
    if queued is None:
        echo("warning: squeue cannot tell which earlier tasks are still queued; they may be submitted twice")
    chosen = to_submit(manifest, finished, resubmit_failed, queued or set())
    script_text = render_array_script(out_dir, f"fedlight-{first.name}")  # its own errors come before any write
    (out_dir / "logs").mkdir(parents=True, exist_ok=True)
    write_json(out_dir / mf.MANIFEST, manifest)
    for index, (text, _) in texts.items():
        path = mf.recipe_path(out_dir, index)
        if index not in finished and not (path.is_file() and path.read_text() == text):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    script = out_dir / SCRIPT
    script.write_text(script_text)
    echo(f"sweep {out_dir}: {summary(manifest, finished, chosen)}")
    if not chosen:
        return manifest
    command = sbatch_command(script, chosen, max_running, extra_sbatch)
    if not submit_now:
        echo("submit with: " + shlex.join(command))
        return manifest
    job = submit(command)
    manifest["submissions"].append({"job_id": job, "tasks": chosen, "command": shlex.join(command)})
    write_json(out_dir / mf.MANIFEST, manifest)
    echo(f"submitted array job {job} ({len(chosen)} tasks); logs in {out_dir / 'logs'}")
    return manifest
