#!/bin/bash
# A before-tool-call hook for the shared contract: refuse any command with `rm -rf`.
# The event arrives as JSON on stdin; exit 2 blocks, and stderr is the reason.
input=$(cat)
if printf '%s' "$input" | grep -Eq '"command": *"[^"]*rm +-(rf|fr)'; then
  echo "Blocked: 'rm -rf' is not allowed here; delete files one by one." >&2
  exit 2
fi
exit 0
