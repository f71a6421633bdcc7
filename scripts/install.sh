#!/usr/bin/env bash
# Installs everything metashift-hf, its demo and its tests need on a fresh Debian machine
# with Python 3.11: WordNet 3.0 from Debian (offline matching) and the package with all extras.
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
# torch is pinned on the same command line so pip takes the CPU wheel, not a multi-GB CUDA build.
python3 -m pip install -q torch==2.13.0 -e '.[all]'
