"""Behaviour unchanged by a refactoring: shortened paper recipes against stored histories.

Runs the quickstart and one CPU recipe per paper (SOFed, CF-CL, FLESD, LG-FedAvg, MOON,
SCAFFOLD), each shortened by overrides to a few seconds, and compares the ``results.json``
fields that a refactoring must not move (``history`` minus its wall-clock columns, ``final``,
``baseline``, ``comm``, ``rounds_completed``) bit for bit with the copies stored in
``tests/data/histories/``; a reading column (``ADDED``) the stored copy lacks is not compared.
Floats are compared through ``repr`` of their JSON values: equal
means bit-identical.

Usage::

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/behaviour_check.py           # compare
    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/behaviour_check.py --store   # (re)write references
    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/behaviour_check.py lg moon   # only these

Exit code 0 when every case matches, 1 otherwise (the first differing key of each case printed).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "tests" / "data" / "histories"
# history columns measured by the wall clock, never reproducible: a round's times, SOFed's buffer
# selection time, CF-CL's delay (its exchange compute seconds)
TIMING = ("seconds", "train_seconds", "eval_seconds", "buffer_select_ms", "delay_seconds")
KEPT = ("rounds_completed", "history", "final", "baseline", "comm")
# the label-free readings, client views and fine-tunes an evaluation adds beside the probe and kNN
# (fedlight.engine.loop.evaluator.READING_COLUMNS): a column a stored reference predates is new, not a change
ADDED = ("rankme", "spectrum_top1", "alignment", "uniformity", "embedding_std", "client_knn_acc", "finetune_acc",
         "drift_cka")

COMMON = ["fabric.accelerator=cpu", "fabric.threads=1", "eval.projector_samples=0"]
# name -> (recipe, overrides): small enough for seconds, large enough to cross each paper's code
CASES: dict[str, tuple[str, list[str]]] = {
    "quickstart": ("quickstart_fmnist", ["rounds=2", "data.subset=1500", "data.test_subset=500", "clients.num=4",
                                         "eval.probe_epochs=5", "eval.knn_k=20",
                                         "faults.dropout=0.2", "faults.straggler=0.3"]),
    "sofed": ("sofed_fmnist", ["rounds=2", "data.subset=1000", "data.test_subset=500", "clients.num=3",
                               "stream.velocity=200", "eval.every=2", "eval.probe_epochs=5", "eval.knn_k=20"]),
    "cfcl": ("cfcl_fmnist_small", ["rounds=2", "data.subset=1500", "data.test_subset=500",
                                   "local.iterations=10", "exchange.pull_every=5", "exchange.reserve=20",
                                   "exchange.approx=40", "exchange.pull_size=10", "exchange.avg_degree=2",
                                   "eval.probe_epochs=5"]),
    "flesd": ("flesd_fmnist", ["rounds=2", "data.subset=1200", "data.test_subset=500", "clients.num=4",
                               "local.epochs=1", "server.epochs=2", "eval.probe_epochs=5", "eval.knn_k=20"]),
    "lg": ("lg_fmnist", ["rounds=4", "data.subset=1000", "data.test_subset=500", "clients.num=8",
                         "method.warmup_rounds=2", "eval.every=2", "eval.probe_epochs=5", "eval.knn_k=20"]),
    "moon": ("moon_fmnist", ["rounds=2", "data.subset=1500", "data.test_subset=500", "clients.num=4",
                             "local.epochs=1", "eval.probe_epochs=5", "eval.knn_k=20"]),
    "scaffold": ("scaffold_fmnist", ["rounds=2", "data.subset=1500", "data.test_subset=500", "clients.num=4",
                                     "local.epochs=1", "eval.probe_epochs=5", "eval.knn_k=20"]),
}


def comparable(results: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``results.json`` a refactoring must leave bit-identical. A metric a run does not
    have (``test_acc`` of a self-supervised run) is null in older files and absent in newer ones: both
    read as absent."""
    def measured(row: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if row is None else {k: v for k, v in row.items() if v is not None and k not in TIMING}

    out = {k: results[k] for k in KEPT}
    out["history"] = [measured(row) for row in results["history"]]
    out["final"], out["baseline"] = measured(results["final"]), measured(results["baseline"])
    return out


def run_case(name: str, work: Path) -> tuple[dict[str, Any], float]:
    """Run case ``name`` in a fresh run folder under ``work``; its comparable results and seconds."""
    recipe, overrides = CASES[name]
    run_dir = work / name
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "fedlight", "fit", "--recipe",
                           str(ROOT / "recipes" / f"{recipe}.yaml"), f"run.dir={run_dir}", *COMMON, *overrides],
                          cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{name}: fedlight fit failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    seconds = time.perf_counter() - start
    return comparable(json.loads((run_dir / "results.json").read_text())), seconds


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """The dotted path of the first place ``a`` and ``b`` differ (floats by bits), or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a and str(k).startswith(ADDED):
                continue
            if k not in a or k not in b:
                return f"{path}.{k} (only in {'stored' if k in a else 'new'})"
            d = first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path} (length {len(a)} != {len(b)})"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if repr(a) == repr(b) and type(a) is type(b) else f"{path}: stored {a!r}, new {b!r}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", default=list(CASES), help=f"some of {', '.join(CASES)}")
    parser.add_argument("--store", action="store_true", help="write the references instead of comparing")
    args = parser.parse_args(argv)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.cases:
            got, seconds = run_case(name, Path(tmp))
            ref = STORE / f"{name}.json"
            if args.store:
                STORE.mkdir(parents=True, exist_ok=True)
                ref.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
                print(f"{name}: stored ({seconds:.1f} s)")
                continue
            diff = first_difference(comparable(json.loads(ref.read_text())), json.loads(json.dumps(got)))
            failed += diff is not None
            print(f"{name}: {'identical' if diff is None else 'DIFFERS at ' + diff} ({seconds:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
