#!/usr/bin/env bash
# What a session lent a GPU runs there, in one call of at most BUDGET_S seconds (default 470: the
# device's 8 minutes less a margin; BENCHMARKS.md section 5). Steps, most wanted first:
#   env           the GPU, driver, Python and library versions
#   tput-64       images/s at batch 64, bf16: fedlight, views drawn on the device and on the CPU,
#                 beside a plain single-model loop at the same batch (gpu_bench.py throughput)
#   tput-256      the same at batch 256
#   xdev-single   a cross-device round, 100 clients x 20 images, clients trained one by one
#   xdev-batched  the same round with $BATCHED (default local.batched_clients=100: the round's clients as
#                 one step); "not available" where the installed fedlight lacks the key
#   moon          the MOON twin's (recipes/moon_fmnist.yaml) round time
#   profile       gpu_profile.py at batch 256, bf16 (where the time of a step goes)
#   fits          a short `fedlight fit` of every paper's recipe, while the budget lasts
# Each step runs under `timeout` (its own limit, never past the budget); one that fails or runs out
# of time is recorded so and the next one runs. The rounds and throughput run on synthetic data of
# each recipe's shape (nothing to download). Results under OUT_DIR: results.json (one object per
# step), results.md (a markdown row per step), fits.md, steps/*.json and logs/*.log.
#   bash benchmarks/gpu_check.sh OUT_DIR            # on the GPU machine
#   bash benchmarks/gpu_check.sh --smoke OUT_DIR    # every step at toy size on the CPU (fits: one)
#   BUDGET_S=300 BATCHED=local.batched_clients=25 bash benchmarks/gpu_check.sh OUT_DIR
set -uo pipefail
usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; }
SMOKE=0
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  --smoke) SMOKE=1; shift ;;
esac
[ $# -eq 1 ] || { usage >&2; exit 2; }
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$1/steps" "$1/logs" || exit 2
OUT=$(cd "$1" && pwd)
rm -f "$OUT"/steps/*.json "$OUT"/steps/*.seconds "$OUT/steps/order.txt"  # a second call into the same folder starts afresh
PY=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-470}
BATCHED=${BATCHED:-local.batched_clients=100}
export PYTHONUNBUFFERED=1
START=$(date +%s)
BENCH=(benchmarks/gpu_bench.py)
[ "$SMOKE" = 1 ] && BENCH+=(--smoke)

left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }

# step NAME LIMIT_S COMMAND...: run COMMAND under min(LIMIT_S, budget left); its JSON (gpu_bench's
# --json) is steps/NAME.json, else a record of how it ended; its wall seconds steps/NAME.seconds; its
# output logs/NAME.log
step() {
  local name=$1 limit=$2 rc t0; shift 2
  local budget; budget=$(( $(left) - 5 ))
  (( budget < limit )) && limit=$budget
  if (( limit < 10 )); then
    echo "$name" >> "$OUT/steps/order.txt"
    echo "{\"step\": \"$name\", \"status\": \"skipped: budget spent\"}" > "$OUT/steps/$name.json"
    echo "== $name: skipped (budget spent)"; return
  fi
  echo "$name" >> "$OUT/steps/order.txt"
  echo "== $name (up to ${limit} s)"
  t0=$(date +%s)
  timeout --kill-after=5 "$limit" "$@" > "$OUT/logs/$name.log" 2>&1
  rc=$?
  echo $(( $(date +%s) - t0 )) > "$OUT/steps/$name.seconds"
  tail -n 3 "$OUT/logs/$name.log"
  if (( rc == 124 || rc == 137 )); then
    echo "{\"step\": \"$name\", \"status\": \"timed out after ${limit} s\"}" > "$OUT/steps/$name.json"
  elif (( rc != 0 )); then
    echo "{\"step\": \"$name\", \"status\": \"failed (exit $rc)\"}" > "$OUT/steps/$name.json"
  elif [ ! -s "$OUT/steps/$name.json" ]; then  # a command without --json: its exit status is its result
    echo "{\"step\": \"$name\", \"status\": \"ok\"}" > "$OUT/steps/$name.json"
  fi
}

ENV_INFO="$PY -c \"import sys, torch, lightning, lightly; print('python', sys.version.split()[0], 'torch',
torch.__version__, 'lightning', lightning.__version__, 'lightly', lightly.__version__, 'cuda', torch.cuda.is_available())\""
[ "$SMOKE" = 0 ] && ENV_INFO="nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; $ENV_INFO"

XDEV=(round --recipe benchmarks/workloads/cross_device_fmnist.yaml clients.num=100 clients.fraction=1.0
      data.subset=null data.test_subset=null partition.kind=iid)
MOON=(round --recipe recipes/moon_fmnist.yaml data.subset=null data.test_subset=null)
if [ "$SMOKE" = 1 ]; then
  XDEV+=(--images 200 clients.num=10)  # 10 clients x 20 images
  MOON+=(--images 200 local.epochs=1)
  PROFILE=(benchmarks/gpu_profile.py --allow-cpu --clients 1 --steps 2 --warmup-steps 1 --batch-size 8
           --precision 32-true model.backbone=tiny_cnn)
else
  XDEV+=(--images 2000)
  MOON+=(--images 20000)
  PROFILE=(benchmarks/gpu_profile.py --batch-size 256 --precision bf16-mixed)
fi

step env 20 bash -c "$ENV_INFO"
step tput-64 75 $PY "${BENCH[@]}" throughput --batch-size 64 --precision bf16-mixed --json "$OUT/steps/tput-64.json"
step tput-256 75 $PY "${BENCH[@]}" throughput --batch-size 256 --precision bf16-mixed --json "$OUT/steps/tput-256.json"
step xdev-single 60 $PY "${BENCH[@]}" "${XDEV[@]}" --json "$OUT/steps/xdev-single.json"
step xdev-batched 60 $PY "${BENCH[@]}" "${XDEV[@]}" --batched "$BATCHED" --json "$OUT/steps/xdev-batched.json"
step moon 75 $PY "${BENCH[@]}" "${MOON[@]}" --json "$OUT/steps/moon.json"
step profile 60 $PY "${PROFILE[@]}" --json "$OUT/steps/profile.json"

# name recipe overrides...: the recipe cut to a few rounds (fewer epochs or images where it is long)
FITS=(
  "quickstart quickstart_fmnist rounds=2"
  "moon moon_fmnist rounds=2 data.subset=5000 local.epochs=1"
  "workers2 quickstart_fmnist rounds=2 fabric.workers=2"
  "supervised fedavg_fmnist rounds=2"
  "flesd flesd_fmnist rounds=1 local.epochs=1"
  "lg lg_fmnist rounds=2 method.warmup_rounds=1 eval.every=1"
  "sofed sofed_fmnist rounds=2"
  "cfcl cfcl_fmnist_small rounds=2 eval.every=1"
  "scaffold scaffold_fmnist rounds=2"
  "fedu fedu_fmnist rounds=2"
  "krum-flip robust_krum_fmnist rounds=2 faults.attack=sign_flip faults.attack_scale=10 faults.attackers=0.1"
  "dp dp_fedavg_fmnist rounds=2"
)
ACCEL=gpu
if [ "$SMOKE" = 1 ]; then
  ACCEL=cpu
  FITS=("quickstart quickstart_fmnist rounds=1 data.name=synthetic data.subset=null data.test_subset=null eval.every=1")
fi
printf '| fit | recipe | status | wall s | last history row |\n|---|---|---|---|---|\n' > "$OUT/fits.md"
FIT_DIR=$(mktemp -d)
for fit in "${FITS[@]}"; do
  read -r name recipe overrides <<< "$fit"
  # shellcheck disable=SC2086
  step "fit-$name" 60 $PY -m fedlight fit --recipe "recipes/$recipe.yaml" --overwrite run.dir="$FIT_DIR/$name" \
    fabric.accelerator="$ACCEL" $overrides
  last=$($PY - "$FIT_DIR/$name/results.json" <<'EOF' 2>/dev/null
import json, sys
r = json.load(open(sys.argv[1]))
row = r["history"][-1] if r.get("final") is not None else {}
print(", ".join(f"{k}={v:.4g}" for k, v in row.items() if isinstance(v, float)) or "no final results")
EOF
)
  ended="$($PY -c "import json, sys; print(json.load(open(sys.argv[1])).get('status', 'ok'))" \
    "$OUT/steps/fit-$name.json") | $(cat "$OUT/steps/fit-$name.seconds" 2>/dev/null || echo -)"
  echo "| $name | $recipe | $ended | ${last:-no results.json} |" >> "$OUT/fits.md"
done
rm -rf "$FIT_DIR"

# results.json: every step's record in order; results.md: a row each
$PY benchmarks/gpu_bench.py report --out "$OUT"
echo "gpu_check: $(( $(date +%s) - START )) s of a ${BUDGET_S} s budget; results in $OUT"
