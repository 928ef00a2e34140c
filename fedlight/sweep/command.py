"""``fedlight sweep``: grid x seeds -> resolved recipes, manifest, then SLURM (``sbatch``) or local processes.

Every task's recipe is composed, overridden (the command's ``key=value`` overrides, then the
task's grid values and seed) and put through ``fit``'s own checks (``fit.check_elsewhere``: the
recipe, the method's constructor, and the data and partition where the data is on this machine)
before anything is written, so a grid with any task ``fit`` would refuse writes and submits
nothing: one line for each problem, naming its tasks by their overrides. Files are written in this order:
manifest, recipes, ``tasks.txt``, array script; finished tasks' files are left alone.
"""

from __future__ import annotations

import functools
import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from fedlight.atomic_files import atomic_write_bytes, atomic_write_json
from fedlight.config import Recipe, load_recipe
from fedlight.config.files import output_folder_problem
from fedlight.config.loader import parse_override
from fedlight.errors import UserError, UserErrors
from fedlight.sweep import manifest as mf
from fedlight.sweep.arms import Arm, arm_axes, parse_arms
from fedlight.sweep.grid import OWNED, Axis, Task, expand, parse_grid
from fedlight.sweep.local import Failure, LocalTask, run_local
from fedlight.sweep.names import run_names
from fedlight.sweep.plan import is_finished, summary, to_submit
from fedlight.sweep.slurm import (queued_tasks, render_array_script, require_sbatch, sbatch_command,
                                  split_slurm_args, submit)
from fedlight.sweep.tensorboard_view import LINKS, board_names, hparam_keys, link_runs

def cached_loader() -> Callable[..., Any]:
    """``load_dataset``, imported (with torch) on the first task that needs checking and cached: the
    tasks of a grid mostly share their data, and a finished sweep imports no torch."""
    @functools.cache
    def load(*args: Any) -> Any:
        from fedlight.data.sources import load_dataset

        return load_dataset(*args)
    return load


def check_task(resolved: Any, load: Callable[..., Any]) -> list[str]:
    """``fit.check_elsewhere`` for one task's recipe, imported (with torch) only when a task is checked;
    returns its warnings for clamped sizes."""
    from fedlight.engine.run.fit import check_elsewhere

    return check_elsewhere(resolved, load)


SCRIPT = "array.sbatch"
AGAIN = "run the same sweep command again"  # after a failed write: finished runs are kept, the rest go on
EXECUTORS = ("slurm", "local")


@dataclass(frozen=True)
class SweepOptions:
    """How to run a sweep: the executor and its options (the SLURM ones are refused with ``local``)."""

    executor: str = "slurm"
    submit_now: bool = False
    resubmit_failed: bool = False
    slurm_args: str = ""
    max_running: int | None = None
    parallel: int = 1

    def problem(self) -> str | None:
        """The first option that does not fit the executor, with the fix; None if all do."""
        if self.executor not in EXECUTORS:
            return f"--executor {self.executor}: choose one of {', '.join(EXECUTORS)}"
        if self.max_running is not None and self.max_running < 1:
            return f"--max-running {self.max_running}: give at least 1 (or leave it out: no limit)"
        if self.parallel < 1:
            return f"--parallel {self.parallel}: give at least 1"
        slurm_only = [flag for flag, given in (("--submit", self.submit_now), ("--slurm-args", self.slurm_args),
                                               ("--max-running", self.max_running is not None)) if given]
        if self.executor == "local" and slurm_only:
            return f"{slurm_only[0]} is for --executor slurm; --executor local runs the tasks now, --parallel N at once"
        if self.executor == "slurm" and self.parallel != 1:
            return "--parallel is for --executor local; with SLURM, --max-running M limits the tasks running at once"
        return None


@dataclass
class SweepOutcome:
    """The manifest as written, and the tasks a local run saw fail."""

    manifest: dict[str, Any]
    failed: list[Failure]


def check_overrides(overrides: list[str], axes: list[Axis], arms: list[Arm] = ()) -> None:
    """Refuse an override of a key the sweep sets (``run.dir``, ``arm`` with arms) or that a ``--grid``
    also sets; and an arm's override of a key the sweep's overrides set for every arm."""
    grid_keys = {a.key for a in axes}
    for text in overrides:
        key = parse_override(text)[0]  # fit's own parser: the same syntax, the same errors
        if key == "run.dir" or (key == "arm" and arms):
            raise UserError(f"override '{text}': {OWNED[key]}; drop it")
        if key in grid_keys:
            raise UserError(f"override '{text}' sets the --grid key '{key}'; give its values in --grid only")
    shared = {parse_override(text)[0] for text in overrides}
    chosen = {c.group for arm in arms for c in arm.choices}  # a section an arm chooses: GROUP.name would reset it
    renames = [text for text in overrides if _renames(parse_override(text)[0], chosen)]
    if renames:
        group = parse_override(renames[0])[0].partition(".")[0]
        raise UserError(f"override '{renames[0]}' would replace every arm's {group} choice; choose the {group} per "
                        f"arm (--arm NAME={group}:CHOICE), or drop the override")
    for arm in arms:
        for text in arm.overrides:
            key = parse_override(text)[0]
            if key in grid_keys | shared | {"run.dir", "arm"}:
                raise UserError(f"override '{text}' of {arm.who} sets '{key}', which the sweep sets for every arm "
                                "(--grid, an override or its own); drop one of them")
            if _renames(key, {c.group for c in arm.choices}):
                raise UserError(f"override '{text}' of {arm.who} would replace its own {key.partition('.')[0]} "
                                "choice; give one of them")


