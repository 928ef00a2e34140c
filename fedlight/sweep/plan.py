"""Which tasks of a sweep to (re)submit.

A task is finished when its run folder holds a ``results.json`` with every round done and
final accuracies (the engine rewrites ``results.json`` after each round, so its mere
existence is not enough); a damaged one is not finished, so the task is submitted again
and its ``--resume`` writes it anew. Finished tasks are never submitted again and their files are never
rewritten. A plain re-run submits only tasks never submitted before (a pending or running
array is not duplicated); ``--resubmit-failed`` submits every task without final results
that SLURM does not still hold as pending or running.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def is_finished(run_dir: Path, rounds: int) -> bool:
    """Whether ``run_dir`` holds the final results of a ``rounds``-round run."""
    try:
        results = json.loads((run_dir / "results.json").read_bytes())
    except (OSError, ValueError, RecursionError):  # missing, half-written, not text: not finished
        return False
    done = results.get("rounds_completed") if isinstance(results, dict) else None
    return isinstance(done, int) and done >= rounds and isinstance(results.get("final"), dict)


def submitted(manifest: dict[str, Any]) -> set[int]:
    """Indices of the tasks any earlier submission covered."""
    return {i for s in manifest.get("submissions", []) for i in s["tasks"]}


def to_submit(manifest: dict[str, Any], finished: set[int], resubmit_failed: bool,
              queued: set[int] = frozenset()) -> list[int]:
    """The task indices to submit now, in order (never one still ``queued`` in SLURM)."""
    before = submitted(manifest)
    return [t["index"] for t in manifest["tasks"] if t["index"] not in finished and t["index"] not in queued
            and (resubmit_failed or t["index"] not in before)]


def summary(manifest: dict[str, Any], finished: set[int], chosen: list[int], verb: str = "submit") -> str:
    """One line: how many tasks are finished, waiting on an earlier submission, and chosen now
    (``verb``: ``submit`` to SLURM, ``run`` here)."""
    n = len(manifest["tasks"])
    pending = len(submitted(manifest) - finished - set(chosen))
    again = " (--resubmit-failed submits them again)" if pending else ""
    return f"{n} tasks: {len(finished)} finished, {pending} submitted before and not finished{again}, {len(chosen)} to {verb} now"
