#!/usr/bin/env bash
# README command 2: install, lint, then run the offline test suite (what CI runs).
#   bash scripts/test.sh          the suite without the tests marked slow, one pytest-xdist worker per core
#                                 (1,577 tests: 3 min 12 s of pytest on 2 quiet cores on 2026-11-29)
#   bash scripts/test.sh --all    also the slow end-to-end tests (whole commands, Hub-first round trips,
#                                 the demo); run it before a release
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "") marks=(-m "not slow") ;;
  --all) marks=() ;;
  *) echo "usage: bash scripts/test.sh [--all]" >&2; exit 2 ;;
esac
bash scripts/install.sh
python3 -m ruff check .  # lint rules in pyproject.toml [tool.ruff]
python3 -m ruff format --check .  # the code is ruff-formatted (line length 119)
python3 -m pytest -q -n auto "${marks[@]}" tests  # -n: pytest-xdist (tests share no state)
