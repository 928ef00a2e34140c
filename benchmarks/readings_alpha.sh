#!/usr/bin/env bash
# What the readings tell beside the probe (docs/reading-a-run.md, "An experiment"): FedSimCLR, FedBYOL and FedU
# on Dirichlet alpha 100 (near iid) and 0.1 (skewed), 10 Fashion-MNIST clients of 500 images, 8 rounds, every
# reading on (drift included), one seed: a CPU budget of about 30 CPU-minutes. One `fedlight sweep`, run here,
# into sweeps/readings_alpha; then the report on the readings against rounds.
#   nice -n 10 bash benchmarks/readings_alpha.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD OMP_NUM_THREADS=1
OUT=${OUT:-sweeps/readings_alpha}
python -m fedlight sweep --recipe recipes/fedu_fmnist.yaml --arm fedu --arm byol=method:byol,~method.threshold \
  --arm simclr=method:simclr,~method.momentum,~method.threshold --grid partition.alpha=100,0.1 --seeds 1 \
  --out "$OUT" --executor local --parallel 1 \
  partition.kind=dirichlet partition.min_size=10 data.subset=5000 data.test_subset=2000 clients.num=10 rounds=8 \
  eval.every=2 "eval.readings=[rankme,spectrum,alignment,uniformity,embedding_std,client_knn,drift]" \
  eval.projector_samples=0 fabric.accelerator=cpu fabric.threads=1 "$@"
python -m fedlight report "$OUT" --metric knn_acc --metric linear_probe_acc --metric client_knn_acc \
  --metric client_knn_acc_worst10 --metric rankme --metric drift_cka --metric drift_cka_min
