#!/usr/bin/env bash
# What is left of the v3 study (REPRODUCTION.md), in order, each block from a clean worktree of a commit
# that holds its pre-registration, so every run's results.json records a commit no later edit dirtied.
# Finished runs are reused, so this goes on where the last machine stopped; on a fresh machine first put
# the archives back in the repository root, and have the project's python first on PATH (claims.sh calls
# `python`):
#   tar -xJf benchmarks/results/v3-runs.tar.xz && tar -xJf benchmarks/results/v3-pilot-runs.tar.xz
#   source .venv/bin/activate && REPRO_JOBS=2 nohup bash benchmarks/v3_continue.sh > v3.log 2>&1 &
# Worktrees go to $V3_WORKTREES (default ../fedlight-v3/<commit>) and share this checkout's runs/.
# After each block the archives are rewritten (commit them); `claims.sh v3_table` then makes the table.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p runs/v3 runs/pilot_v3
worktrees=${V3_WORKTREES:-$(realpath ..)/fedlight-v3}
git worktree prune  # forget worktrees whose folders were deleted, so one can be added again

from() {  # COMMIT BLOCK...: claims.sh BLOCK... in a worktree of COMMIT, then the archives
  local tree=$worktrees/$1 name
  [ -d "$tree" ] || git worktree add --detach "$tree" "$1"
  mkdir -p "$tree/runs"
  for name in v3 pilot_v3; do  # the worktree's runs/ are this checkout's
    [ -L "$tree/runs/$name" ] || [ ! -e "$tree/runs/$name" ] || {
      echo "$tree/runs/$name is a folder, not a link to $(realpath runs/$name)" >&2; exit 2; }
    ln -sfn "$(realpath runs/$name)" "$tree/runs/$name"
  done
  (cd "$tree" && bash benchmarks/claims.sh "${@:2}")
  bash benchmarks/claims.sh v3_archive  # this checkout's archiver: every finished v3 run and claim so far
}

from df5a378 v3_moon         # the commit of its first runs
from 6e2c1db v3_flesd001     # its pre-registration (121f9ab, which ran seeds 1000-1019) with seed 1019 left out
from 06867d9 v3_flesd100     # its pre-registration
from 06867d9 v3_sofed        # registered at f595cc8; behaviour_check.py: every paper recipe bit-identical since
