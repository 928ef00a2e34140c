"""The sweep grid: ``--grid KEY=v1,v2`` options, checked against the recipe schema, expanded x seeds.

Expansion is deterministic: the grid's keys in command-line order, each one's values in the
order given (the last key varies fastest), and the seeds innermost. Task ``i`` is therefore
the same task every time the same command is run.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

from fedlight.config.loader import yaml_value
from fedlight.config.schema import key_problem
from fedlight.errors import UserError

# keys the sweep sets itself
OWNED = {"seed": "use --seeds N instead of --grid seed=...", "run.dir": "the sweep puts each run under --out",
         "arm": "name arms with --arm NAME=... (or give several --recipe)"}


@dataclass(frozen=True)
class Axis:
    """One grid key and its values, as written (``raw``) and as read (``values``, YAML)."""

    key: str
    raw: tuple[str, ...]
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Task:
    """One point of the grid with one seed (and arm): its index and the overrides that make it."""

    index: int
    settings: tuple[tuple[str, str], ...]  # (key, raw value) per grid axis
    seed: int
    arm: str | None = None  # the recipe key ``arm``, set by its override (fedlight.sweep.arms)

    @property
    def overrides(self) -> list[str]:
        arm = [f"arm={self.arm}"] if self.arm is not None else []
        return arm + [f"{k}={v}" for k, v in self.settings] + [f"seed={self.seed}"]


def split_values(text: str, where: str = "--grid") -> list[str]:
    """``'0.01,1,[0.5,0.5]'`` -> ``['0.01', '1', '[0.5,0.5]']``: commas inside brackets or quotes are kept
    (``'"/data/a,b",/c'`` -> ``['"/data/a,b"', '/c']``, which YAML reads as ``/data/a,b`` and ``/c``); an
    unbalanced bracket or quote raises a UserError naming ``where``."""
    items, depth, quote, current = [], 0, "", ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        else:
            depth += (ch in "[{") - (ch in "]}")
            if depth < 0:
                break
            if ch == "," and depth == 0:
                items.append(current)
                current = ""
                continue
        current += ch
    if depth or quote:
        raise UserError(f"{where} '{text}': an unbalanced {'quote' if quote else 'bracket'}; close it, or quote the "
                        "value")
    return [*items, current]


def parse_axis(text: str) -> Axis:
    """One ``--grid KEY=v1,v2`` option; an unknown key or an empty value list raises a UserError."""
    key, sep, rest = text.partition("=")
    if not sep or not key:
        raise UserError(f"--grid '{text}' must look like KEY=v1,v2 (for example partition.alpha=0.1,1)")
    if key in OWNED:
        raise UserError(f"--grid key '{key}' is set by the sweep; {OWNED[key]}")
    problem = key_problem(key, sections=False)
    if problem:
        raise UserError(f"--grid key '{key}' is not a recipe key; {problem}")
    raw = split_values(rest, f"--grid {key}")
    if not rest or any(not r.strip() for r in raw):
        raise UserError(f"--grid {key} has an empty value list or an empty value in '{rest}'; give v1,v2,...")
    values = tuple(yaml_value(r, f"--grid {key} value '{r}'") for r in raw)
    canon = [json.dumps(v, sort_keys=True, default=str) for v in values]
    for j, c in enumerate(canon):
        i = canon.index(c)
        if i != j:  # 1e-3 and 0.001, or 0.1 twice: the same experiment twice, told apart only by its name
            raise UserError(f"--grid {key}: '{raw[i].strip()}' and '{raw[j].strip()}' are one value ({values[j]!r}), "
                            "which would run the same experiment twice; give each value once")
    return Axis(key, tuple(r.strip() for r in raw), values)


def parse_grid(texts: list[str]) -> list[Axis]:
    """All ``--grid`` options; a key given twice raises a UserError."""
    axes = [parse_axis(t) for t in texts]
    keys = [a.key for a in axes]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise UserError(f"--grid key '{twice[0]}' is given twice; list all its values in one --grid option")
    return axes


def expand(axes: list[Axis], seeds: list[int], arms: list[tuple[str, list[Axis]]] = ()) -> list[Task]:
    """Every grid point x every seed, in a fixed order (last axis fastest, seeds innermost); with
    ``arms`` (name, the axes that apply to it), arm by arm, each over its own axes."""
    if not seeds:
        raise UserError("--seeds must be at least 1")
    tasks: list[Task] = []
    for arm, arm_axes in arms or [(None, axes)]:
        points = itertools.product(*[[(a.key, r) for r in a.raw] for a in arm_axes])
        tasks += [Task(len(tasks) + i, point, seed, arm)
                  for i, (point, seed) in enumerate(itertools.product(list(points), seeds))]
    return tasks
