#!/usr/bin/env bash
# What is left of the v3 study (REPRODUCTION.md), in order, each block from a clean worktree of a commit
# that holds its pre-registration, so every run's results.json records a commit no later edit dirtied.
# Finished runs are reused, so this goes on where the last machine stopped; on a fresh machine first put
# the archives back in the repository root:
#   tar -xJf benchmarks/results/v3-runs.tar.xz && tar -xJf benchmarks/results/v3-pilot-runs.tar.xz
#   REPRO_JOBS=2 nohup bash benchmarks/v3_continue.sh > v3.log 2>&1 &
# Worktrees go to $V3_WORKTREES (default ../fedlight-v3/<commit>) and share this checkout's runs/.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p runs/v3 runs/pilot_v3
shared=("$(realpath runs/v3)" "$(realpath runs/pilot_v3)")
worktrees=${V3_WORKTREES:-$(realpath ..)/fedlight-v3}

from() {  # COMMIT BLOCK...: claims.sh BLOCK... in a worktree of COMMIT
  local tree=$worktrees/$1
  [ -d "$tree" ] || git worktree add --detach "$tree" "$1"
  mkdir -p "$tree/runs"
  ln -sfn "${shared[0]}" "$tree/runs/v3"
  ln -sfn "${shared[1]}" "$tree/runs/pilot_v3"
  (cd "$tree" && bash benchmarks/claims.sh "${@:2}")
}

from df5a378 v3_pilot_flesd  # FLESD Table 1's pilot (alpha 0.01 done, alpha 100 to pre-register v3_flesd100 from)
from df5a378 v3_moon         # the commit its first runs used
from 01535ef v3_flesd001     # its pre-registration
from 01535ef v3_sofed        # registered at f595cc8; behaviour_check.py: every paper recipe bit-identical since
