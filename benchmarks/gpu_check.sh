#!/usr/bin/env bash
# What a session lent a GPU runs there, in one call (BENCHMARKS.md section 5):
#   1. gpu_profile.py: ResNet-18 SimCLR local training, bf16-mixed and 32-true;
#   2. one short `fedlight fit` of every paper's recipe, and of the robust, attack, DP and
#      two-worker paths, with fabric.accelerator=gpu: each must finish and write final results.
# A step that fails does not stop the next; fits.md says which fits passed.
#   bash benchmarks/gpu_check.sh OUT_DIR            # on the GPU machine
#   ACCEL=cpu bash benchmarks/gpu_check.sh OUT_DIR  # the same fits on the CPU (checks the overrides)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bash benchmarks/gpu_check.sh OUT_DIR}
ACCEL=${ACCEL:-gpu}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

if [ "$ACCEL" = gpu ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/env.txt"
  $PY -c "import sys, torch, lightning, lightly; print('python', sys.version.split()[0], 'torch', torch.__version__,
'lightning', lightning.__version__, 'lightly', lightly.__version__)" | tee -a "$OUT/env.txt"
  for precision in bf16-mixed 32-true; do
    $PY benchmarks/gpu_profile.py --precision "$precision" --json "$OUT/profile-$precision.json" 2>&1 \
      | tee -a "$OUT/profile.log"
  done
fi

# name recipe overrides...: the recipe cut to a few rounds (fewer epochs or images where it is long)
FITS=(
  "quickstart quickstart_fmnist rounds=2"
  "supervised fedavg_fmnist rounds=2"
  "flesd flesd_fmnist rounds=1 local.epochs=1"
  "lg lg_fmnist rounds=2 method.warmup_rounds=1 eval.every=1"
  "moon moon_fmnist rounds=2 data.subset=5000 local.epochs=1"
  "sofed sofed_fmnist rounds=2"
  "cfcl cfcl_fmnist_small rounds=2 eval.every=1"
  "scaffold scaffold_fmnist rounds=2"
  "fedu fedu_fmnist rounds=2"
  "krum-flip robust_krum_fmnist rounds=2 faults.attack=sign_flip faults.attack_scale=10 faults.attackers=0.1"
  "dp dp_fedavg_fmnist rounds=2"
  "workers2 quickstart_fmnist rounds=2 fabric.workers=2"
)
mkdir -p /tmp/gpu_check  # each fit's log's last lines go to one file, so few files come back
printf '| fit | recipe | rc | wall s | last history row |\n|---|---|---|---|---|\n' > "$OUT/fits.md"
for fit in "${FITS[@]}"; do
  read -r name recipe overrides <<< "$fit"
  start=$(date +%s%N)
  # shellcheck disable=SC2086
  $PY -m fedlight fit --recipe "recipes/$recipe.yaml" --overwrite run.dir="/tmp/gpu_check/$name" \
    fabric.accelerator="$ACCEL" $overrides > "/tmp/gpu_check/$name.log" 2>&1
  rc=$?
  { echo "== $name (rc $rc)"; tail -n 25 "/tmp/gpu_check/$name.log"; } >> "$OUT/fit-logs.txt"
  wall=$(( ($(date +%s%N) - start) / 10000000 ))  # hundredths of a second
  wall=$((wall / 100)).$(printf %02d $((wall % 100)))
  last=$($PY - "/tmp/gpu_check/$name/results.json" <<'EOF' 2>/dev/null
import json, sys
r = json.load(open(sys.argv[1]))
row = r["history"][-1] if r.get("final") is not None else {}
print(", ".join(f"{k}={v:.4g}" for k, v in row.items() if isinstance(v, float)) or "no final results")
EOF
)
  echo "| $name | $recipe | $rc | $wall | ${last:-no results.json} |" | tee -a "$OUT/fits.md"
done
