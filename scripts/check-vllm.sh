#!/usr/bin/env bash
# vLLM 0.33.0 against the vLLM adapter, on the CPU: scripts/check-engine.sh says what it does.
exec bash "$(dirname "$0")/check-engine.sh" vllm
