"""What the readings cost: the quickstart with every reading on (drift and the 1% / 10% fine-tunes included),
beside the same run with none, and the seconds each reading took inside the first.

The two runs go one after the other in this process, in the order given by ``--order`` (both orders in turn
when repeated), with the same threads. Inside the "all on" run every reading's function is timed
(``Evaluator.readings``: RankMe, spectrum, embedding std, alignment and uniformity's forward pass, the
clients' kNN; ``Evaluator.finetunes``; ``ClientDrift.on_round_start`` and ``client_reading``), so its share of
the wall time is measured directly, not read off the difference of two noisy wall times.

Usage::

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 nice -n 10 python benchmarks/readings_overhead.py [overrides ...]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from fedlight.config import load_recipe
from fedlight.engine.loop.client_drift import ClientDrift
from fedlight.engine.loop.evaluator import READINGS, Evaluator
from fedlight.engine.run.fit import fit

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "quickstart_fmnist.yaml"
COMMON = ["fabric.accelerator=cpu", "fabric.threads=1"]
ARMS = {"none": ["eval.readings=[]"],
        "all": [f"eval.readings=[{','.join(READINGS)}]", "eval.finetune=[0.01,0.1]"]}
TIMED = {"readings": (Evaluator, "readings"), "finetunes": (Evaluator, "finetunes"),
         "drift (global features)": (ClientDrift, "on_round_start"), "drift (clients)": (ClientDrift, "client_reading")}


def timed(seconds: dict[str, float], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            seconds[name] += time.perf_counter() - start
    return wrapper


def run(arm: str, overrides: list[str], work: Path) -> dict[str, Any]:
    """One quickstart run of ``arm``: its wall seconds, rounds' training seconds and the timed readings."""
    seconds: dict[str, float] = defaultdict(float)
    originals = {name: getattr(cls, attr) for name, (cls, attr) in TIMED.items()}
    for name, (cls, attr) in TIMED.items():
        setattr(cls, attr, timed(seconds, name, originals[name]))
    try:
        start = time.perf_counter()
        results = fit(load_recipe(RECIPE, [*COMMON, *ARMS[arm], *overrides, f"run.dir={work / arm}"]))
        wall = time.perf_counter() - start
    finally:
        for name, (cls, attr) in TIMED.items():
            setattr(cls, attr, originals[name])
    history = results["history"]
    return {"arm": arm, "wall_seconds": round(wall, 2), "rounds_seconds": round(sum(r["seconds"] for r in history), 2),
            "train_seconds": round(sum(r["train_seconds"] for r in history), 2),
            "eval_seconds": round(sum(r["eval_seconds"] for r in history), 2),
            "timed": {k: round(v, 3) for k, v in seconds.items()},
            "final": {k: round(v, 4) for k, v in (results["final"] or {}).items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="recipe overrides for both arms")
    parser.add_argument("--order", nargs="+", default=["none", "all"], choices=list(ARMS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for i, arm in enumerate(args.order):
            print(json.dumps(run(arm, args.overrides, Path(tmp) / str(i))), flush=True)


if __name__ == "__main__":
    main()
