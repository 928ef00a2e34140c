#!/usr/bin/env bash
# The FedBN block's runs (REPRODUCTION.md, "v3 FedBN under feature shift"): each seed's arms, one run at a
# time, finished runs skipped (a second call only fills in what is missing).
#   nice -n 10 bash benchmarks/fedbn_shift_runs.sh pilot 3900 3901 3902 3903 3904   # -> runs/fedbn_shift/pilot/<arm>-<seed>
#   ARMS="simclr_shift simclr_label" nice -n 10 bash benchmarks/fedbn_shift_runs.sh pilot 3900 ...   # the beside rows
#   ARMS="fedbn_simclr fedavg_simclr" nice -n 10 bash benchmarks/fedbn_shift_runs.sh pilot_simclr 3600 ...   # the SimCLR half
#   python benchmarks/fedbn_shift_claim.py pilot                                      # the table (and, for verdict, the verdicts)
# fedlight runs from this tree; each results.json records its commit and whether the tree was dirty.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD; OUT=$ROOT/runs/fedbn_shift/$1; shift; mkdir -p "$OUT"
PY=${PYTHON:-$ROOT/.venv/bin/python}
export PYTHONPATH=$ROOT OMP_NUM_THREADS=1
for s in "$@"; do
  for arm in ${ARMS:-fedbn fedavg}; do
    d=$OUT/$arm-$s
    [ -f "$d/results.json" ] && $PY -c "import json,sys; r=json.load(open('$d/results.json')); sys.exit(r.get('final') is None or r['rounds_completed'] != r['recipe']['rounds'])" && continue
    case $arm in
      fedbn) R=recipes/fedbn_shift_fmnist.yaml; X=() ;;
      fedavg) R=recipes/fedbn_shift_fmnist.yaml; X=("method={name: supervised}") ;;
      fedbn_simclr) R=recipes/fedavg_ssl_shift_fmnist.yaml; X=("method={name: fedbn, objective: simclr}" eval.local_test=true) ;;
      fedavg_simclr) R=recipes/fedavg_ssl_shift_fmnist.yaml; X=(eval.local_test=true) ;;
      simclr_shift) R=recipes/fedavg_ssl_shift_fmnist.yaml; X=() ;;
      simclr_label) R=recipes/fedavg_ssl_shift_fmnist.yaml; X=(partition.kind=dirichlet "partition.domains=[]") ;;
    esac
    start=$(date +%s)
    $PY -m fedlight fit --recipe $R --overwrite seed=$s fabric.threads=1 run.dir="$d" "${X[@]}" > "$OUT/$arm-$s.log" 2>&1
    echo "$arm $s rc=$? $(( $(date +%s) - start ))s $(date -u +%H:%M:%S)" >> "$OUT/done.txt"
  done
done
