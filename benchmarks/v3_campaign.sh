#!/usr/bin/env bash
# Evidence v3 (issue 28): run or resume the campaign from a git worktree at its fixed commit, in a virtual environment
# of its own, so that the code on main can change meanwhile. Units land in main's evidence folder, whose small files a
# session commits as each unit finishes; the fixed commit is recorded in
# benchmarks/evidence/hypospace_recovery_v3_voxel/decisions.md.
#
#   bash benchmarks/v3_campaign.sh [--units LABEL ...]     # 2 lanes of 1 torch thread (default), resumable
#
# Environment: V3_COMMIT (default: the recorded one), V3_WORKTREE (default ../v3-worktree), V3_VENV (default
# ../v3-venv), TORCH_SPEC as in the Makefile.
set -euo pipefail
main=$(cd "$(dirname "$0")/.." && pwd)
commit=${V3_COMMIT:-$(sed -n 's/^Campaign commit: `\([0-9a-f]\{7,40\}\)`.*/\1/p' \
    "$main/benchmarks/evidence/hypospace_recovery_v3_voxel/decisions.md" | head -1)}
if [ -z "$commit" ]; then
    echo "v3_campaign.sh: no campaign commit recorded in decisions.md (a line 'Campaign commit: \`SHA\`'); set V3_COMMIT" >&2
    exit 2
fi
worktree=${V3_WORKTREE:-$main/../v3-worktree}
venv=${V3_VENV:-$main/../v3-venv}
if [ ! -d "$worktree" ]; then
    git -C "$main" worktree add --detach "$worktree" "$commit"
fi
if [ "$(git -C "$worktree" rev-parse HEAD)" != "$(git -C "$main" rev-parse "$commit")" ]; then
    echo "v3_campaign.sh: $worktree is not at the campaign commit $commit; remove it (git worktree remove) first" >&2
    exit 2
fi
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q "${TORCH_SPEC:-torch==2.13.0}"
fi
# the campaign's own copy of divrl, not an editable install of main
"$venv/bin/pip" install -q --no-deps --force-reinstall "$worktree"
"$venv/bin/pip" install -q "$worktree[dev,embedded]"
cd "$worktree"
HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 exec "$venv/bin/python" benchmarks/hypospace_recovery.py --protocol v3-voxel \
    --resume --workers "${V3_WORKERS:-2}" --state "$main/benchmarks/evidence/hypospace_recovery_v3_voxel" \
    --results "$main/benchmarks/results" "$@"
