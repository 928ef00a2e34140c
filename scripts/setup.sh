#!/usr/bin/env bash
# Installs what fedlight needs on a fresh Debian machine (idempotent, quick when already done):
#   - Fashion-MNIST from Debian's dataset-fashion-mnist (for the quickstart and the tests),
#   - Debian's slurm-wlm and munge (the real-SLURM tests start a two-node cluster on this host with them),
#   - fedlight itself with its dependencies and the dev extra, into the current Python.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

if [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian's dataset-fashion-mnist"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist >/dev/null
  else
    echo "setup: Fashion-MNIST is not in /usr/share/datasets/fashion-mnist; install Debian's" \
         "dataset-fashion-mnist, or run recipes with data.root=<folder> data.download=true" >&2
  fi
fi

missing_slurm=
for tool in sbatch srun scontrol slurmctld slurmd munged; do
  command -v "$tool" >/dev/null || missing_slurm="$missing_slurm $tool"
done
if [ -n "$missing_slurm" ]; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian's slurm-wlm and munge (missing:$missing_slurm)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq slurm-wlm munge >/dev/null
  else
    echo "setup: SLURM/munge missing ($missing_slurm); tests/test_slurm.py will be skipped" \
         "(as root with apt-get: apt-get install slurm-wlm munge)" >&2
  fi
fi

# (re)install when a dependency is missing or the installed fedlight is not this checkout
here=$(pwd)
if ! (cd / && "$PYTHON" -c "
import os, sys, fedlight, lightning, lightly, torchmetrics, torchvision, tensorboard, sklearn, pytest, hypothesis
sys.exit(os.path.dirname(os.path.realpath(fedlight.__file__)) != os.path.realpath('$here/fedlight'))
") 2>/dev/null; then
  echo "setup: pip install -e .[dev]"
  "$PYTHON" -m pip install -q --disable-pip-version-check -e '.[dev]'
fi
