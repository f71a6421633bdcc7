#!/usr/bin/env bash
# README command 2: install, then run the whole offline test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
python3 -m ruff check .  # lint rules in pyproject.toml [tool.ruff]
python3 -m pytest -q tests
