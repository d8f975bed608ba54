#!/usr/bin/env bash
# Evidence v4 (issue 41): run or resume the campaign's units from a git worktree at its fixed commit, in a virtual
# environment of its own (benchmarks/pinned_worktree.sh), on one lane (one torch thread). Units land in main's
# evidence folder, whose small files a session commits as each unit finishes; the fixed commit is recorded in
# benchmarks/evidence/molecules_v4/decisions.md.
#
#   bash benchmarks/campaigns/v4_campaign.sh [--seeds 0 1] [--arms grpo ips]      # resumable, seed by seed
#
# Environment: V4_WORKTREE (default ../v4-worktree), V4_VENV (default ../v4-venv), V4_WORK (heavy files, default
# ../v4-work), CAMPAIGN_COMMIT (default: the recorded one), TORCH_SPEC as in the Makefile.
set -euo pipefail
main=$(cd "$(dirname "$0")/../.." && pwd)
state=$main/benchmarks/evidence/molecules_v4
source "$main/benchmarks/pinned_worktree.sh" "$state/decisions.md" \
    "${V4_WORKTREE:-$main/../v4-worktree}" "${V4_VENV:-$main/../v4-venv}"
cd "$worktree"
HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 exec "$venv/bin/python" benchmarks/molecules_v4.py run --state "$state" \
    --work "${V4_WORK:-$main/../v4-work}" "$@"
