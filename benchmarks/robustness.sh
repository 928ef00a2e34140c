#!/usr/bin/env bash
# The pre-registered grid of benchmarks/ROBUSTNESS.md (claims C1-C4, fixed before any run of it):
# five rules x no attack and 10/20/30% attackers of two kinds on the Fashion-MNIST twins, and
# DP-FedAvg at three noise multipliers, 3 seeds each, judged by benchmarks/verdict.py.
# Finished runs are reused, so re-running a block only re-tabulates it.
#   bash benchmarks/robustness.sh robust_sup   # one block;  bash benchmarks/robustness.sh   # all
#   bash benchmarks/robustness.sh archive      # finished runs -> benchmarks/results/robustness-runs.tar.xz
#   tar -xJf benchmarks/results/robustness-runs.tar.xz   # puts them back under runs/robustness/
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD OMP_NUM_THREADS=1
R="python benchmarks/reproduce.py --seeds 0 1 2 --set fabric.threads=1 --per-seed"  # per-seed-<metric>.md too
want() { [ -z "$ARGS" ] || [[ " $ARGS " == *" $1 "* ]]; }
ARGS="$*"

declare -A SERVER=([fedavg]="{name: fedavg}" [median]="{name: median}" [trimmed]="{name: trimmed_mean, trim: 0.3}"
                   [krum]="{name: krum, f: 3, m: 1}" [bulyan]="{name: bulyan, f: 1}")
declare -A ATTACK=([flip]="faults.attack=sign_flip faults.attack_scale=10"
                   [collude]="faults.attack=collude faults.attack_scale=1")
RULES="fedavg median trimmed krum bulyan"

# rows RECIPE: every rule without attack (RULE-0) and under each kind at 10/20/30% (RULE-KIND-PERCENT)
rows() {
  local recipe=$1 rule kind share
  for rule in $RULES; do
    ROWS+=(--row "$rule-0" "$recipe" "server=${SERVER[$rule]}")
    for kind in flip collude; do
      for share in 10 20 30; do
        # shellcheck disable=SC2086
        ROWS+=(--row "$rule-$kind$share" "$recipe" "server=${SERVER[$rule]}" ${ATTACK[$kind]}
               "faults.attackers=0.$((share / 10))")
      done
    done
  done
}

# judge OUT METRIC: claims C1-C3 of ROBUSTNESS.md on one twin; each command's verdicts kept apart
judge() {
  local out=$1 metric=$2 rule kind share c2=()
  $R --out "$out" --metric "$metric" "${ROWS[@]}" --by 20 --claim fedavg-flip10 '<' fedavg-0 'C1: broken by one attacker, by >= 20'
  cp "$out/verdicts-$metric.md" "$out/verdicts-C1.md"
  for rule in median trimmed krum bulyan; do
    for kind in flip collude; do
      for share in 10 20 30; do
        if [ "$rule" != bulyan ] || [ "$share" = 10 ]; then
          c2+=(--claim "$rule-$kind$share" '~' "$rule-0" "C2: within 5 of its no-attack accuracy")
        fi
      done
    done
  done
  $R --out "$out" --metric "$metric" "${ROWS[@]}" --margin 5 "${c2[@]}"
  cp "$out/verdicts-$metric.md" "$out/verdicts-C2.md"
  $R --out "$out" --metric "$metric" "${ROWS[@]}" --margin 3 \
    --claim median-0 '~' fedavg-0 'C3: cost without attack' --claim trimmed-0 '~' fedavg-0 'C3: cost without attack' \
    --claim bulyan-0 '~' fedavg-0 'C3: cost without attack' --claim krum-0 '<' fedavg-0 'C3: Krum keeps one model'
  cp "$out/verdicts-$metric.md" "$out/verdicts-C3.md"
}

if want robust_sup; then
  ROWS=(); rows recipes/fedavg_fmnist.yaml
  judge runs/robustness/sup test_acc
fi

if want robust_ssl; then
  ROWS=(); rows recipes/quickstart_fmnist.yaml
  judge runs/robustness/ssl linear_probe_acc
fi

# C4: DP-FedAvg on the supervised twin, clip 1.0 (fixed, not tuned), q = 1: the accountant is exact
if want dp; then
  DP=(--row nonprivate recipes/fedavg_fmnist.yaml "server={name: fedavg}")
  for z in 0.5 1 2; do
    DP+=(--row "dp-z$z" recipes/fedavg_fmnist.yaml "server={name: dp_fedavg, clip: 1.0, noise_multiplier: $z, delta: 1.0e-5}")
  done
  $R --out runs/robustness/dp --metric test_acc "${DP[@]}" \
    --claim dp-z0.5 '>' dp-z2 'C4: less noise, more accuracy' --claim nonprivate '>' dp-z0.5 'C4: privacy costs accuracy'
  # C4's accounting check: every DP run's last dp_epsilon against the accountant's, computed before the runs
  python - <<'EOF' | tee runs/robustness/dp/epsilon.md
import json, pathlib
from fedlight import dp_epsilon
for z in ("0.5", "1", "2"):
    runs = sorted(pathlib.Path(f"runs/robustness/dp/dp-z{z}").glob("seed*/runs/seed=*/results.json"))
    last = [json.loads(r.read_text())["history"][-1]["dp_epsilon"] for r in runs]
    print(f"| dp-z{z} | accountant {dp_epsilon(1.0, float(z), 10, 1e-5):.2f} | last dp_epsilon per seed "
          + ", ".join(f"{e:.2f}" for e in last) + " |")
EOF
fi

# every finished run's results.json, faults.csv and recipe.yaml, so a reset machine resumes the grid
if [[ " $ARGS " == *" archive "* ]]; then
  bash benchmarks/archive_runs.sh runs/robustness benchmarks/results/robustness-runs.tar.xz
fi
