#!/usr/bin/env bash
# Every finished run under RUNS (a seed folder of reproduce.py: .../seed<k>/runs/seed=<k>/) into
# TARBALL: its results.json, which is all reproduce.py reads, with its faults.csv and recipe.yaml,
# and every block's rule-v3 claims (claims-v3-*.jsonl, what family_table.py reads).
# A fresh machine then re-tabulates a block instead of training it again, and trains only the runs
# the archive lacks (reproduce.py reuses finished runs):
#   bash benchmarks/archive_runs.sh runs/robustness benchmarks/results/robustness-runs.tar.xz
#   tar -xJf benchmarks/results/robustness-runs.tar.xz   # in the repository root: puts them back
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:?usage: archive_runs.sh RUNS TARBALL} tarball=${2:?usage: archive_runs.sh RUNS TARBALL}
mkdir -p "$(dirname "$tarball")"
# written aside, then renamed over the old archive: a kill midway leaves the old one whole
python - "$runs" <<'EOF' | tar --owner=0 --group=0 --mtime=2026-11-26 -cJhf "$tarball.tmp" -T -
import pathlib, sys
sys.path.insert(0, "benchmarks")
from reproduce import finished  # the test reproduce.py reuses a run by
for r in sorted(pathlib.Path(sys.argv[1]).glob("**/seed*/runs/seed=*/results.json")):
    if finished(r.parent) is not None:
        print(*(f for f in (r.parent / n for n in ("results.json", "faults.csv", "recipe.yaml")) if f.exists()), sep="\n")
for claims in sorted(pathlib.Path(sys.argv[1]).glob("**/claims-v3-*.jsonl")):
    print(claims)
EOF
mv "$tarball.tmp" "$tarball"
echo "$tarball: $(tar -tJf "$tarball" | grep -c results.json) finished runs"