def _renames(key: str, groups: set[str]) -> bool:
    """Whether ``key`` names the class of one of ``groups`` (``method.name``, a wrapper's ``method.objective``),
    an override that starts that section afresh."""
    group, _, rest = key.partition(".")
    return group in groups and rest in ("name", "objective")


def problem_line(message: str, tasks: list[Task], shown: int = 3) -> str:
    """``'task 1 (partition.alpha=5 seed=3): <message>'``: a problem and the tasks it refuses, by
    their overrides (the first ``shown`` of them)."""
    named = ", ".join(f"{t.index} ({' '.join(t.overrides)})" for t in tasks[:shown])
    more = f" and {len(tasks) - shown} more" if len(tasks) > shown else ""
    return f"{'task' if len(tasks) == 1 else 'tasks'} {named}{more}: {message}"


def run_sweep(recipe: str | list[str], grid: list[str], seeds: int, out: str, options: SweepOptions = SweepOptions(),
              overrides: list[str] = (), echo: Callable[[str], None] = print, arms: list[str] = ()) -> SweepOutcome:
    """Write (or refresh) the sweep in ``out``; submit it (SLURM, ``submit_now``) or run it (local).

    ``recipe``: one recipe, or several (an arm each); ``arms``: ``--arm NAME[=ITEM,...]`` options
    (``fedlight.sweep.arms``)."""
    source = _recipes(recipe, arms)
    out_dir, overrides, local = Path(out).resolve(), list(overrides), options.executor == "local"
    extra_sbatch, axes = _check_command(out_dir, options, grid, overrides, seeds, source.arms)
    plan = _plan(source, axes, seeds, out_dir, overrides)
    script_text = _ready_to_write(plan, options)
    with mf.locked(out_dir):  # a second sweep into --out waits here, then sees this one's entries
        finished, chosen = _choose(plan, options, echo)
        _write_files(plan, finished, script_text)
        echo(f"sweep {out_dir}: {summary(plan.manifest, finished, chosen, 'run' if local else 'submit')}")
        submission = _submit(plan, chosen, options, extra_sbatch, echo)
    if submission is None:
        return SweepOutcome(plan.manifest, [])
    if local:  # outside the lock: another sweep may record its own runs meanwhile
        return _run_here(out_dir, plan.names, chosen, options.parallel, plan.manifest, echo)
    echo(f"submitted array job {submission['job_id']} ({len(chosen)} tasks); logs in {out_dir / 'logs'}")
    echo(next_steps(out_dir))
    return SweepOutcome(plan.manifest, [])


@dataclass(frozen=True)
class _Recipes:
    """Where a sweep's tasks' recipes come from: one recipe (``base``), or its arms (``--arm``)."""

    base: Path
    arms: list[Arm]

    def load(self, arm: str | None, extra: list[str]) -> Recipe:
        """The recipe of a task of ``arm`` (None: the sweep has no arms) with the ``extra`` overrides."""
        return load_recipe(self.base, extra) if arm is None else {a.name: a for a in self.arms}[arm].load(extra)


def _recipes(recipe: str | list[str], arms: list[str]) -> _Recipes:
    """The sweep's ``--recipe`` (one, or several: an arm each) and ``--arm`` options, parsed."""
    recipes = [recipe] if isinstance(recipe, str) else list(recipe)
    arm_list = parse_arms(recipes, list(arms))
    if not recipes and not arm_list:
        raise UserError("give the sweep a recipe: --recipe RECIPE (or --arm NAME=RECIPE,...)")
    return _Recipes(Path(arm_list[0].recipe if arm_list else recipes[0]).resolve(), arm_list)


