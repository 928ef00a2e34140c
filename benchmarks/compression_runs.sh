#!/usr/bin/env bash
# The compression block's runs (REPRODUCTION.md, "v3 compressed uploads"): the three arms of each seed, one run
# at a time, finished runs skipped (a second call only fills in what is missing).
#   nice -n 10 bash benchmarks/compression_runs.sh pilot $(seq 3000 3004)   # -> runs/compression/pilot/<arm>-<seed>
#   python benchmarks/compression_claim.py                                  # the table, n, and the verdicts
# fedlight runs from this tree (COMPRESSION_TREE to run another); the twin is quickstart_fmnist, smaller.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD; TREE=${COMPRESSION_TREE:-$ROOT}; OUT=$ROOT/runs/compression/$1; shift; mkdir -p "$OUT"
PY=${PYTHON:-$ROOT/.venv/bin/python}
TWIN="data.subset=5000 rounds=8 eval.every=4 fabric.threads=1 fabric.accelerator=cpu eval.projector_samples=0 loggers=[]"
cd "$TREE"; export PYTHONPATH=$TREE OMP_NUM_THREADS=1
for s in "$@"; do
  for arm in plain topk_ef topk; do
    d=$OUT/$arm-$s
    [ -f "$d/results.json" ] && $PY -c "import json,sys; r=json.load(open('$d/results.json')); sys.exit(r.get('final') is None or r['rounds_completed'] != r['recipe']['rounds'])" && continue
    case $arm in
      plain) X=() ;;
      topk_ef) X=("server={name: fedavg, compress: {kind: topk, fraction: 0.01, error_feedback: true}}") ;;
      topk) X=("server={name: fedavg, compress: {kind: topk, fraction: 0.01}}") ;;
    esac
    start=$(date +%s)
    $PY -m fedlight fit --recipe recipes/quickstart_fmnist.yaml --overwrite seed=$s $TWIN run.dir="$d" "${X[@]}" \
      > "$OUT/$arm-$s.log" 2>&1
    echo "$arm $s rc=$? $(( $(date +%s) - start ))s $(date -u +%H:%M:%S)" >> "$OUT/done.txt"
  done
done
