#!/usr/bin/env bash
# Evidence v3 (issue 28): run or resume the campaign from a git worktree at its fixed commit, in a virtual environment
# of its own (benchmarks/pinned_worktree.sh), so that the code on main can change meanwhile. Units land in main's
# evidence folder, whose small files a session commits as each unit finishes; the fixed commit is recorded in
# benchmarks/evidence/hypospace_recovery_v3_voxel/decisions.md.
#
#   bash benchmarks/v3_campaign.sh [--units LABEL ...]     # 2 lanes of 1 torch thread (default), resumable
#
# Environment: V3_COMMIT (default: the recorded one), V3_WORKTREE (default ../v3-worktree), V3_VENV (default
# ../v3-venv), TORCH_SPEC as in the Makefile.
set -euo pipefail
main=$(cd "$(dirname "$0")/.." && pwd)
state=$main/benchmarks/evidence/hypospace_recovery_v3_voxel
CAMPAIGN_COMMIT=${V3_COMMIT:-} source "$main/benchmarks/pinned_worktree.sh" "$state/decisions.md" \
    "${V3_WORKTREE:-$main/../v3-worktree}" "${V3_VENV:-$main/../v3-venv}"
cd "$worktree"
HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 exec "$venv/bin/python" benchmarks/hypospace_recovery.py --protocol v3-voxel \
    --resume --workers "${V3_WORKERS:-2}" --state "$state" --results "$main/benchmarks/results" "$@"
