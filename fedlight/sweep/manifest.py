"""``manifest.json`` in a sweep's ``--out``: which task is which.

For every task it records the index, its run name, the resolved recipe file, the run folder,
the overrides that made it and a digest of the resolved recipe; and every submission (job
id and tasks; ``executor: local`` for the runs ``--executor local`` made). The digests are
the sweep's identity: an ``--out`` whose manifest lists other tasks or other recipes holds
another sweep and is refused.

Format 2 names runs by their grid values (``runs/alpha=0.1_seed=0``, ``fedlight.sweep.names``);
a format-1 manifest, from before, named them by index (``runs/0003``) and its sweep keeps those
names, so an old sweep folder is still refreshed, resumed and reported.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from fedlight.config.files import SWEEP_MANIFEST, escape_interpolations, read_json, read_yaml_mapping
from fedlight.config.standalone import recipe_text
from fedlight.config.schema import Recipe
from fedlight.engine.run.same_experiment import with_later_defaults
from fedlight.errors import UserError

MANIFEST = SWEEP_MANIFEST
NAMES = "tasks.txt"  # line i: task i's run name, for the array script (which reads no JSON)
FORMAT = 2
INDEX_NAMES = 1  # the format that named runs by their index


def recipe_path(out: Path, name: str) -> Path:
    """Where the task named ``name`` keeps its resolved recipe (the array script computes the same path)."""
    return out / "recipes" / f"{name}.yaml"


def run_path(out: Path, name: str) -> Path:
    """The run folder of the task named ``name`` (the array script computes the same path)."""
    return out / "runs" / name


def names_text(names: dict[int, str]) -> str:
    """``tasks.txt``: the run names in task order, one a line."""
    return "".join(f"{names[i]}\n" for i in sorted(names))


def new_manifest(base: Path, overrides: list[str], grid: list[dict[str, Any]], seeds: list[int],
                 tasks: list[dict[str, Any]], version: int = FORMAT) -> dict[str, Any]:
    """A manifest with no submissions; ``overrides`` are the ones every task shares; ``cwd``: the folder it
    was planned from, which the tasks' relative paths (``data.root: data``) are read from."""
    return {"fedlight_sweep": version, "base_recipe": str(base), "overrides": overrides, "grid": grid,
            "seeds": seeds, "tasks": tasks, "submissions": [], "cwd": str(Path.cwd())}


def task_entry(out: Path, index: int, name: str, overrides: list[str], recipe: Recipe) -> dict[str, Any]:
    return {"index": index, "name": name, "recipe": str(recipe_path(out, name)), "run_dir": str(run_path(out, name)),
            "overrides": overrides, "digest": hashlib.sha256(recipe_text(recipe).encode()).hexdigest()[:16]}


@contextmanager
def locked(out: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the sweep folder ``out`` (made if missing) for the block, which
    reads the manifest, writes it and submits: a second sweep into ``out`` waits for it (seconds: no
    sweep holds it while its tasks run), then reads what the first wrote instead of overwriting it.
    The kernel releases the lock when the process ends, however it ends."""
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out, os.O_RDONLY)  # the folder itself: no lock file to find among the sweep's files
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:  # a file system without locks (some NFS / Lustre mounts)
            print(f"fedlight: warning: sweep folder '{out}' cannot be locked ({exc.strerror}); "
                  "two sweeps into it at once may lose each other's manifest entries", file=sys.stderr)
        yield
    finally:
        os.close(fd)


def read_manifest(out: Path) -> dict[str, Any] | None:
    """The manifest in ``out``; None if ``out`` is missing or empty. Anything else in the way raises."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out '{out}' is a file; give a folder for the sweep")
    path = out / MANIFEST
    if not path.is_file():
        if out.is_dir() and any(out.iterdir()):
            raise UserError(f"--out '{out}' is not empty and holds no sweep ({MANIFEST}); choose a new or empty folder")
        return None
    keep = f"restore it, or choose a new --out (nothing under '{out}' is touched)"
    manifest = read_json(path, "sweep manifest", keep)
    if not isinstance(manifest, dict) or manifest.get("fedlight_sweep") not in (INDEX_NAMES, FORMAT):
        raise UserError(f"'{path}' is not a fedlight sweep manifest; choose another --out")
    problem = manifest_problem(manifest)
    if problem:
        raise UserError(f"sweep manifest '{path}' is damaged ({problem}); {keep}")
    return manifest


