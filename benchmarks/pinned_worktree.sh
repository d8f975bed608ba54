#!/usr/bin/env bash
# Shared by the evidence campaigns (v3_campaign.sh, v4_campaign.sh): a git worktree at the campaign's fixed commit,
# recorded in its decisions.md as a line 'Campaign commit: `SHA`' (the last such line wins), with the campaign's own
# virtual environment holding a regular (not editable) install of that commit, so the code on main can change while
# the campaign runs.
#
#   source benchmarks/pinned_worktree.sh DECISIONS_MD WORKTREE VENV     # sets: commit, worktree, venv
pinned_decisions=$1 worktree=$2 venv=$3
pinned_main=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
commit=${CAMPAIGN_COMMIT:-$(sed -n 's/^.*Campaign commit: `\([0-9a-f]\{7,40\}\)`.*/\1/p' "$pinned_decisions" | tail -1)}
if [ -z "$commit" ]; then
    echo "no campaign commit recorded in $pinned_decisions (a line 'Campaign commit: \`SHA\`'); set CAMPAIGN_COMMIT" >&2
    exit 2
fi
if [ ! -d "$worktree" ]; then
    git -C "$pinned_main" worktree add --detach "$worktree" "$commit"
fi
if [ "$(git -C "$worktree" rev-parse HEAD)" != "$(git -C "$pinned_main" rev-parse "$commit")" ]; then
    echo "$worktree is not at the campaign commit $commit; remove it (git worktree remove) first" >&2
    exit 2
fi
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q "${TORCH_SPEC:-torch==2.13.0}"
fi
# the campaign's own copy of divrl, not an editable install of main; lanes of one campaign share the worktree and
# pip builds inside it, so concurrent installs race on its build/ folder: they take turns on a lock beside it
(
    flock 9
    "$venv/bin/pip" install -q --no-deps --force-reinstall "$worktree"
    "$venv/bin/pip" install -q "$worktree[dev,embedded]"
) 9>"$worktree.install.lock"
