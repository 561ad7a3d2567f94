#!/bin/bash
# git runs as root on the agent's repository: trust it for these commands only, with none of
# the commands its own configuration could make git run.
mkdir -p /logs/verifier
g() { git -c safe.directory='*' -c core.fsmonitor=false -c core.hooksPath=/dev/null --no-pager -C /app/repo "$@"; }
ok=1
[ "$(g log -1 --format=%s docs 2>/dev/null)" = "Add release notes" ] || ok=0
g cat-file -e docs:NOTES.md 2>/dev/null || ok=0
[ "$(g log -1 --format=%s main 2>/dev/null)" = "Initial commit" ] || ok=0
g cat-file -e main:NOTES.md 2>/dev/null && ok=0
echo "$ok" > /logs/verifier/reward.txt
