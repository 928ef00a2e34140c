"""fedlight vs. Flower's simulation engine (Ray backend) on one workload, side by side.

Each repetition runs both sides as fresh processes, alternating which goes first, and
records the wall time of the whole process (imports, data, Ray start-up, training,
evaluation: what a researcher waits for) and the peak resident memory of its whole process
tree (Ray's daemons and workers included), sampled every 50 ms. Both sides train the same
model from the same initialisation on the same data with the same views and batches, and
are scored by the same evaluation (kNN and linear probe); a kNN gap beyond noise voids the
comparison and is flagged.

Needs the ``bench`` extra (``pip install -e .[bench]``: Flower with Ray, psutil)::

    python benchmarks/vs_flower.py benchmarks/workloads/cross_silo_fmnist.yaml --repeats 3
    python benchmarks/vs_flower.py benchmarks/workloads/cross_device_fmnist.yaml --repeats 3
    python benchmarks/vs_flower.py benchmarks/workloads/cross_device_fmnist.yaml --repeats 3 \\
        --fedlight fabric.devices=2 fabric.threads=1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent


def tree_rss(proc: psutil.Process) -> int:
    """Resident bytes of ``proc`` and all its descendants (processes that vanish meanwhile count 0)."""
    total = 0
    try:
        family = [proc, *proc.children(recursive=True)]
    except psutil.Error:  # the tree ended meanwhile
        return 0
    for p in family:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def measure(cmd: list[str], env: dict[str, str], log: Path) -> tuple[float, int]:
    """Runs ``cmd`` to the end; (wall seconds, peak RSS of its process tree in bytes)."""
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    peak, ps = 0, psutil.Process(proc.pid)

    def sample() -> None:
        nonlocal peak
        while proc.poll() is None:
            peak = max(peak, tree_rss(ps))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code = proc.wait()
    wall = time.perf_counter() - start
    sampler.join()
    if code != 0:
        sys.exit(f"{cmd[:4]} failed with exit code {code}; see {log}")
    return wall, peak


def run_fedlight(recipe: str, folder: Path, env: dict[str, str], overrides: list[str]) -> dict:
    cmd = [sys.executable, "-m", "fedlight", "fit", "--recipe", recipe, *overrides, f"run.dir={folder}", "--overwrite"]
    wall, peak = measure(cmd, env, folder.with_suffix(".log"))
    final = json.loads((folder / "results.json").read_text())["final"]
    return {"seconds": wall, "peak_bytes": peak, "knn_acc": final["knn_acc"]}


def run_flower(recipe: str, folder: Path, env: dict[str, str], workers: int) -> dict:
    out = folder.with_suffix(".json")
    cmd = [sys.executable, "-c", "import flower_app, sys; flower_app.main(sys.argv[1:])", recipe, str(out),
           "--workers", str(workers)]
    wall, peak = measure(cmd, env, folder.with_suffix(".log"))
    return {"seconds": wall, "peak_bytes": peak, "knn_acc": json.loads(out.read_text())["final"]["knn_acc"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="Flower's Ray actors (one CPU each)")
    parser.add_argument("--out", type=Path, default=None, help="folder for logs and run folders (default: a temp dir)")
    parser.add_argument("--fedlight", nargs="*", default=[], metavar="KEY=VALUE",
                        help="overrides for fedlight's side only, e.g. fabric.devices=2 fabric.threads=1 "
                             "(two processes, as Flower's two workers)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="vs_flower_"))
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    rows: dict[str, list[dict]] = {"fedlight": [], "flower": []}
    for rep in range(args.repeats):
        sides = [("fedlight", lambda f: run_fedlight(args.recipe, f, env, args.fedlight)),
                 ("flower", lambda f: run_flower(args.recipe, f, env, args.workers))]
        for name, fn in sides if rep % 2 == 0 else sides[::-1]:
            rows[name].append(fn(out / f"{name}{rep}"))
            r = rows[name][-1]
            print(f"repeat {rep + 1} {name}: {r['seconds']:.1f} s, peak {r['peak_bytes'] / 2**20:.0f} MiB, "
                  f"kNN {100 * r['knn_acc']:.2f}%", flush=True)
    med = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in rows.items()}
    f, w = med["fedlight"], med["flower"]
    print(f"\nmedian over {args.repeats}: fedlight {f['seconds']:.1f} s / {f['peak_bytes'] / 2**20:.0f} MiB / "
          f"kNN {100 * f['knn_acc']:.2f}%;  Flower {w['seconds']:.1f} s / {w['peak_bytes'] / 2**20:.0f} MiB / "
          f"kNN {100 * w['knn_acc']:.2f}%")
    print(f"speed-up {w['seconds'] / f['seconds']:.2f}x, memory {f['peak_bytes'] / w['peak_bytes']:.2f} of Flower's")
    (out / "summary.json").write_text(json.dumps({"recipe": args.recipe, "fedlight_overrides": args.fedlight,
                                                  "runs": rows, "median": med}, indent=1))


if __name__ == "__main__":
    main()
