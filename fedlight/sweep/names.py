"""Run names of a sweep's tasks, made of their grid values: ``alpha=0.1_seed=0``, not ``0003``.

A name lists the task's arm (``arm=moon``, where the sweep has arms), each grid key (its last
dotted part, or the whole key where two keys share that part) with the task's value, then the
seed, joined by ``_``. So TensorBoard pointed at
``<out>/runs`` labels every curve by what it varies. Names are filesystem-safe (ASCII
letters, digits and ``._=+-`` only; anything else becomes ``-``), at most ``MAX_LENGTH``
characters, and unique within the sweep.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter

from fedlight.sweep.grid import Task

MAX_LENGTH = 120  # well under the 255 bytes of a file name, with room for ".yaml" and an ".out" log
UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]+")


def key_labels(keys: list[str]) -> dict[str, str]:
    """``['partition.alpha', 'method.name']`` -> ``{'partition.alpha': 'alpha', 'method.name': 'name'}``;
    a last part two keys (or a key and ``seed``) share keeps its whole dotted key."""
    last = [k.rsplit(".", 1)[-1] for k in keys] + ["seed"]
    return {k: short if last.count(short) == 1 else k for k, short in zip(keys, last)}


def safe_name(text: str) -> str:
    """``'name=[0.5, 0.5]'`` -> ``'name=-0.5-0.5-'``; a long one is cut and keeps a digest of the whole."""
    name = UNSAFE.sub("-", text)
    if len(name) > MAX_LENGTH:
        digest = hashlib.sha256(text.encode()).hexdigest()[:8]
        name = f"{name[:MAX_LENGTH - 9]}-{digest}"
    return name


def run_names(tasks: list[Task]) -> dict[int, str]:
    """Every task's run name, by task index (deterministic for the same command)."""
    keys = list(dict.fromkeys(key for t in tasks for key, _ in t.settings))  # arms may vary fewer keys
    labels = key_labels(keys)
    arm = lambda t: [f"arm={t.arm}"] if t.arm is not None else []  # noqa: E731
    names = {t.index: safe_name("_".join([*arm(t), *(f"{labels[k]}={v}" for k, v in t.settings), f"seed={t.seed}"]))
             for t in tasks}
    # values alike once made safe get the task index; no other name can end in "_task<i>" (each
    # ends in its seed or, cut, in a digest), and safe_name keeps the longer one within MAX_LENGTH
    counts = Counter(names.values())
    return {i: safe_name(f"{n}_task{i}") if counts[n] > 1 else n for i, n in names.items()}
