"""Where a fedlight run's wall time goes, and how far the run is from its floor.

Three measurements, each in fresh processes on otherwise idle cores:

* **phases**: ``fedlight fit`` on the recipe (one process) in a child process whose engine
  functions are timed: the imports, data, set-up (Fabric, model, federation), the evaluations,
  the TensorBoard logger, local training (``Workers.map``) split into its optimizer steps (each
  timed in its worker's thread, waiting for the GIL included) and what the engine does between
  them (state swaps, optimizer set-up, NaN/Inf check, aggregation), the rest of the rounds
  (sampling, finishing the average, logging), checkpoints and results; the whole process's
  wall time around them.
* **step**: the run's SimCLR step (``plain_loop.local_train`` at the run's mean batch, one
  torch thread) alone, as two processes at once, and as two threads of one process at once:
  what the two cores do in parallel, and what sharing one interpreter costs.
* **bound**: imports + data + set-up + evaluations + logger + steps x (two-process step) / 2:
  the run's time if the engine cost nothing beyond the arithmetic on both cores and the work
  every engine does (the libraries' imports, the data, the evaluations). With ``--flower
  SECONDS`` (``vs_flower.py``'s median, same machine and workload) it prints the speed-up over
  Flower that run would have: the most any engine paying those costs could reach.

    python benchmarks/floor.py benchmarks/workloads/cross_device_fmnist.yaml fabric.workers=2 --flower 84.7
    python benchmarks/floor.py benchmarks/workloads/cross_device_fmnist.yaml rounds=1 --steps 20  # tiny check
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

START = time.perf_counter()
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from command_line import parse_with_overrides  # noqa: E402
from vs_flower import measure  # noqa: E402

NOT_SECONDS = ("steps", "mean batch", "clients", "workers")  # what child_phases reports besides its phases


def timed(owner: object, name: str, spent: dict[str, float], phase: str) -> None:
    """Replace ``owner.name`` by a wrapper that adds its wall seconds to ``spent[phase]``."""
    fn = getattr(owner, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[phase] = spent.get(phase, 0.0) + time.perf_counter() - start
    setattr(owner, name, wrapper)


def child_phases(recipe: str, overrides: list[str], run_dir: str) -> dict[str, float]:
    """One ``fedlight fit`` in this process with its phases timed (seconds), its steps and clients counted."""
    from fedlight import cli  # the imports are what this times
    from fedlight.engine.loop import evaluator, federation as orchestrator, local_loop, run_checkpoint, run_log, workers
    from fedlight.engine.run import fit
    spent = {"imports": time.perf_counter() - START}
    for name in ("prepare_data", "make_fabric", "build_module"):
        timed(fit, name, spent, "data" if name == "prepare_data" else "set-up")
    timed(orchestrator.Federation, "__init__", spent, "set-up")
    timed(evaluator.Evaluator, "model_metrics", spent, "evaluations")
    for name in ("open", "final"):
        timed(run_log.RunLog, name, spent, "logger")
    for name in orchestrator.TRAINING_STEPS:  # a round from its start to its new global model
        timed(orchestrator.Federation, name, spent, "rounds outside local training")
    timed(workers.Workers, "map", spent, "local training")
    timed(run_checkpoint.RunCheckpoint, "save", spent, "checkpoints and results")
    timed(orchestrator, "atomic_write_json", spent, "checkpoints and results")
    steps, step = [], local_loop.training_step  # list.append is atomic: the workers' threads share it

    def timed_step(*args, **kwargs):
        start = time.perf_counter()
        out = step(*args, **kwargs)
        steps.append((len(args[5]), time.perf_counter() - start))  # args[5]: the batch's sample indices
        return out
    local_loop.training_step = timed_step
    code = cli.main(["fit", "--recipe", recipe, *overrides, f"run.dir={run_dir}", "--overwrite"])
    if code != 0:
        sys.exit(code)
    results = json.loads((Path(run_dir) / "results.json").read_text())
    workers = results["recipe"]["fabric"]["workers"]
    in_steps = sum(seconds for _, seconds in steps) / workers  # the workers' step seconds, as wall time
    spent["rounds outside local training"] -= spent["local training"]
    spent["local training: steps"] = in_steps
    spent["local training: between the steps"] = spent.pop("local training") - in_steps
    return {**spent, "steps": len(steps), "mean batch": sum(n for n, _ in steps) / max(len(steps), 1),
            "clients": sum(len(row["clients"]) for row in results["history"]), "workers": workers}


def child_steps(recipe_path: str, overrides: list[str], steps: int, batch: int, threads: int) -> list[float]:
    """ms per SimCLR step of ``batch`` images on one torch thread, in each of ``threads`` threads at once."""
    import torch
    from fedlight.config import load_recipe
    from fedlight.engine.run.assemble import build_views
    from fedlight.engine.run.fit import build_module, prepare_data
    from plain_loop import local_train
    recipe = load_recipe(recipe_path, [*overrides, "fabric.accelerator=cpu", "local.epochs=1",
                                       f"local.batch_size={batch}"])
    data, _ = prepare_data(recipe)
    views = build_views(recipe, data)
    idx = torch.arange(batch * steps) % len(data.train_x)
    out = [0.0] * threads

    def ready() -> None:  # every thread warmed up: tell the parent, start when it says so
        print("ready", flush=True)
        sys.stdin.readline()
    start_together = threading.Barrier(threads, action=ready)

    def run(i: int) -> None:
        torch.set_num_threads(1)  # this thread's OpenMP team (as fabric.workers does)
        model = build_module(recipe, data)
        local_train(model, views, data.train_x, data.train_y, idx[:2 * batch], recipe, 0, i)  # warm-up
        start_together.wait()
        start = time.perf_counter()
        local_train(model, views, data.train_x, data.train_y, idx, recipe, 0, i)
        out[i] = 1000 * (time.perf_counter() - start) / steps
    pool = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe")
    parser.add_argument("--steps", type=int, default=200, help="SimCLR steps per measurement of the step")
    parser.add_argument("--flower", type=float, default=None, metavar="SECONDS",
                        help="Flower's wall time on this workload (vs_flower.py), for the best possible speed-up")
    parser.add_argument("--json", type=Path, default=None, help="write the numbers here")
    parser.add_argument("--child", choices=("phases", "steps"), help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    args = parse_with_overrides(parser)
    if args.child:
        result = (child_phases(args.recipe, args.overrides, args.run_dir) if args.child == "phases"
                  else child_steps(args.recipe, args.overrides, args.steps, args.batch, args.threads))
        print(json.dumps(result), flush=True)
        os._exit(0)  # as `fedlight fit` ends (cli.run): no interpreter teardown in the measured wall time

    me = [sys.executable, __file__, args.recipe, *args.overrides]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    tmp = Path(tempfile.mkdtemp(prefix="floor_"))
    wall, peak = measure([*me, "--child", "phases", "--run-dir", str(tmp / "run")], env, tmp / "phases.log")
    phases = json.loads((tmp / "phases.log").read_text().strip().splitlines()[-1])

    def step_ms(threads: int, processes: int) -> list[float]:
        """ms per step in each thread of ``processes`` processes of ``threads`` threads, all started together."""
        cmd = [*me, "--child", "steps", "--steps", str(args.steps), "--batch", str(round(phases["mean batch"])),
               "--threads", str(threads)]
        pool = [subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for _ in range(processes)]
        for p in pool:
            if p.stdout.readline().strip() != "ready":
                sys.exit(f"{' '.join(cmd)} failed before its steps")
        for p in pool:
            p.stdin.write("go\n")
            p.stdin.flush()
        return [ms for p in pool for ms in json.loads(p.communicate()[0].splitlines()[-1])]

    alone, processes, threads = step_ms(1, 1)[0], step_ms(1, 2), step_ms(2, 1)

    print(f"whole run {wall:.2f} s (peak {peak / 2**20:.0f} MiB), {phases['steps']} SimCLR steps of "
          f"{phases['mean batch']:.1f} images on average")
    accounted = sum(v for k, v in phases.items() if k not in NOT_SECONDS)
    for name, seconds in [*((k, v) for k, v in phases.items() if k not in NOT_SECONDS),
                          ("the rest (interpreter, run folder, exit)", wall - accounted)]:
        print(f"  {name:<42} {seconds:7.2f} s  {100 * seconds / wall:5.1f}%")
    steps_ms = 1000 * phases["local training: steps"] * phases["workers"] / max(phases["steps"], 1)
    between_ms = 1000 * phases["local training: between the steps"] * phases["workers"] / max(phases["clients"], 1)
    print(f"in the run: {steps_ms:.1f} ms a step, {between_ms:.2f} ms a client between the steps "
          f"({phases['workers']} worker(s), {phases['clients']} clients)")
    print(f"one {round(phases['mean batch'])}-image step of one thread: alone {alone:.1f} ms; two processes at "
          f"once {processes[0]:.1f} / {processes[1]:.1f} ms; two threads at once {threads[0]:.1f} / "
          f"{threads[1]:.1f} ms")
    two = sum(processes) / 2
    fixed = sum(phases.get(k, 0.0) for k in ("imports", "data", "set-up", "evaluations", "logger"))
    bound = fixed + phases["steps"] * two / 1000 / 2
    print(f"floor: {fixed:.2f} s of imports, data, set-up, evaluations and logger + {phases['steps']} steps x "
          f"{two:.1f} ms / 2 cores = {bound:.2f} s; this run is {wall / bound:.3f}x its floor")
    out = {"recipe": args.recipe, "overrides": args.overrides, "wall": wall, "peak_bytes": peak, "phases": phases,
           "step_ms": {"in_run": steps_ms, "alone": alone, "two_processes": processes, "two_threads": threads},
           "between_steps_ms_per_client": between_ms, "floor": bound}
    if args.flower:
        print(f"vs Flower's {args.flower:.1f} s: this run {args.flower / wall:.2f}x; at the floor "
              f"{args.flower / bound:.2f}x")
        out["flower"] = args.flower
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
