"""How long ``fit --overwrite`` takes to look for another run below the run folder it would replace.

The check (``folder_contents.more_than_a_run``, which ``check_run_dir`` and the claim ask) walks every
folder below, depth first, and stops at the first run or sweep it finds. Three folders, each holding
``--runs`` runs' worth of folders (a ``results.json``, a ``recipe.yaml`` and ``checkpoints/last.pt``,
all empty: the check reads names, never contents):

* ``sweep``: a sweep's ``--out`` four folders down (``P/2026/12/07/sweep``), its runs in ``runs/``;
* ``runs``: the runs four folders down, with no manifest;
* ``nothing``: the folder's own run and ``--runs`` folders of the same shape with none of a run's
  names in them (a TensorBoard tree): nothing to find, so every folder is listed (the worst case).

    python benchmarks/nested_runs.py --runs 10000 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from fedlight.engine.run import run_folder
from fedlight.errors import UserError

RUN_FILES = ("results.json", "recipe.yaml", "checkpoints/last.pt")
NOT_A_RUN = ("events.out", "hparams.yaml", "logs/metrics.csv")  # the same shape, none of a run's names


def _make(folder: Path, names: tuple[str, ...]) -> None:
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).touch()


def build(root: Path, layout: str, runs: int) -> Path:
    """The run folder ``root/layout``, holding its own run and ``runs`` folders as ``layout`` says."""
    top = root / layout
    _make(top, RUN_FILES)
    below = top / "2026/12/07" / ("sweep/runs" if layout == "sweep" else "runs")
    if layout == "sweep":
        _make(below.parent, ("manifest.json",))
    for i in range(runs):
        _make(below / f"r{i:05d}", NOT_A_RUN if layout == "nothing" else RUN_FILES)
    return top


def seconds(top: Path) -> tuple[float, str]:
    """(the check's wall time, what it said) for ``fit --overwrite`` into ``top``."""
    start = time.perf_counter()
    try:
        run_folder.check_run_dir(top, {}, resume=False, overwrite=True)
        said = "accepted"
    except UserError as exc:
        said = "refused: " + str(exc).split(" holds ")[1].split(", which")[0]
    return time.perf_counter() - start, said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for layout in ("sweep", "runs", "nothing"):
            top = build(Path(tmp), layout, args.runs)
            times, said = zip(*(seconds(top) for _ in range(args.repeats)))
            print(f"{layout:8s} {args.runs} folders: median {1000 * statistics.median(times):8.2f} ms "
                  f"(min {1000 * min(times):.2f}, max {1000 * max(times):.2f}); {said[0]}")


if __name__ == "__main__":
    main()
