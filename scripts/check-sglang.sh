#!/usr/bin/env bash
# sglang 0.5.23 against the sglang adapter, on the CPU: scripts/check-engine.sh says what it does.
exec bash "$(dirname "$0")/check-engine.sh" sglang
