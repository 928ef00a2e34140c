"""Host milliseconds per local step, where per-call work dominates: this checkout against another.

A GPU at a small batch waits on the host (BENCHMARKS.md section 5), so the host's work per
step, not the arithmetic, sets the pace. On the CPU the same work shows with the smallest model
and batch: ``tiny_cnn`` (16-32-64 channels) on the synthetic 3 x 16 x 16 images, local batch 8,
one torch thread. Each configuration runs fedlight's own local loop (``train_client``) as a run
builds it (``fit.prepare``, ``assemble.build_federation``: its views, its compiled step) and
reports the process's CPU milliseconds per step (``time.process_time``: on a machine shared with
other jobs, wall time measures them too), wall milliseconds beside. Within a process the
configurations take turns, ``BLOCK`` steps each, after a 20-step warm-up client each.

Sides: this checkout, and with ``--base DIR`` another fedlight checkout (the code before a
change: ``git archive main | tar -x -C DIR``). Each side runs in its own child process,
alternately (base first in even repeats, this first in odd ones), ``--repeats`` times (the machine
is shared: medians, and the ratio of medians). A
configuration a side does not know (a recipe key it lacks) is ``n/a`` there.

Configurations: SimCLR, MOON, SCAFFOLD (supervised) and FedProx (SimCLR) with the defaults;
SimCLR with ``views.on_device=true`` (views drawn in one call, made as one batch); with
``--compile``, SimCLR with ``local.compile=inductor`` (its first steps compile: minutes on a
busy CPU, reported apart as ``compile_s``).

    python benchmarks/host_time.py --base /tmp/fedlight-main --repeats 5 --json host_time.json
    python benchmarks/host_time.py --steps 20 --repeats 1   # a smoke run of this checkout alone
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RECIPE = """
defaults:
  - {repo}/configs/data/synthetic.yaml
  - {repo}/configs/views/simclr.yaml
seed: 0
partition: {{kind: iid}}
clients: {{num: 1}}
model: {{backbone: tiny_cnn}}
local: {{batch_size: 8}}
fabric: {{accelerator: cpu, devices: 1, threads: 1}}
run: {{dir: {run}}}
"""
METHODS = {
    "simclr": ["method={name: simclr, hidden_dim: 64, output_dim: 32}"],
    "moon": ["method={name: moon, output_dim: 32}"],
    "scaffold": ["method={name: scaffold, objective: supervised}", "server={name: scaffold}"],
    "fedprox": ["method={name: fedprox, objective: simclr, hidden_dim: 64, output_dim: 32}"],
}
CONFIGS = {**METHODS, "simclr views.on_device": [*METHODS["simclr"], "views.on_device=true"]}
COMPILED = {"simclr local.compile=inductor": [*METHODS["simclr"], "local.compile=inductor"]}
WARMUP_STEPS = 20
BLOCK = 25  # steps a configuration takes before the next one's turn


class Trainer:
    """One configuration's local training, built once (``None`` from ``build``: a recipe key this checkout lacks)."""

    def __init__(self, fabric: Any, module: Any, views: Any, images: Any, labels: Any, batch: int) -> None:
        self.fabric, self.module, self.views, self.images, self.labels, self.batch = (
            fabric, module, views, images, labels, batch)
        self.client = 0

    @classmethod
    def build(cls, overrides: list[str], repo: Path, tmp: Path) -> Trainer | None:
        from fedlight.config import load_recipe
        from fedlight.engine.run.assemble import build_federation
        from fedlight.engine.run.fit import make_fabric, prepare
        from fedlight.errors import UserError

        path = tmp / "recipe.yaml"
        path.write_text(RECIPE.format(repo=repo, run=tmp / "run"))
        try:
            recipe = load_recipe(path, overrides)
        except UserError:
            return None
        server, data, parts, module, _ = prepare(recipe)
        fabric = make_fabric(recipe)
        federation = build_federation(fabric, recipe, data, parts, module, server, tmp / "run")
        # the run's own schedule's views; fabric.to_device is a no-op on the CPU
        return cls(fabric, federation.module, federation.schedule.views, fabric.to_device(data.train_x),
                   fabric.to_device(data.train_y), recipe.local.batch_size)

    def train(self, steps: int) -> tuple[float, float]:
        """``steps`` local steps of a new client (seeded by its number); (CPU seconds, wall seconds)."""
        import torch

        from fedlight.engine.loop.local_loop import steps_per_epoch, train_client

        idx = torch.arange(len(self.images))
        epochs = math.ceil(steps / steps_per_epoch(len(idx), self.batch))
        self.client += 1
        cpu, wall = time.process_time(), time.perf_counter()
        train_client(self.fabric, self.module, self.images, self.labels, idx, self.views, epochs, self.batch,
                     torch.Generator().manual_seed(self.client), max_steps=steps)
        return time.process_time() - cpu, time.perf_counter() - wall


