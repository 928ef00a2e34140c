#!/usr/bin/env bash
# A/B: the clock's sides in the tree before the cut (/work/wt-old, commit 2d69e71) and after (/work/main), each
# measurement its own process, the order rotated every repeat.
cd /work/main/benchmarks
one() { PYTHONPATH=$1 OMP_NUM_THREADS=1 /work/main/.venv/bin/python -c "
import sys; sys.path.insert(0, '$1/benchmarks')
from clock_overhead import SIDES, seconds_per_client
m = seconds_per_client(SIDES['$2'], 1000, 1)
print('$3', '$2', round(m[0] * 1000, 3), round(m[1], 5), round(m[2], 5), round(m[3], 1), flush=True)" 2>/dev/null; }
CONFIGS=("/work/main|sync|after" "/work/wt-old|fedbuff K=100, ckpt/10|before" "/work/main|fedbuff K=100, ckpt/10|after" "/work/wt-old|fedbuff K=10, ckpt/100|before" "/work/main|fedbuff K=10, ckpt/100|after")
for r in 1 2 3 4; do
  n=${#CONFIGS[@]}
  for i in $(seq 0 $((n - 1))); do
    c=${CONFIGS[$(( (i + r) % n ))]}
    IFS='|' read -r tree side label <<< "$c"
    echo -n "repeat $r "; one "$tree" "$side" "$label"
  done
done
