#!/usr/bin/env bash
# Evidence v5 (issue 58): run or resume the campaign's 75 units from a git worktree at its fixed commit, in a virtual
# environment of its own (benchmarks/pinned_worktree.sh), on two lanes in the background (one torch thread each),
# dealt seed by seed (`benchmarks/molecules_v5.py lane`). Units land in main's evidence folder, whose small files a
# session commits as each unit finishes; the fixed commit is recorded in benchmarks/evidence/molecules_v5/decisions.md
# and the tau pilot (`molecules_v5.py pilot-tau`) must be committed there first.
#
#   bash benchmarks/v5_campaign.sh          # starts lanes 0 and 1; finished units are skipped, killed ones resumed
#
# Environment: V5_WORKTREE (default ../v5-worktree), V5_VENV (default ../v5-venv), V5_WORK (checkpoints, default
# ../v5-work), V5_LOGS (default V5_WORK/logs), CAMPAIGN_COMMIT (default: the recorded one), TORCH_SPEC as in the
# Makefile.
set -euo pipefail
main=$(cd "$(dirname "$0")/.." && pwd)
state=$main/benchmarks/evidence/molecules_v5
source "$main/benchmarks/pinned_worktree.sh" "$state/decisions.md" \
    "${V5_WORKTREE:-$main/../v5-worktree}" "${V5_VENV:-$main/../v5-venv}"
work=${V5_WORK:-$main/../v5-work}
logs=${V5_LOGS:-$work/logs}
mkdir -p "$logs"
cd "$worktree"
# One thread a lane; torch's and MKL's AVX2 kernels on every processor, so that a unit rounds the same on a machine
# with AVX-512 as on one without (decisions.md, 2026-12-01)
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2
# MOSES train, canonicalised once (minutes) before the lanes start, so that they do not both write its cache
"$venv/bin/python" -c 'import sys; sys.path.insert(0, "benchmarks"); import molecules_v5; molecules_v5.moses_train()'
for lane in 0 1; do
    nohup "$venv/bin/python" benchmarks/molecules_v5.py lane "$lane" --state "$state" --work "$work" \
        >>"$logs/lane$lane.log" 2>&1 &
    echo $! >"$logs/lane$lane.pid"
    echo "lane $lane: pid $!, log $logs/lane$lane.log"
done
