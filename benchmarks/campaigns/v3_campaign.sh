#!/usr/bin/env bash
# Evidence v3 (issue 28): run or resume the campaign from a git worktree at its fixed commit, in a virtual environment
# of its own (benchmarks/pinned_worktree.sh), so that the code on main can change meanwhile. Units land in main's
# evidence folder, whose small files a session commits as each unit finishes; the fixed commit is recorded in
# benchmarks/evidence/hypospace_recovery_v3_voxel/decisions.md.
#
#   bash benchmarks/campaigns/v3_campaign.sh [--units LABEL ...]     # 2 lanes of 1 torch thread (default), resumable
#   V3_PROTOCOL=v3-maxent-voxel V3_WORKERS=1 bash benchmarks/campaigns/v3_campaign.sh   # MaxEnt's post-v3 arm (issue 42)
#
# Environment: V3_PROTOCOL (default v3-voxel; v3-maxent-voxel: the arm added after v3, with its own folder, commit,
# worktree ../v3-maxent-worktree and venv ../v3-maxent-venv), V3_COMMIT (default: the recorded one), V3_WORKTREE,
# V3_VENV, V3_WORKERS (default 2), TORCH_SPEC as in the Makefile.
set -euo pipefail
main=$(cd "$(dirname "$0")/../.." && pwd)
protocol=${V3_PROTOCOL:-v3-voxel}
case $protocol in
    v3-voxel) lane=v3 ;;
    v3-maxent-voxel) lane=v3-maxent ;;
    *) echo "V3_PROTOCOL=$protocol: expected v3-voxel or v3-maxent-voxel" >&2; exit 2 ;;
esac
state=$main/benchmarks/evidence/hypospace_recovery_${protocol//-/_}
CAMPAIGN_COMMIT=${V3_COMMIT:-} source "$main/benchmarks/pinned_worktree.sh" "$state/decisions.md" \
    "${V3_WORKTREE:-$main/../$lane-worktree}" "${V3_VENV:-$main/../$lane-venv}"
cd "$worktree"
HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 exec "$venv/bin/python" benchmarks/hypospace_recovery.py --protocol "$protocol" \
    --resume --workers "${V3_WORKERS:-2}" --state "$state" --results "$main/benchmarks/results" "$@"
