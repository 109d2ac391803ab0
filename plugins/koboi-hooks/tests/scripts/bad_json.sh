#!/bin/bash
# A bad hook: prints something that looks like JSON and is not.
cat >/dev/null
echo '{"decision": "block", reason: oops'
