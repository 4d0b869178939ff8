#!/usr/bin/env bash
# Commit subjects after the recorded base (.ci/commit-base) read
# "area: summary" in at most 72 characters; merges are exempt.  CI runs it.
#   scripts/check_commits.sh [base]
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-$(cat .ci/commit-base)}
if ! git cat-file -e "$base^{commit}" 2>/dev/null; then
    if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
        echo "check_commits: a shallow clone lacks base $base; not checked"
        exit 0
    fi
    echo "check_commits: base $base is not in this clone's history" >&2
    exit 1
fi
bad=0
while IFS= read -r line; do
    hash=${line%% *}
    subject=${line#* }
    why=""
    if [ "${#subject}" -gt 72 ]; then
        why="${#subject} characters (at most 72)"
    elif ! [[ $subject =~ ^[A-Za-z0-9_./+-]+(,\ [A-Za-z0-9_./+-]+)*:\ [^\ ] ]]; then
        why="not 'area: summary'"
    fi
    if [ -n "$why" ]; then
        echo "check_commits: $hash: $why: $subject" >&2
        bad=1
    fi
done < <(git log --no-merges --format='%h %s' "$base..HEAD")
n=$(git rev-list --no-merges --count "$base..HEAD")
[ "$bad" = 0 ] && echo "check_commits: $n commit subject(s) after ${base:0:12} read 'area: summary' in <= 72 characters"
exit $bad
