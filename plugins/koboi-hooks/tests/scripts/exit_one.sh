#!/bin/bash
# A bad hook: crashes (exit code 1 is an error, not a decision).
cat >/dev/null
echo "Traceback: something broke" >&2
exit 1