def child(args: argparse.Namespace) -> None:
    """One side's measurements, as one JSON line on stdout: every configuration built, warmed up, then
    timed in blocks of ``BLOCK`` steps taken in turn, so a slower spell of the machine hits them all."""
    import torch

    os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)  # as fit does once the device is chosen
    torch.set_num_threads(1)
    configs = {**CONFIGS, **(COMPILED if args.compile else {})}
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {}
        for i, (name, overrides) in enumerate(configs.items()):
            (Path(tmp) / str(i)).mkdir()
            trainers[name] = Trainer.build(overrides, args.repo, Path(tmp) / str(i))
        ready = {name: t for name, t in trainers.items() if t is not None}
        warmup = {name: t.train(WARMUP_STEPS)[1] for name, t in ready.items()}  # compiles, where compiled
        spent = {name: [0.0, 0.0] for name in ready}
        for _ in range(max(1, args.steps // BLOCK)):
            for name, t in ready.items():
                cpu, wall = t.train(BLOCK)
                spent[name][0] += cpu
                spent[name][1] += wall
    steps = max(1, args.steps // BLOCK) * BLOCK
    print(json.dumps({name: None if name not in ready else {
        "cpu_ms_per_step": spent[name][0] / steps * 1e3, "wall_ms_per_step": spent[name][1] / steps * 1e3,
        "warmup_s": warmup[name]} for name in configs}))


def run_side(repo: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``child`` in a fresh process whose fedlight is the checkout in ``repo``."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--repo", str(repo), "--steps", str(args.steps)]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    done = subprocess.run(cmd + (["--compile"] if args.compile else []), env=env, cwd=repo, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"host_time: the side in {repo} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per configuration: each side's median ms per step (None: n/a) and the ratio this / base."""
    out: dict[str, dict[str, Any]] = {}
    for name in runs["this"][0]:
        row: dict[str, Any] = {}
        for side, results in runs.items():
            values = [r[name]["cpu_ms_per_step"] for r in results if r.get(name)]
            walls = [r[name]["wall_ms_per_step"] for r in results if r.get(name)]
            row[f"{side}_wall"] = statistics.median(walls) if walls else None
            row[side] = statistics.median(values) if values else None
            row[f"{side}_all"] = values
            if name in COMPILED and values:
                row[f"{side}_compile_s"] = statistics.median(r[name]["warmup_s"] for r in results if r.get(name))
        if row.get("base") and row.get("this"):
            row["ratio"] = row["this"] / row["base"]
        out[name] = row
    return out


def table(summary: dict[str, dict[str, Any]], sides: list[str]) -> str:
    """The summary as a markdown table."""
    fmt = lambda v: "n/a" if v is None else f"{v:.2f}"  # noqa: E731
    lines = ["| configuration | " + " | ".join(f"{s} CPU ms/step (median)" for s in sides)
             + (" | this / base |" if "base" in sides else " |"),
             "|---" * (len(sides) + 1 + ("base" in sides)) + "|"]
    for name, row in summary.items():
        cells = [fmt(row.get(s)) for s in sides]
        if "base" in sides:
            cells.append("n/a" if row.get("ratio") is None else f"{row['ratio']:.3f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", type=Path, default=None, help="another fedlight checkout to compare with")
    p.add_argument("--steps", type=int, default=300, help="timed local steps per configuration")
    p.add_argument("--repeats", type=int, default=5, help="child processes per side, alternately")
    p.add_argument("--compile", action="store_true", help="also SimCLR with local.compile=inductor (slow to compile)")
    p.add_argument("--json", type=Path, default=None, help="write every measurement and the summary here")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--repo", type=Path, default=REPO, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args)
        return 0
    sides = {"base": args.base.resolve(), "this": REPO} if args.base else {"this": REPO}
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for repeat in range(args.repeats):
        order = list(sides.items())
        for side, repo in order if repeat % 2 == 0 else order[::-1]:  # ABBA: a drifting machine favours no side
            runs[side].append(run_side(repo, args))
            print(f"repeat {repeat + 1}/{args.repeats}, {side}: "
                  + ", ".join(f"{k} {v['cpu_ms_per_step']:.2f}" for k, v in runs[side][-1].items() if v), flush=True)
    summary = summarize(runs)
    print(table(summary, list(sides)))
    if args.json is not None:
        args.json.write_text(json.dumps({"steps": args.steps, "repeats": args.repeats, "sides": {
            k: str(v) for k, v in sides.items()}, "summary": summary, "runs": runs}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
