#!/usr/bin/env bash
# Installs everything metashift-hf, its demo and its tests need on a fresh Debian machine
# with Python 3.11: WordNet 3.0 from Debian (offline matching) and the package with its [all] and [test] extras.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f /usr/share/wordnet/data.noun ] || [ ! -f /usr/share/wordnet/index.sense ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wordnet-base wordnet-sense-index
  else
    echo "note: WordNet 3.0 dict files not found and apt-get is not usable as this user;" >&2
    echo "      run 'sudo apt-get install wordnet-base wordnet-sense-index' for the matching steps." >&2
  fi
fi
# Debian's Chromium drives the Space's browser tests headless (tests/test_space_browser.py; no browser download).
if ! command -v chromium >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium
  else
    echo "note: chromium not found and apt-get is not usable as this user;" >&2
    echo "      run 'sudo apt-get install chromium' for the Space's browser tests." >&2
  fi
fi
# torch and torchvision are named on the same line so pip picks a pair that imports together (with timm
# and transformers); the package itself only asks for torch>=2.4 (README "Install" for CPU/GPU users).
python3 -m pip install -q torch==2.14.1 torchvision==0.29.1 -e '.[all,test]'  # [test]: pytest, ruff, ...
