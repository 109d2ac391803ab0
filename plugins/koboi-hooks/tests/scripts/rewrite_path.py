#!/usr/bin/env python3
"""A before-tool-call hook for the shared contract: keep writes under notes/.

Reads the event on stdin and, for a path outside notes/, answers with the
rewritten input (hookSpecificOutput.updatedInput) and an allow decision.
"""

import json
import os
import sys

event = json.load(sys.stdin)
tool_input = event.get("tool_input", {})
path = tool_input.get("path", "")
if path and not path.startswith("notes/"):
    new_input = dict(tool_input, path="notes/" + os.path.basename(path))
    json.dump(
        {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "allow",
                "permissionDecisionReason": "writes go under notes/",
                "updatedInput": new_input,
            }
        },
        sys.stdout,
    )
sys.exit(0)
