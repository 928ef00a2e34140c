"""Kill -9 at random moments, resume, and compare with an uninterrupted run.

One straight run gives the reference. Then each trial starts the same recipe in its own
folder and SIGKILLs it at a random moment: it picks at random a round r that the run has
still to do, waits until r - 1 rounds are logged, then sleeps a uniform share of a round's
wall time (so kills land in start-up, training, evaluation and checkpoint writes alike). It does so ``--kills`` times in
a row, each restart resuming
from whatever checkpoint survived (or starting over when the kill came before the first
one); the last restart runs to the end. A trial passes when every restart found a loadable
checkpoint and the final global model, history and fault log equal the reference's.

    python benchmarks/kill_resume.py [--trials 5] [--kills 2] [--seed 0] [--out runs/kill_resume] [key=value ...]

Extra ``key=value`` overrides go to every run (e.g. ``faults.dropout=0.2`` to kill a faulty run).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
RECIPE = """
defaults:
  - {repo}/configs/data/synthetic.yaml
  - {repo}/configs/model/small_cnn.yaml
  - {repo}/configs/views/simclr.yaml
seed: 3
rounds: 4
partition: {{kind: dirichlet, alpha: 1.0, min_size: 5}}
clients: {{num: 4, fraction: 1.0}}
local: {{epochs: 1, batch_size: 64, lr: 0.001}}
method: {{name: simclr, hidden_dim: 64, output_dim: 32}}
server: {{name: fedavg}}
eval: {{every: 1, probe_epochs: 5, knn_k: 20, projector_samples: 0}}
fabric: {{accelerator: cpu, devices: 1, threads: 1}}
"""


def _cmd(recipe: Path, run: Path, overrides: list[str], flag: str | None) -> list[str]:
    return [sys.executable, "-m", "fedlight", "fit", "--recipe", str(recipe), *overrides, f"run.dir={run}",
            *([flag] if flag else [])]


def _outcome(run: Path) -> dict:
    ckpt = torch.load(run / "checkpoints/last.pt", weights_only=True)
    history = json.loads((run / "results.json").read_text())["history"]
    return {"global": ckpt["global"], "history": [{k: v for k, v in r.items() if k != "seconds"} for r in history],
            "faults": (run / "faults.csv").read_text()}


def _same(a: dict, b: dict) -> bool:
    return (a["history"] == b["history"] and a["faults"] == b["faults"]
            and all(torch.equal(a["global"][k], b["global"][k]) for k in a["global"]))


def _rounds_saved(run: Path) -> int | None:
    try:
        return int(torch.load(run / "checkpoints/last.pt", weights_only=True)["rounds_completed"])
    except Exception:
        return None


def _rounds_logged(run: Path) -> int:
    try:
        return int(json.loads((run / "results.json").read_text())["rounds_completed"])
    except (OSError, ValueError, KeyError):
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--kills", type=int, default=2, help="SIGKILLs per trial before the run may finish")
    parser.add_argument("--seed", type=int, default=0, help="seeds the kill moments")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "kill_resume")
    args, overrides = parser.parse_known_args()
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    recipe = args.out / "recipe.yaml"
    recipe.write_text(RECIPE.format(repo=REPO))

    t0 = time.perf_counter()
    subprocess.run(_cmd(recipe, args.out / "straight", overrides, None), env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    reference = _outcome(args.out / "straight")
    rounds = len(reference["history"])
    round_s = json.loads((args.out / "straight/results.json").read_text())["wall_seconds"] / rounds
    rng = random.Random(args.seed)
    trials = []
    for trial in range(args.trials):
        run = args.out / f"trial{trial}"
        kills = []
        for attempt in range(args.kills + 1):
            has_ckpt = (run / "checkpoints/last.pt").exists() or (run / "checkpoints/last.pt.prev").exists()
            flag = "--resume" if has_ckpt else ("--overwrite" if run.exists() else None)
            proc = subprocess.Popen(_cmd(recipe, run, overrides, flag), env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True)
            if attempt < args.kills:
                before = _rounds_logged(run)  # a restart resumes here: aim at a round still to run
                target, delay = before + rng.randrange(max(rounds - before, 1)), rng.uniform(0, round_s)
                start = time.perf_counter()
                while proc.poll() is None and _rounds_logged(run) < target:
                    time.sleep(0.05)
                try:
                    proc.wait(timeout=delay)
                except subprocess.TimeoutExpired:
                    proc.send_signal(signal.SIGKILL)
                proc.wait()
                kills.append({"after_s": round(time.perf_counter() - start, 2), "rounds_before": before,
                              "aimed_at_round": target + 1, "returncode": proc.returncode,
                              "rounds_saved": _rounds_saved(run)})
                continue
            _, err = proc.communicate()
            if proc.returncode != 0:
                trials.append({"trial": trial, "kills": kills, "ok": False, "error": err.strip().splitlines()[-1:]})
                break
            trials.append({"trial": trial, "kills": kills, "ok": _same(reference, _outcome(run))})
        print(json.dumps(trials[-1]), flush=True)
    killed = sum(k["returncode"] == -signal.SIGKILL for t in trials for k in t["kills"])
    summary = {"trials": len(trials), "passed": sum(t["ok"] for t in trials), "sigkills": killed,
               "straight_run_seconds": round(wall, 1), "overrides": overrides}
    (args.out / "summary.json").write_text(json.dumps({"summary": summary, "trials": trials}, indent=2) + "\n")
    print(json.dumps(summary))
    return 0 if summary["passed"] == summary["trials"] else 1


if __name__ == "__main__":
    sys.exit(main())
