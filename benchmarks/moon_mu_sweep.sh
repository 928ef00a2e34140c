#!/usr/bin/env bash
# MOON slides' Table 5 as sweeps: the local objective's second term, MOON's model-contrastive loss
# (recipes/moon_*.yaml) and the l2 term (mu/2)||z - z_glob||^2 (recipes/moon_l2_*.yaml), each with
# mu over {0.001, 0.01, 0.1, 1, 5, 10} as the table tunes it, 3 seeds; the table reports each term
# at its best mu. One `fedlight sweep` per term, into sweeps/moon_mu_<scale>/{contrastive,l2}:
#   bash benchmarks/moon_mu_sweep.sh fmnist        # CPU twin (Fashion-MNIST, recipes/moon_fmnist.yaml)
#   bash benchmarks/moon_mu_sweep.sh cifar10 --submit --slurm-args "--partition=gpu --gres=gpu:1"
# Further options go to both sweeps (the last --seeds wins: --seeds 1). `fedlight report` on each
# folder tabulates it; the CPU twin's verdict is `bash benchmarks/claims.sh moon_mu`.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD
SCALE=${1:-}
case "$SCALE" in
  fmnist|cifar10) shift ;;
  *) echo "moon_mu_sweep.sh: give the scale first, fmnist (CPU twin) or cifar10 (paper scale), not '$SCALE'" >&2
     exit 2 ;;
esac
for term in contrastive l2; do
  if [ "$term" = l2 ]; then recipe=recipes/moon_l2_$SCALE.yaml; else recipe=recipes/moon_$SCALE.yaml; fi
  python -m fedlight sweep --recipe "$recipe" --grid method.mu=0.001,0.01,0.1,1,5,10 --seeds 3 \
    --out "sweeps/moon_mu_$SCALE/$term" "$@"
done