# what a manifest's entries hold, as this module writes them
TASK_FIELDS: dict[str, type] = {"index": int, "recipe": str, "run_dir": str, "overrides": list, "digest": str}
SUBMISSION_FIELDS: dict[str, type] = {"job_id": str, "tasks": list}
LOCAL = "local"  # a submission's executor when ``--executor local`` ran it (SLURM's have none)


def manifest_problem(manifest: dict[str, Any]) -> str | None:
    """What a hand-edited or truncated manifest lacks (``'task 3 has no digest'``), or None."""
    for section, fields in (("tasks", TASK_FIELDS), ("submissions", SUBMISSION_FIELDS)):
        entries = manifest.get(section)
        if not isinstance(entries, list):
            return f"no list of {section}"
        for i, entry in enumerate(entries):
            problem = _entry_problem(entry, fields)
            if problem:
                return f"{section}[{i}] {problem}"
    bad = next((s for s in manifest["submissions"] if not all(isinstance(t, int) for t in s["tasks"])), None)
    return None if bad is None else f"submission {bad['job_id']} lists a task that is not an index"


def _entry_problem(entry: Any, fields: dict[str, type]) -> str | None:
    if not isinstance(entry, dict):
        return f"is a {type(entry).__name__}, not an entry"
    for name, kind in fields.items():
        if not isinstance(entry.get(name), kind) or isinstance(entry.get(name), bool):
            return f"has no {name}" if name not in entry else f"has {name} {entry[name]!r}, not a {kind.__name__}"
    return None


def check_same_sweep(old: dict[str, Any], new: dict[str, Any], out: Path, resolved: dict[int, dict[str, Any]]) -> None:
    """Refuse ``out`` if its manifest describes other tasks than the sweep asked for now.

    A task whose digest differs is still the same when its recipe file there, with the keys a
    later fedlight added filled from their defaults (as a resumed run folder is read), equals
    ``resolved[index]`` (the task's resolved recipe now, as a plain mapping) but for ``run.hparams``,
    which the sweep sets (what the runs list in TensorBoard): a sweep written before an option
    existed is refreshed, not refused.
    """
    def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
        if (a["index"], a["overrides"]) != (b["index"], b["overrides"]):
            return False
        if a["digest"] == b["digest"]:
            return True
        path = Path(a["recipe"])
        fix = f"delete '{out}' to start the sweep over"
        return path.is_file() and (_compared(with_later_defaults(read_yaml_mapping(path, "sweep task recipe", fix)))
                                   == _compared(escape_interpolations(resolved[b["index"]])))  # as recipe_text writes it

    if len(old["tasks"]) != len(new["tasks"]) or not all(map(same, old["tasks"], new["tasks"])):
        raise UserError(f"--out '{out}' holds another sweep (its {MANIFEST} lists other tasks or recipes, "
                        f"from {old.get('base_recipe')}); choose a new --out, or delete '{out}' to start over")
    relative = sorted({str(r["data"]["root"]) for r in resolved.values()
                       if isinstance(r.get("data"), dict) and not Path(str(r["data"].get("root", "/"))).is_absolute()})
    if old.get("cwd") not in (None, new["cwd"]) and relative:  # a manifest from before it records none
        raise UserError(f"--out '{out}' is a sweep planned from '{old['cwd']}', and its tasks read data.root "
                        f"'{relative[0]}' relative to that folder (a task started from here would read another copy): "
                        f"run the sweep from '{old['cwd']}'")


def _compared(recipe: dict[str, Any]) -> dict[str, Any]:
    """A task's recipe as ``check_same_sweep`` compares it: without ``run.hparams``, which the sweep sets."""
    run = recipe.get("run")
    return {**recipe, "run": {k: v for k, v in run.items() if k != "hparams"}} if isinstance(run, dict) else recipe
