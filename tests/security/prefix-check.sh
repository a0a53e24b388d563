#!/bin/bash
# Run today's tests against the code of an older commit: how tests/security/README.md's
# "fails before the fix" table was made.
#
#   tests/security/prefix-check.sh COMMIT [pytest args...]
#   SHIM=file.py tests/security/prefix-check.sh COMMIT ...   # run file.py in the snapshot first
#
# A detached worktree at COMMIT gets this checkout's tests/ (and pyproject.toml, for the
# markers, and scripts/hf_mirror.py, which the test helpers import); PYTHONPATH points at
# the worktree so child processes (the CLI, a router process) run the old code too. The
# worktree is removed afterwards. A SHIM edits the snapshot's copy of a test only where the
# test's own setup names something the old tree lacks (never the assertion).
set -euo pipefail
commit=$1
shift
repo=$(git rev-parse --show-toplevel)
wt=$(mktemp -d /tmp/llmgw-prefix.XXXXXX)
rmdir "$wt"
git -C "$repo" worktree add --detach "$wt" "$commit" >/dev/null
trap 'git -C "$repo" worktree remove --force "$wt"' EXIT
rm -rf "$wt/tests"
cp -r "$repo/tests" "$wt/tests"
find "$wt/tests" -name __pycache__ -prune -exec rm -rf {} +
cp "$repo/pyproject.toml" "$wt/"
cp "$repo/scripts/hf_mirror.py" "$wt/scripts/"
if [ -n "${SHIM:-}" ]; then
    (cd "$wt" && "$repo/.venv/bin/python" "$SHIM")
fi
cd "$wt"
PYTHONPATH=$wt "$repo/.venv/bin/python" -m pytest -p no:cacheprovider -q -rA "$@"
