#!/usr/bin/env bash
# The steps of a push-style GitOps pipeline for an llmgw site, one per call, so GitHub
# Actions and GitLab CI (and a test) run exactly the same commands. Copy it into the site
# repository as ci/llmgw-pipeline.sh, where the example workflows call it:
#
#   pipeline.sh validate   check the catalog (offline: no network, safe on untrusted input)
#   pipeline.sh plan       plan --out plan.json --detailed-exitcode, and plan.md for a review comment
#   pipeline.sh apply      apply exactly plan.json; a stale plan is refused (re-plan and retry)
#
# Run in the site folder (or set LLMGW_SITE). validate and plan contact no host and need no
# SSH key; against a PostgreSQL state they need only a role that can read it.
set -euo pipefail
site=${LLMGW_SITE:-.}
plan=${LLMGW_PLAN:-plan.json}
llmgw=${LLMGW:-llmgw}

case "${1:-}" in
  validate)
    "$llmgw" -C "$site" catalog validate --offline
    ;;
  plan)
    rc=0
    "$llmgw" -C "$site" plan --out "$plan" --detailed-exitcode || rc=$?
    if [ "$rc" != 0 ] && [ "$rc" != 2 ]; then exit "$rc"; fi
    "$llmgw" -C "$site" show "$plan" --format markdown > "${plan%.json}.md"
    # For later steps of a GitHub Actions job: steps.<id>.outputs.changes
    if [ -n "${GITHUB_OUTPUT:-}" ]; then
      echo "changes=$([ "$rc" = 2 ] && echo true || echo false)" >> "$GITHUB_OUTPUT"
    fi
    ;;
  apply)
    "$llmgw" -C "$site" apply "$plan" --auto-approve
    ;;
  *)
    echo "usage: pipeline.sh validate|plan|apply" >&2
    exit 2
    ;;
esac
