"""Reading many runs: their ``results.json`` (which holds the resolved recipe) and what varies.

A run is a folder with a ``results.json``; a folder without one (a sweep's ``--out``, or
``runs/``) is searched for them. The keys that vary are the dotted recipe keys whose values
differ between runs (``run.dir`` excepted: it always does).
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from fedlight.config.files import length_problem, read_json
from fedlight.config.schema import Recipe
from fedlight.errors import UserError
from fedlight.eval import metric_names

RESULTS = "results.json"
# the recipe's sections (data, eval, method, ...): a results.json whose recipe holds one as text or a
# list was edited by hand, and its keys (eval.label_fraction names the columns) cannot be read
SECTIONS = tuple(name for name, kind in typing.get_type_hints(Recipe).items()
                 if dataclasses.is_dataclass(kind) or typing.get_origin(kind) is dict)
IGNORED = ("run.dir",)
# what a run's classes were built with: it varies with the method or server the recipe names, which
# tells the groups apart already
CONSTRUCTED = "resolved."
BYTES = ("bytes_up", "bytes_down", "bytes_d2d")  # a history row's bytes, summed by the plots


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
    def label_fraction(self) -> float:
        """``eval.label_fraction``: the labels the probe and kNN accuracies were measured with."""
        value = self.keys.get("eval.label_fraction", 1.0)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 1.0

    def named(self, metrics: dict[str, Any] | None) -> dict[str, Any]:
        """``metrics`` (a history row, ``final``, ``baseline``) with the label fraction in the probe and
        kNN names (``linear_probe_acc@0.1``), so runs with 10% and 1% labels never share a column."""
        return metric_names.with_fraction(metrics or {}, self.label_fraction)

    @cached_property  # read per metric by the table, the Markdown and the plots
    def final(self) -> dict[str, Any]:
        """The final metrics that have a value, named with their label fraction."""
        return {k: v for k, v in self.named(self.results.get("final")).items() if v is not None}

    @cached_property
    def baseline(self) -> dict[str, Any]:
        """The random-init encoder's metrics that have a value, named with their label fraction."""
        return {k: v for k, v in self.named(self.results.get("baseline")).items() if v is not None}

    @property
    def commits(self) -> list[str]:
        """The git commits the run's code was at, one per start or resumption without repeats (12 hex
        digits, ``+dirty`` with uncommitted changes); none where results.json records
        none (fedlight outside a git checkout, a run from before ``provenance``)."""
        found = self.results.get("provenance")
        segments = found.get("segments") if isinstance(found, dict) else None
        return list(dict.fromkeys(f"{seg['commit'][:12]}{'+dirty' if seg.get('dirty') else ''}"
                                  for seg in (segments if isinstance(segments, list) else [])
                                  if isinstance(seg, dict) and isinstance(seg.get("commit"), str)))

    def sent(self, key: str) -> int:
        """One ledger direction's bytes over the run (``bytes_up``, ``bytes_down``); 0 where none is recorded."""
        return int((self.results.get("comm") or {}).get(key, 0))

    @property
    def total_bytes(self) -> int:
        """Bytes communicated over the run: every ledger direction (up, down, device to device,
        LG-FedAvg's new-test upload)."""
        comm = self.results.get("comm") or {}  # also holds params_* element counts: not bytes
        return int(sum(v for k, v in comm.items() if k.startswith("bytes_")))


def _load(path: Path) -> Run:
    leave_out = "rerun that run (--resume writes it again), or leave its folder out of the report"
    results = read_json(path, "results file", leave_out)
    problem = results_problem(results)
    if problem:
        raise UserError(f"'{path}' is not a fedlight results.json ({problem}); {leave_out}")
    return Run(path.parent, results)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _metrics_problem(row: dict[str, Any], where: str) -> str | None:
    """A metric (``*_acc*``) that is neither a number nor null."""
    bad = next((k for k, v in row.items() if "_acc" in k and v is not None and not _is_number(v)), None)
    return None if bad is None else f"{where}'s {bad} is {row[bad]!r}, not a number"


def _clock_problem(row: dict[str, Any], where: str) -> str | None:
    """A virtual clock's column (``virtual_seconds``, ``idle_share``, ``staleness``) that is not what the clock
    writes; a row without them has no clock."""
    bad = next((k for k in ("virtual_seconds", "idle_share") if row.get(k) is not None and not _is_number(row[k])),
               None)
    if bad:
        return f"{where}'s {bad} is {row[bad]!r}, not a number"
    taus = row.get("staleness")
    if taus is not None and not (isinstance(taus, list) and all(isinstance(t, int) and not isinstance(t, bool)
                                                                for t in taus)):
        return f"{where}'s staleness is {taus!r}, not a list of server steps"
    return None


def results_problem(results: Any) -> str | None:
    """What a hand-edited or foreign ``results.json`` lacks that a report reads, or None.

    A report reads the recipe (a mapping, an int seed), ``rounds_completed``, each history row's
    round, bytes, accuracies and virtual clock, the final accuracies and the byte totals.
    """
    if not isinstance(results, dict):
        return f"a {type(results).__name__}, not a mapping"
    kinds = {"recipe": dict, "history": list, "rounds_completed": int}
    wrong = next((k for k, kind in kinds.items() if not isinstance(results.get(k), kind)
                  or isinstance(results.get(k), bool)), None)
    if wrong:
        return f"no {wrong}" if wrong not in results else f"{wrong} is a {type(results[wrong]).__name__}"
    section = next((k for k in SECTIONS if not isinstance(results["recipe"].get(k, {}), dict)), None)
    if section:
        return f"recipe.{section} is a {type(results['recipe'][section]).__name__}, not a section of keys"
    if not isinstance(results["recipe"].get("seed", 0), int):
        return f"recipe.seed is {results['recipe']['seed']!r}"
    for i, row in enumerate(results["history"]):
        if not isinstance(row, dict):
            return f"history[{i}] is a {type(row).__name__}"
        missing = next((k for k in ("round", *BYTES) if not _is_number(row.get(k))), None)
        if missing:
            return f"history[{i}] has no number {missing}"
        problem = _metrics_problem(row, f"history[{i}]") or _clock_problem(row, f"history[{i}]")
        if problem:
            return problem
    final, comm = results.get("final"), results.get("comm")
    if final is not None and not isinstance(final, dict):
        return f"final is a {type(final).__name__}"
    if final is not None and any(v is not None and not _is_number(v) for v in final.values()):
        return "final holds an accuracy that is not a number"
    baseline = results.get("baseline")  # the plots' round-0 point
    if baseline is not None and not (isinstance(baseline, dict) and not _metrics_problem(baseline, "baseline")):
        return "baseline is not a mapping of accuracies"
    if comm is not None and not (isinstance(comm, dict) and all(_is_number(v) for v in comm.values())):
        return "comm is not a mapping of byte counts"
    return None


def find_runs(paths: list[str | Path]) -> list[Run]:
    """Every run in ``paths`` (run folders, or folders searched for results.json), sorted by folder.

    Hidden folders are not searched: a run that replaces another keeps the old one in
    ``.fedlight-replaced/`` until it finishes (``fedlight.engine.run.run_folder``)."""
    found: dict[Path, Run] = {}
    for p in map(Path, paths):
        too_long = length_problem(p)
        if too_long:
            raise UserError(f"{too_long}; give run folders or a sweep folder")
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
    return [k for k in order if k not in IGNORED and not k.startswith(CONSTRUCTED)
            and len({json.dumps(r.keys.get(k), sort_keys=True) for r in runs}) > 1]