def _check_command(out_dir: Path, options: SweepOptions, grid: list[str], overrides: list[str], seeds: int,
                   arms: list[Arm]) -> tuple[list[str], list[Axis]]:
    """Refuse the command's own mistakes before any recipe is read; returns the extra ``sbatch``
    arguments (``--slurm-args``) and the grid's axes."""
    blocked = output_folder_problem(out_dir)
    if blocked:
        raise UserError(f"--out {blocked}; choose another --out")
    problem = options.problem()
    if problem:
        raise UserError(problem)
    extra_sbatch = split_slurm_args(options.slurm_args)
    axes = parse_grid(grid)
    check_overrides(overrides, axes, arms)
    if seeds < 1:
        raise UserError(f"--seeds {seeds}: give at least 1")
    return extra_sbatch, axes


@dataclass
class _Plan:
    """A sweep's tasks, each resolved and put through ``fit``'s checks, and the manifest that records them."""

    out_dir: Path
    job_name: str  # the SLURM array job's name
    tasks: list[Task]
    names: dict[int, str]  # task index -> its run's name
    entries: list[dict[str, Any]] = field(default_factory=list)  # the manifest's tasks
    texts: dict[int, tuple[str, int]] = field(default_factory=dict)  # task index -> (its recipe's text, rounds)
    plain: dict[int, dict[str, Any]] = field(default_factory=dict)  # task index -> its recipe as a dict
    clamped: dict[str, list[Task]] = field(default_factory=dict)  # a warning for clamped sizes -> its tasks
    manifest: dict[str, Any] = field(default_factory=dict)


def _plan(source: _Recipes, axes: list[Axis], seeds: int, out_dir: Path, overrides: list[str]) -> _Plan:
    """Every task of the grid x seeds (x arms), resolved and checked, and its manifest: all before
    anything is written."""
    first = source.load(source.arms[0].name if source.arms else None, overrides)
    seed_list = [first.seed + i for i in range(seeds)]  # the (first) recipe's seed, then the next ones
    tasks = expand(axes, seed_list, arm_axes(source.arms, axes, overrides))
    old = mf.read_manifest(out_dir)
    version = mf.FORMAT if old is None else old["fedlight_sweep"]
    names, hparams = run_names(tasks), f"run.hparams=[{','.join(hparam_keys(tasks))}]"  # before the overrides
    if old is not None:  # a sweep keeps the run names it was made with (a format-1 sweep's: '0003')
        names.update({t["index"]: Path(t["run_dir"]).name for t in old["tasks"]})
    plan = _Plan(out_dir, f"fedlight-{first.name}", tasks, names)
    _check_tasks(plan, source, [hparams, *overrides])
    grid_record = [{"key": a.key, "values": list(a.raw)} for a in axes]
    plan.manifest = mf.new_manifest(source.base, overrides, grid_record, seed_list, plan.entries, version)
    if source.arms:
        plan.manifest["arms"] = [arm.record() for arm in source.arms]
    if old is not None:
        mf.check_same_sweep(old, plan.manifest, out_dir, plan.plain)
        plan.manifest["submissions"] = old.get("submissions", [])
    return plan


def _check_tasks(plan: _Plan, source: _Recipes, overrides: list[str]) -> None:
    """Resolve each task's recipe (``overrides``, the task's own, its run folder) into ``plan`` and
    check it as ``fit`` would, unless its run is finished; one line for each problem, naming its tasks."""
    problems, loader = {}, cached_loader()
    for task in plan.tasks:
        run_dir = mf.run_path(plan.out_dir, plan.names[task.index])
        try:  # what fit would refuse, each task refuses here, before anything is written
            resolved = source.load(task.arm, [*overrides, *task.overrides, f"run.dir={run_dir}"])
            if not is_finished(run_dir, resolved.rounds):  # a finished task says so without importing torch
                for warning in check_task(resolved, loader):
                    plan.clamped.setdefault(warning, []).append(task)
        except UserError as exc:
            problems.setdefault(str(exc), []).append(task)
            continue
        plan.entries.append(mf.task_entry(plan.out_dir, task.index, plan.names[task.index], task.overrides, resolved))
        plan.texts[task.index] = (mf.recipe_text(resolved), resolved.rounds)
        plan.plain[task.index] = asdict(resolved)
    if problems:
        raise UserErrors([problem_line(message, failing) for message, failing in problems.items()])


def _ready_to_write(plan: _Plan, options: SweepOptions) -> str:
    """The last refusals before any write (no ``sbatch`` for ``--submit``, the array script's own);
    warns once of each clamped size, naming its tasks; returns the array script's text."""
    if options.submit_now:
        require_sbatch()
    script_text = render_array_script(plan.out_dir, plan.job_name)
    for warning, tasks_warned in plan.clamped.items():  # the sweep goes ahead: each warning once, naming its tasks
        print(f"fedlight: warning: {problem_line(warning, tasks_warned)}", file=sys.stderr)
    return script_text


