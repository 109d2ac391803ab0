#!/bin/bash
# A user-prompt hook for the shared contract: add the team's conventions as context.
input=$(cat)
if ! printf '%s' "$input" | grep -Eq '"hook_event_name": *"UserPromptSubmit"'; then
  echo "not a prompt event" >&2
  exit 1
fi
cat <<'JSON'
{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "Team convention: dates are written YYYY-MM-DD."}}
JSON
