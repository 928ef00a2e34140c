#!/usr/bin/env bash
# The FedBuff block's runs (REPRODUCTION.md, "v3 FedBuff vs synchronous FedAvg"): both arms of each seed,
# one run at a time, finished runs skipped (a second call only fills in what is missing).
#   nice -n 10 bash benchmarks/fedbuff_runs.sh verdict $(seq 2000 2023)   # -> runs/fedbuff/verdict/<arm>-<seed>
#   python benchmarks/fedbuff_claim.py                                     # the table and the verdicts
# fedlight runs from a clean worktree of 779ccc8 (the pilot's commit), made here if missing.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD; COMMIT=779ccc8; WT=${FEDBUFF_WT:-$ROOT/../fedbuff-wt}; OUT=$ROOT/runs/fedbuff/$1; shift; mkdir -p "$OUT"
[ -d "$WT" ] || git worktree add --detach "$WT" $COMMIT
[ "$(git -C "$WT" rev-parse --short=7 HEAD)" = $COMMIT ] || { echo "$WT is not at $COMMIT" >&2; exit 2; }
PY=${PYTHON:-$ROOT/.venv/bin/python}
cd "$WT"; export PYTHONPATH=$WT OMP_NUM_THREADS=1
for s in "$@"; do
  for arm in sync fedbuff; do
    d=$OUT/$arm-$s
    [ -f "$d/results.json" ] && $PY -c "import json,sys; r=json.load(open('$d/results.json')); sys.exit(r.get('final') is None or r['rounds_completed'] != r['recipe']['rounds'])" && continue
    if [ $arm = sync ]; then X="asynchrony.mode=sync rounds=30 eval.every=3"; else X=""; fi
    start=$(date +%s)
    $PY -m fedlight fit --recipe recipes/fedbuff_fmnist.yaml --overwrite seed=$s fabric.threads=1 run.dir="$d" $X > "$OUT/$arm-$s.log" 2>&1
    echo "$arm $s rc=$? $(( $(date +%s) - start ))s $(date -u +%H:%M:%S)" >> "$OUT/done.txt"
  done
done
