#!/usr/bin/env bash
# Sets up what `make quickstart` or `make test` needs (idempotent: a second call checks and
# returns in about a second). Usage: scripts/setup.sh quickstart|test
#
#   quickstart: a project-local Python environment (.venv, made with `python3 -m venv`; the
#               system Python is left untouched) holding fedlight and its dependencies
#               (`pip install -e .`), and Debian's dataset-fashion-mnist (Fashion-MNIST under
#               /usr/share/datasets/fashion-mnist, apt-get as root; otherwise a hint).
#   test:       the same plus the dev extra (pytest, pytest-xdist, hypothesis, scikit-learn, Opacus, W&B,
#               MLflow, MkDocs with Material and mkdocstrings for the documentation site) and, as root with
#               apt-get, Debian's slurm-wlm and munge, which only the real-SLURM tests use (a
#               two-node cluster on this host; tests/test_slurm.py is skipped without them).
#
# Environment: PYTHON=<interpreter> installs into that interpreter instead of a venv (the Makefile
# passes it: `make test PYTHON=python3`); VENV=<folder> (default .venv); TORCH=cpu installs
# PyTorch's CPU-only build first (from TORCH_CPU_INDEX, PyTorch's CPU wheel index: needs internet);
# INSTALLER=pip installs into the venv with pip alone instead of uv (below).
# A wrong PYTHON or TORCH is one line and exit 2 before anything is installed; `scripts/setup.sh check`
# checks them only (the Makefile asks it as make starts).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-quickstart}
case "$target" in quickstart|test|check) ;; *) echo "usage: $0 quickstart|test|check" >&2; exit 2 ;; esac
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-$VENV/bin/python}
TORCH=${TORCH:-default}
TORCH_CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
INSTALLER=${INSTALLER:-uv}

refuse() { echo "setup: $*" >&2; exit 2; }
case "$TORCH" in
  default|cpu) ;;
  *) refuse "TORCH=$TORCH is not one of default (PyTorch from PyPI, with CUDA on Linux) or cpu (PyTorch's" \
            "CPU-only build); set TORCH=default or TORCH=cpu" ;;
esac
case "$INSTALLER" in uv|pip) ;; *) refuse "INSTALLER=$INSTALLER is not one of uv or pip; set INSTALLER=uv or INSTALLER=pip" ;; esac
if [ "$PYTHON" != "$VENV/bin/python" ] && ! command -v "$PYTHON" >/dev/null; then
  refuse "PYTHON=$PYTHON is no interpreter that can be run (not found, or not executable); give a Python 3" \
         "(PYTHON=python3 or its path), or leave PYTHON out for a project-local $VENV"
fi
[ "$target" != check ] || exit 0

as_root_with_apt() { command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; }
apt_updated=
apt_install() {  # apt_install PACKAGE...: quietly, after one `apt-get update`
  export DEBIAN_FRONTEND=noninteractive
  [ -n "$apt_updated" ] || { apt-get update -qq; apt_updated=1; }
  apt-get install -y -qq "$@" >/dev/null
}