def _choose(plan: _Plan, options: SweepOptions, echo: Callable[[str], None]) -> tuple[set[int], list[int]]:
    """Under the sweep's lock: the tasks already finished, and those to submit or run now."""
    local, out_dir, manifest = options.executor == "local", plan.out_dir, plan.manifest
    current = mf.read_manifest(out_dir)  # another sweep may have written it since `old` was read
    if current is not None:
        mf.check_same_sweep(current, manifest, out_dir, plan.plain)
        manifest["submissions"] = current["submissions"]
    finished = {i for i, (_, rounds) in plan.texts.items() if is_finished(mf.run_path(out_dir, plan.names[i]), rounds)}
    slurm_jobs = [sub["job_id"] for sub in manifest["submissions"] if sub.get("executor") != mf.LOCAL]
    queued = queued_tasks(slurm_jobs) if options.resubmit_failed or local else set()
    if queued is None:
        echo("warning: squeue cannot tell which earlier tasks are still queued; they may be run twice")
    # a local run is over when its command returns: every unfinished task is run again (and resumed)
    return finished, to_submit(manifest, finished, options.resubmit_failed or local, queued or set())


def _submit(plan: _Plan, chosen: list[int], options: SweepOptions, extra_sbatch: list[str],
            echo: Callable[[str], None]) -> dict[str, Any] | None:
    """Record the ``chosen`` tasks as a submission in the manifest: submitted to SLURM now
    (``--submit``) or to run here (local). None where there is nothing to do or ``--submit`` was not
    given: says what comes next (the sbatch command to give)."""
    local = options.executor == "local"
    if not chosen:
        echo(next_steps(plan.out_dir))
        return None
    command = sbatch_command(plan.out_dir / SCRIPT, chosen, options.max_running, extra_sbatch)
    if not local and not options.submit_now:
        echo("submit with: " + shlex.join(command) + "   (or run it here: --executor local --parallel N)")
        return None
    submission = ({"job_id": mf.LOCAL, "tasks": chosen, "executor": mf.LOCAL, "parallel": options.parallel}
                  if local else {"job_id": submit(command), "tasks": chosen, "command": shlex.join(command)})
    plan.manifest["submissions"].append(submission)
    # a failed write after sbatch: running the sweep again would submit the same tasks twice
    then = AGAIN if local else f"wait for array job {submission['job_id']} to end (or scancel it), then {AGAIN}"
    atomic_write_json(plan.out_dir / mf.MANIFEST, plan.manifest, then=then)
    return submission


def next_steps(out_dir: Path) -> str:
    """Where a sweep's results go next: ``fedlight report`` and TensorBoard's view of its runs."""
    return (f"compare the finished runs: {shlex.join(['fedlight', 'report', str(out_dir)])}; watch them: "
            f"{shlex.join(['tensorboard', '--logdir', str(out_dir / LINKS)])}")


def _write_files(plan: _Plan, finished: set[int], script_text: str) -> None:
    """The manifest, every unfinished task's recipe (unless already as written), ``tasks.txt``, the
    script and TensorBoard's links to the runs."""
    out_dir, names = plan.out_dir, plan.names
    (out_dir / "logs").mkdir(parents=True, exist_ok=True)
    atomic_write_json(out_dir / mf.MANIFEST, plan.manifest, then=AGAIN)
    for index, (text, _) in plan.texts.items():
        path = mf.recipe_path(out_dir, names[index])
        if index not in finished and not (path.is_file() and path.read_text() == text):
            # whole or not at all: a task that starts meanwhile reads the old file or this one
            atomic_write_bytes(path, text.encode(), then=AGAIN)
    atomic_write_bytes(out_dir / mf.NAMES, mf.names_text(names).encode(), then=AGAIN)
    atomic_write_bytes(out_dir / SCRIPT, script_text.encode(), then=AGAIN)
    unlinked = link_runs(out_dir, names, board_names(plan.tasks))
    if unlinked:
        print(f"fedlight: warning: {unlinked}", file=sys.stderr)


def _run_here(out_dir: Path, names: dict[int, str], chosen: list[int], parallel: int, manifest: dict[str, Any],
              echo: Callable[[str], None]) -> SweepOutcome:
    """Run the ``chosen`` tasks as local processes (the manifest records them as one submission)."""
    tasks = [LocalTask(i, names[i], mf.recipe_path(out_dir, names[i]), mf.run_path(out_dir, names[i]),
                       out_dir / "logs" / f"{names[i]}.out") for i in chosen]
    echo(f"running {len(tasks)} tasks here, {parallel} at once; logs in {out_dir / 'logs'}")
    failed = run_local(tasks, parallel, echo)
    echo(f"sweep {out_dir}: {len(tasks) - len(failed)} of the {len(tasks)} tasks run here finished, {len(failed)} "
         f"failed; {next_steps(out_dir)}")
    return SweepOutcome(manifest, failed)
