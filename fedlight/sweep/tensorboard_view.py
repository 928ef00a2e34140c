"""How a sweep shows in TensorBoard: the hparams its runs list, and the name each run has there.

TensorBoard names a run by its folder's path under ``--logdir``: pointed at ``<out>/runs`` it lists
``alpha=0.1_name=byol_seed=3/tensorboard``, cut off in its sidebar and its HPARAMS table. So the
sweep writes ``<out>/tensorboard/``, a tree of symbolic links, one a task, named by the values that
vary across the sweep (``byol-s3``, ``alpha=0.1-simclr-s0``) and pointing at the task's
``runs/<run name>/tensorboard``: ``tensorboard --logdir <out>/tensorboard`` lists the runs by those
names (TensorBoard follows links; its README recommends such a tree for naming runs).

Each task's recipe sets ``run.hparams`` (``fedlight.engine.output.tensorboard.run_hparams``): the
keys the sweep varies (``arm`` where it has several arms, each grid key with more than one value),
then ``method.name`` and ``seed``; so the HPARAMS table has a column for each thing that tells the
runs apart, and none for what they share.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

from fedlight.sweep.arms import YAML_WORDS
from fedlight.sweep.grid import Task
from fedlight.sweep.names import key_labels, safe_name

LINKS = "tensorboard"  # <out>/tensorboard: the tree of links
EVENTS = "tensorboard"  # where a run folder keeps its events (fedlight.engine.output.loggers.tensorboard_logger)
WORD = re.compile(r"[A-Za-z][A-Za-z0-9_.+]*")  # a value that says what it is on its own (byol, dirichlet)


def varied_keys(tasks: list[Task]) -> list[str]:
    """The grid keys with more than one value across ``tasks``, in grid order."""
    values: dict[str, set[str]] = {}
    for task in tasks:
        for key, value in task.settings:
            values.setdefault(key, set()).add(value)
    return [key for key, seen in values.items() if len(seen) > 1]


def arms_vary(tasks: list[Task]) -> bool:
    return len({task.arm for task in tasks}) > 1


def hparam_keys(tasks: list[Task]) -> list[str]:
    """``run.hparams`` of every task: ``arm`` where the arms vary, each varied grid key, ``method.name``, ``seed``."""
    return list(dict.fromkeys([*(["arm"] if arms_vary(tasks) else []), *varied_keys(tasks), "method.name", "seed"]))


def value_label(label: str, raw: str) -> str:
    """A grid value in a name: a word alone (``byol``), anything else after its key (``alpha=0.1``,
    ``channels_last=true``)."""
    return raw if WORD.fullmatch(raw) and raw.lower() not in YAML_WORDS else f"{label}={raw}"


def board_names(tasks: list[Task]) -> dict[int, str]:
    """Every task's name in TensorBoard, by task index: its arm (where the arms vary), its values of the
    varied grid keys and ``s<seed>``, joined by ``-``; filesystem-safe and unique within the sweep (two
    alike once made safe get ``-task<i>``)."""
    keys = varied_keys(tasks)
    labels, with_arm = key_labels(keys), arms_vary(tasks)
    names = {t.index: safe_name("-".join([*([t.arm] if with_arm else []),
                                          *(value_label(labels[k], v) for k, v in t.settings if k in keys),
                                          f"s{t.seed}"]))
             for t in tasks}
    counts = Counter(names.values())
    return {i: safe_name(f"{name}-task{i}") if counts[name] > 1 else name for i, name in names.items()}


def link_runs(out: Path, run_names: dict[int, str], names: dict[int, str]) -> str | None:
    """Make ``<out>/tensorboard/<name>`` -> ``../runs/<run name>/tensorboard`` for every task (a link
    to a run that has not started yet waits for it). A link to another run is replaced; a file in its
    place is left alone. Returns a warning where links cannot be made (a file system without them)."""
    folder = out / LINKS
    folder.mkdir(parents=True, exist_ok=True)
    try:
        for index, name in names.items():
            link, target = folder / name, Path("..") / "runs" / run_names[index] / EVENTS
            if link.is_symlink() and os.readlink(link) != str(target):
                link.unlink()
            if not link.is_symlink() and not link.exists():
                link.symlink_to(target, target_is_directory=True)
    except OSError as exc:
        return (f"cannot link the runs' TensorBoard folders under '{folder}' ({exc.strerror}); point TensorBoard "
                f"at '{out / 'runs'}' instead")
    return None
