#!/usr/bin/env bash
# README command 1: install, then run the main job end to end on the embedded demo data.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
metashift-hf demo --out demo-output