if [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  if as_root_with_apt; then
    echo "setup: apt-get install dataset-fashion-mnist (Debian's Fashion-MNIST, for the quickstart)"
    apt_install dataset-fashion-mnist
  else
    echo "setup: Fashion-MNIST is not in /usr/share/datasets/fashion-mnist; install Debian's" \
         "dataset-fashion-mnist, or run recipes with data.root=<folder> data.download=true" >&2
  fi
fi

if [ "$target" = test ]; then
  missing_slurm=
  for tool in sbatch srun scontrol slurmctld slurmd munged; do
    PATH="$PATH:/usr/sbin:/sbin" command -v "$tool" >/dev/null || missing_slurm="$missing_slurm $tool"
  done
  if [ -n "$missing_slurm" ]; then
    if as_root_with_apt; then
      echo "setup: apt-get install slurm-wlm munge (only for the real-SLURM tests, tests/test_slurm.py)"
      apt_install slurm-wlm munge
    else
      echo "setup: SLURM/munge missing ($missing_slurm); tests/test_slurm.py will be skipped" \
           "(as root: apt-get install slurm-wlm munge)" >&2
    fi
  fi
fi

if [ "$PYTHON" = "$VENV/bin/python" ] && [ ! -x "$PYTHON" ]; then
  echo "setup: python3 -m venv $VENV (a project-local environment; the system Python is not changed)"
  python3 -m venv "$VENV"
fi

pip_install() {  # pip_install ARGS...: `pip install ARGS` into $PYTHON
  # (the filter drops pip's notes on local index folders that lack a project: this machine's, not fedlight's)
  "$PYTHON" -m pip install -q --disable-pip-version-check "$@" 2> >(grep -v "^WARNING: Location '" >&2)
}
# uv reads none of pip's configuration: scripts/uv_settings.py hands it pip's indexes, find-links and constraints
uv_settings() { "$PYTHON" -m pip config list 2>/dev/null | "$PYTHON" "$here/scripts/uv_settings.py"; }
install_with() {  # install_with pip|uv ARGS...: `pip install ARGS` into $PYTHON, by that installer
  if [ "$1" = uv ]; then
    shift
    (eval "$(uv_settings)" && "$PYTHON" -m uv pip install -q --python "$PYTHON" "$@")
  else
    shift
    pip_install "$@"
  fi
}

own_venv=; [ "$PYTHON" != "$VENV/bin/python" ] || own_venv=1
# absolute, for the checks below run from / (not realpath: a venv's python is a link to the base one)
case "$PYTHON" in
  */*) folder=$(cd "$(dirname "$PYTHON")" 2>/dev/null && pwd) || refuse "PYTHON=$PYTHON: cannot enter its folder"
       PYTHON="$folder/$(basename "$PYTHON")" ;;
esac
extra=; modules="fedlight lightning lightly torchmetrics torchvision tensorboard matplotlib tqdm omegaconf scipy"
if [ "$target" = test ]; then
  extra='[dev]'; modules="$modules sklearn pytest xdist hypothesis opacus wandb mlflow mkdocs material mkdocstrings mkdocstrings_handlers setuptools"
fi
# (re)install when a module is missing or the installed fedlight is not this checkout (PYTHONPATH aside); find_spec
# locates a module without importing it (importing torch and Lightning alone takes seconds)
here=$(pwd)
if ! (cd / && env -u PYTHONPATH "$PYTHON" -c "
import importlib.util, os, sys
missing = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]
here = os.path.dirname(os.path.realpath(importlib.util.find_spec('fedlight').origin)) if 'fedlight' not in missing else ''
sys.exit(bool(missing) or here != os.path.realpath('$here/fedlight'))
" $modules) 2>/dev/null; then
  # The project's venv installs through uv (PyPI's `uv`: parallel downloads and unpacking, no byte-compiling; a
  # fresh .venv in about a ninth of pip's time here, docs/install.md), which pip puts into the venv first; an
  # interpreter of your own (PYTHON=...), INSTALLER=pip or a uv that does not install use pip alone.
  installer=pip
  if [ "$INSTALLER" = uv ] && [ -n "$own_venv" ]; then
    if (cd / && "$PYTHON" -m uv --version >/dev/null 2>&1); then
      installer=uv
    else
      echo "setup: pip install uv (a faster installer than pip, from PyPI) into $PYTHON"
      if pip_install uv; then installer=uv; else echo "setup: uv did not install; installing with pip" >&2; fi
    fi
  fi
  if [ "$TORCH" = cpu ] && ! (cd / && "$PYTHON" -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is None)"); then
    echo "setup: $installer install torch torchvision --index-url $TORCH_CPU_INDEX (CPU-only PyTorch) into $PYTHON"
    install_with "$installer" torch torchvision --index-url "$TORCH_CPU_INDEX"
  fi
  echo "setup: $installer install -e .$extra (fedlight, torch, Lightning, lightly, torchmetrics, TensorBoard, ...) into $PYTHON"
  install_with "$installer" -e ".$extra"
fi
