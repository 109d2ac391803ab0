#!/usr/bin/env python3
"""A Stop hook for the shared contract: ask the agent to continue once, then let it stop."""

import json
import sys

event = json.load(sys.stdin)
if event.get("stop_hook_active"):
    sys.exit(0)  # already continued once: let it finish
print(json.dumps({"decision": "block", "reason": "Check your answer once more before finishing."}))
