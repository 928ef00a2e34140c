#!/usr/bin/env bash
# BENCHMARKS.md section 9, before and after: the clock's sides measured in two trees side by side, each
# measurement its own process (clock_overhead.seconds_per_client over 1,000 clients), the order rotated
# every repeat. Prints "repeat R before|after SIDE ms_per_client clock_share checkpoint_share minor_faults".
#   git worktree add ../before 2d69e71 && cp benchmarks/clock_overhead.py ../before/benchmarks/
#   bash benchmarks/results/clock-overhead-ab-2026-12-07.sh ../before .              # one thread, 4 repeats
#   THREADS=2 REPEATS=3 AFTER_SIDES="sync|fedbuff K=100, ckpt/10" BEFORE_SIDES="fedbuff K=100, ckpt/10" \
#     bash benchmarks/results/clock-overhead-ab-2026-12-07.sh ../before .          # the two-thread reading
# (the "before" tree needs this commit's clock_overhead.py, which also counts page faults; the recorded outputs
# came from a first form of this script with fixed paths, the same measurement and another rotation order)
set -u
BEFORE=$(cd "$1" && pwd); AFTER=$(cd "$2" && pwd)
PY=${PYTHON:-$AFTER/.venv/bin/python}
IFS='|' read -r -a after_sides <<< "${AFTER_SIDES-sync|fedbuff K=100, ckpt/10|fedbuff K=10, ckpt/100}"
IFS='|' read -r -a before_sides <<< "${BEFORE_SIDES-fedbuff K=100, ckpt/10|fedbuff K=10, ckpt/100}"
configs=()
for s in "${after_sides[@]}"; do configs+=("$AFTER|$s|after"); done
for s in "${before_sides[@]}"; do configs+=("$BEFORE|$s|before"); done
one() {  # tree side label
  (cd "$1/benchmarks" && PYTHONPATH=$1 OMP_NUM_THREADS=${THREADS:-1} "$PY" -c "
from clock_overhead import SIDES, seconds_per_client
m = seconds_per_client(SIDES['$2'], 1000, ${THREADS:-1})
print('$3', '$2', round(m[0] * 1000, 3), round(m[1], 5), round(m[2], 5), round(m[3], 1), flush=True)" 2>/dev/null)
}
n=${#configs[@]}
for r in $(seq 1 "${REPEATS:-4}"); do
  for i in $(seq 0 $((n - 1))); do
    IFS='|' read -r tree side label <<< "${configs[$(( (i + r) % n ))]}"
    echo -n "repeat $r "; one "$tree" "$side" "$label"
  done
done
