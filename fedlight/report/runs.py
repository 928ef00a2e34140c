"""Reading many runs: their ``results.json`` (which holds the resolved recipe) and what varies.

A run is a folder with a ``results.json``; a folder without one (a sweep's ``--out``, or
``runs/``) is searched for them. The keys that vary are the dotted recipe keys whose values
differ between runs (``run.dir`` excepted: it always does).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedlight.errors import UserError

RESULTS = "results.json"
IGNORED = ("run.dir",)


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists stay values)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


@dataclass
class Run:
    """One run's results and its flattened resolved recipe."""

    path: Path
    results: dict[str, Any]
    keys: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.keys = flatten(self.results.get("recipe") or {})

    @property
    def finished(self) -> bool:
        return self.results.get("final") is not None

    @property
    def seed(self) -> int:
        return int(self.keys.get("seed", 0))

    @property
    def total_bytes(self) -> int:
        """Bytes communicated over the run: every ledger direction (up, down, device to device,
        LG-FedAvg's new-test upload)."""
        comm = self.results.get("comm") or {}  # also holds params_* element counts: not bytes
        return int(sum(v for k, v in comm.items() if k.startswith("bytes_")))


def _load(path: Path) -> Run:
    try:
        results = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"'{path}' is not a readable results.json ({type(exc).__name__}); delete or rerun that run") from None
    if not isinstance(results, dict) or "history" not in results or "recipe" not in results:
        raise UserError(f"'{path}' is not a fedlight results.json (no history/recipe); leave it out of the report")
    return Run(path.parent, results)


def find_runs(paths: list[str | Path]) -> list[Run]:
    """Every run in ``paths`` (run folders, or folders searched for results.json), sorted by folder.

    Hidden folders are not searched: a run that replaces another keeps the old one in
    ``.fedlight-replaced/`` until its first checkpoint (``fedlight.engine.rundir``)."""
    found: dict[Path, Run] = {}
    for p in map(Path, paths):
        if not p.exists():
            raise UserError(f"'{p}' does not exist; give run folders or a sweep folder")
        files = [p / RESULTS] if (p / RESULTS).is_file() else sorted(
            f for f in p.rglob(RESULTS) if not any(part.startswith(".") for part in f.relative_to(p).parts))
        if not files:
            raise UserError(f"no {RESULTS} under '{p}'; give run folders or a sweep folder whose runs have started")
        for f in files:
            found.setdefault(f.parent.resolve(), _load(f))
    return [found[k] for k in sorted(found)]


def varying_keys(runs: list[Run]) -> list[str]:
    """Dotted recipe keys whose values differ between ``runs``, in recipe order."""
    order: dict[str, None] = {}
    for run in runs:
        order.update(dict.fromkeys(run.keys))
    return [k for k in order if k not in IGNORED
            and len({json.dumps(r.keys.get(k), sort_keys=True) for r in runs}) > 1]
