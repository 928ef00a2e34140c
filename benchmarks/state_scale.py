"""Stateful clients at cross-device scale: SCAFFOLD, then MOON, at 100 to 10,000 clients.

Each method on populations of N clients with a round's arithmetic held fixed, as in
``client_scaling.py``: every client holds exactly ``n`` Fashion-MNIST images (iid over a
``data.subset`` of N * n), ``k`` = 50 clients are sampled a round and each trains one local
epoch as a single batch of ``n``. The models are the paper-sized ones: SCAFFOLD on the 3-layer
CNN (a control variate of 0.38 MB a client), MOON on its CNN (a previous model of 0.29 MB).
Each population runs for ``ceil(coverage * N / k)`` rounds (at least 20), so that about
1 - exp(-coverage) of the clients (75% at the default 1.4) hold a state by the end.

Per population, one fresh one-process ``fedlight fit`` (its peak RSS is the kernel's high-water
mark, ``getrusage``'s ``ru_maxrss``) with the disk store (``run.client_state=disk``, a cache of
``run.state_cache_mb`` = 64 MiB) or the one ``--stores`` names. Inside it, the round loop's
checkpoint is timed and the bytes it commits counted: per round, ``last.pt``'s size plus the
client state files written that round (the disk store writes them when a client finishes,
their seconds are counted as checkpoint seconds too). Reported: median round time without
evaluation over the rounds after the first, peak RSS, median checkpoint bytes and seconds a
round over the last half of the rounds (where the memory store's checkpoint is at its
largest), and ratios against the smallest population. Targets: 10,000 within 1.2x of 100.

Full size (about 15 minutes on 2 idle CPU cores; key=value arguments are passed to fedlight)::

    python benchmarks/state_scale.py --json state_scale.json

Tiny check::

    python benchmarks/state_scale.py --methods scaffold --populations 100 200 --coverage 0.2
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from command_line import parse_with_overrides

HERE = Path(__file__).resolve().parent

RECIPE = HERE.parent / "recipes" / "quickstart_fmnist.yaml"
METHODS = {  # method: its recipe overrides
    "scaffold": ["method={name: scaffold, objective: supervised}", "server.name=scaffold", "model.backbone=small_cnn"],
    "moon": ["method={name: moon, mu: 5.0}", "server.name=fedavg", "model.backbone=moon_cnn"],
}
MIB = 2**20
CHILD = "import state_scale, sys; state_scale.child(sys.argv[1:])"


def child(argv: list[str]) -> None:
    """In the measured process: ``fedlight fit`` with the round loop's checkpoint timed; writes
    one row a checkpoint to ``argv[0]``, the rest is the ``fedlight`` command line."""
    import resource
    import time

    from fedlight.cli import main
    from fedlight.engine.loop.run_checkpoint import RunCheckpoint

    out, rows, real = Path(argv[0]), [], RunCheckpoint.save

    def timed(self: Any, state: Any, wall: float, partial: Any = None) -> None:
        store = self.clients.store
        started = time.perf_counter()
        real(self, state, wall, partial)
        seconds = time.perf_counter() - started
        written = (getattr(store, "written_bytes", 0), getattr(store, "written_seconds", 0.0))
        last = rows[-1] if rows else {"state_bytes_total": 0, "state_seconds_total": 0.0}
        rows.append({"round": state.rounds_done, "commit_seconds": seconds,
                     "last_pt_bytes": self.path.stat().st_size,
                     "state_bytes": written[0] - last["state_bytes_total"],
                     "state_seconds": written[1] - last["state_seconds_total"],
                     "state_bytes_total": written[0], "state_seconds_total": written[1]})

    RunCheckpoint.save = timed
    code = main(argv[1:])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    out.write_text(json.dumps({"rows": rows, "peak_bytes": peak}))
    sys.exit(code)


def overrides(method: str, clients: int, store: str, args: argparse.Namespace) -> list[str]:
    rounds = max(20, math.ceil(args.coverage * clients / args.k))
    return [*METHODS[method], "views.blur_p=[0.0]", "partition.kind=iid", f"clients.num={clients}",
            f"clients.fraction={args.k / clients!r}", f"data.subset={clients * args.n}",
            f"local.batch_size={args.n}", "local.epochs=1", f"rounds={rounds}", f"eval.every={rounds}",
            "eval.projector_samples=0", "eval.probe_epochs=1", f"eval.label_fraction={min(1.0, 60 / (clients * args.n))!r}",
            f"run.client_state={store}", f"run.state_cache_mb={args.cache_mb}", "fabric.accelerator=cpu",
            *args.overrides]


def run_one(method: str, clients: int, store: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """One fresh process: its summary (medians), wall time and peak RSS."""
    rows_file = folder.with_suffix(".rows.json")
    cmd = [sys.executable, "-c", CHILD, str(rows_file), "fit", "--recipe", str(args.recipe),
           *overrides(method, clients, store, args), f"run.dir={folder}", "--overwrite"]
    started = time.perf_counter()
    with open(folder.with_suffix(".log"), "w") as log:
        code = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": f"{HERE}:{HERE.parent}"}, stdout=log,
                              stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - started
    if code != 0:
        sys.exit(f"{method}, {clients} clients failed with exit code {code}; see {folder.with_suffix('.log')}")
    results, measured = json.loads((folder / "results.json").read_text()), json.loads(rows_file.read_text())
    history, rows, peak = results["history"], measured["rows"], measured["peak_bytes"]
    wrong = [row["round"] for row in history if len(row["clients"]) != args.k]
    if wrong:
        sys.exit(f"{method}, {clients} clients: rounds {wrong[:5]} did not train {args.k} clients")
    late = rows[len(rows) // 2:]
    held = len({c for row in history for c in row["clients"]})
    return {"method": method, "clients": clients, "store": store, "rounds": len(history), "holding_state": held,
            "round_seconds": statistics.median(r["seconds"] - r["eval_seconds"] for r in history[1:]),
            "peak_bytes": peak, "wall_seconds": wall,
            "checkpoint_bytes": statistics.median(r["last_pt_bytes"] + r["state_bytes"] for r in late),
            "last_pt_bytes": statistics.median(r["last_pt_bytes"] for r in late),
            "checkpoint_seconds": statistics.median(r["commit_seconds"] + r["state_seconds"] for r in late),
            "state_files_bytes": sum(p.stat().st_size for p in (folder / "checkpoints/clients").glob("*.pt"))}


def print_table(rows: list[dict[str, Any]]) -> None:
    first = rows[0]
    print(f"\n{'method':>9} {'store':>6} {'clients':>7} {'rounds':>6} {'w/ state':>8} {'round s':>8} {'peak MiB':>9} "
          f"{'ckpt MiB/rd':>11} {'ckpt s/rd':>9} {'round x':>8} {'peak x':>7} {'ckpt B x':>8} {'ckpt s x':>8}")
    for r in rows:
        print(f"{r['method']:>9} {r['store']:>6} {r['clients']:>7,} {r['rounds']:>6} {r['holding_state']:>8,} "
              f"{r['round_seconds']:>8.3f} {r['peak_bytes'] / MIB:>9.0f} {r['checkpoint_bytes'] / MIB:>11.2f} "
              f"{r['checkpoint_seconds']:>9.3f} {r['round_seconds'] / first['round_seconds']:>8.2f} "
              f"{r['peak_bytes'] / first['peak_bytes']:>7.2f} {r['checkpoint_bytes'] / first['checkpoint_bytes']:>8.2f} "
              f"{r['checkpoint_seconds'] / first['checkpoint_seconds']:>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", type=Path, default=RECIPE)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--populations", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--stores", nargs="+", default=["disk"], choices=["disk", "memory"])
    parser.add_argument("--n", type=int, default=6, help="images per client (and the local batch size)")
    parser.add_argument("--k", type=int, default=50, help="clients sampled per round")
    parser.add_argument("--coverage", type=float, default=1.4, help="rounds = ceil(coverage * N / k), at least 20")
    parser.add_argument("--cache-mb", type=int, default=64, help="run.state_cache_mb")
    parser.add_argument("--out", type=Path, default=None, help="folder for run folders and logs (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="write the settings and the table here")
    args = parse_with_overrides(parser)
    out = args.out or Path(tempfile.mkdtemp(prefix="state_scale_"))
    out.mkdir(parents=True, exist_ok=True)
    table = []
    for method in args.methods:
        rows = []
        for store in args.stores:
            for clients in args.populations:
                folder = out / f"{method}_{store}_{clients}"
                rows.append(run_one(method, clients, store, args, folder))
                r = rows[-1]
                print(f"{method} {store} {clients:,}: round {r['round_seconds']:.3f} s, peak {r['peak_bytes'] / MIB:.0f}"
                      f" MiB, checkpoint {r['checkpoint_bytes'] / MIB:.2f} MiB / {r['checkpoint_seconds']:.3f} s a round,"
                      f" wall {r['wall_seconds']:.0f} s", flush=True)
                shutil.rmtree(folder / "checkpoints/clients", ignore_errors=True)  # GBs at 10,000 clients
        print_table(rows)
        table += rows
    print(f"(k={args.k} of n={args.n} images a round, coverage {args.coverage}, cache {args.cache_mb} MiB; runs in {out})")
    if args.json:
        args.json.write_text(json.dumps({"settings": {k: str(v) for k, v in vars(args).items()}, "table": table},
                                        indent=1))


if __name__ == "__main__":
    main()
