#!/bin/bash
# A bad hook: never answers in time.
cat >/dev/null
sleep 30
