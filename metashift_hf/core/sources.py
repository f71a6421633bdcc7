"""The known input files: where they are published, their names, sizes and sha256.

This table is the single place these facts live; the downloader, the data manifest and the
pickle loader all read it. URLs are tried in the order listed (after a user mirror, if any).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import UnknownNameError, did_you_mean


_GQA_NEW = "https://downloads.cs.stanford.edu/nlp/data/gqa"
_GQA_OLD = "https://nlp.stanford.edu/data/gqa"
_MS_GITHUB = "https://github.com/Weixin-Liang/MetaShift/raw/main/dataset"
# github.com/.../raw/... answers with a redirect to this host; listing it directly saves a hop
# when github.com itself is blocked but the raw host is not.
_MS_RAW = "https://raw.githubusercontent.com/Weixin-Liang/MetaShift/main/dataset"
_COCO = "images.cocodataset.org"
# COCO 2017 sizes and sha256 as pinned by TensorFlow Datasets (tensorflow/datasets,
# tensorflow_datasets/url_checksums/coco.txt); COCO itself publishes no checksums.
_COCO_FILES = (  # key, folder, file name, size, sha256, description
    (
        "coco-annotations",
        "annotations",
        "annotations_trainval2017.zip",
        252_907_541,
        "113a836d90195ee1f884e704da6304dfaaecff1f023f49b6ca93c4aaae470268",
        "MS-COCO 2017 annotations (build --coco-annotations reads instances_*2017.json from the zip)",
    ),
    (
        "coco-images",
        "zips",
        "train2017.zip",
        19_336_861_798,
        "69a8bb58ea5f8f99d24875f21416de2e9ded3178e903f1f7603e283b9e06d929",
        "MS-COCO 2017 training images (118,287 JPEGs, read in place from the zip)",
    ),
    (
        "coco-val-images",
        "zips",
        "val2017.zip",
        815_585_330,
        "4f7e2ccb2866ec5041993c9cf2a952bbed69647b115d0f74da7ce8f4bef82f05",
        "MS-COCO 2017 validation images (5,000 JPEGs, read in place from the zip)",
    ),
)


@dataclass(frozen=True)
class KnownFile:
    """One published input file. ``key`` is also its role in the data manifest and its
    ``--what`` name on the command line."""

    key: str
    file_name: str
    size: int
    sha256: str
    urls: tuple[str, ...]
    description: str


KNOWN_FILES: dict[str, KnownFile] = {
    f.key: f
    for f in (
        KnownFile(
            key="scene-graphs",
            file_name="sceneGraphs.zip",
            size=44_824_862,
            sha256="59f6a3f6ac5227bac6cc615508e542dd546e309c7dbbdb666de05e42d7c51989",
            urls=(f"{_GQA_NEW}/sceneGraphs.zip", f"{_GQA_OLD}/sceneGraphs.zip"),
            description="GQA scene graphs (train_sceneGraphs.json + val_sceneGraphs.json, zipped)",
        ),
        KnownFile(
            key="images",
            file_name="images.zip",
            size=21_817_965_542,
            sha256="02ce5c49c793accd5305356de9c39a50f80a7aaac193b0203de30dbbc65bde62",
            urls=(f"{_GQA_NEW}/images.zip", f"{_GQA_OLD}/images.zip"),
            description="GQA images (113,018 JPEGs, read in place from the zip)",
        ),
        KnownFile(
            key="subsets",
            file_name="full-candidate-subsets.pkl",
            size=15_223_270,
            sha256="aad22310fe65024573175216c7da18d4b69ab6da28afa10e9e5b1714650ee1e4",
            urls=(
                f"{_MS_GITHUB}/meta_data/full-candidate-subsets.pkl",
                f"{_MS_RAW}/meta_data/full-candidate-subsets.pkl",
            ),
            description="published MetaShift candidate subsets (17,938 keys)",
        ),
        KnownFile(
            key="attributes",
            file_name="attributes-candidate-subsets.pkl",
            size=1_786_712,
            sha256="bc5225923e4cd799ad851e052b3c67ad541840203daf83a7850017874010298a",
            urls=(
                f"{_MS_GITHUB}/attributes_MetaShift/attributes-candidate-subsets.pkl",
                f"{_MS_RAW}/attributes_MetaShift/attributes-candidate-subsets.pkl",
            ),
            description="published MetaShift-Attributes candidate subsets (4,962 keys)",
        ),
        KnownFile(
            key="imagenet-tree",
            file_name="imagenet1k_node_names.json",
            size=148_901,
            sha256="403e1dc7d82efb3651d672b6a1cf4318922c9776e92c288c3845e6a92e28f98c",
            urls=(
                f"{_MS_GITHUB}/matching_to_ImageNet/imagenet1k_node_names.json",
                f"{_MS_RAW}/matching_to_ImageNet/imagenet1k_node_names.json",
            ),
            description="ImageNet-1k hierarchy tree used by the published ImageNet matching",
        ),
        *(
            KnownFile(
                key=key,
                file_name=name,
                size=size,
                sha256=sha,
                description=text,
                urls=tuple(f"{scheme}://{_COCO}/{folder}/{name}" for scheme in ("https", "http")),
            )
            for key, folder, name, size, sha, text in _COCO_FILES
        ),
    )
}

# Members of sceneGraphs.zip that the build reads (GQA publishes scene graphs for train and val only).
SCENE_GRAPH_MEMBERS: tuple[str, ...] = ("train_sceneGraphs.json", "val_sceneGraphs.json")

# The order files are fetched in by `metashift-hf download` without --what: small first, so a
# broken connection shows up before the 21.8 GB images start.
DEFAULT_ORDER: tuple[str, ...] = ("imagenet-tree", "attributes", "subsets", "scene-graphs", "images")
# COCO is fetched only when named: download --what coco-annotations,coco-images[,coco-val-images]
COCO_KEYS: tuple[str, ...] = ("coco-annotations", "coco-images", "coco-val-images")


def known_file(key: str) -> KnownFile:
    """The known file for a ``--what`` key; ``UnknownNameError`` with a did-you-mean otherwise."""
    try:
        return KNOWN_FILES[key]
    except KeyError:
        raise UnknownNameError(
            f"unknown input {key!r}{did_you_mean(key, KNOWN_FILES)}",
            f"use one of: {', '.join(DEFAULT_ORDER + COCO_KEYS)}",
        ) from None


def identify(path: str | os.PathLike) -> KnownFile | None:
    """The known file that ``path`` claims to be (same file name or same size), else None.

    Either clue is enough to claim it, so a truncated download under the right name or the right
    file under another name is still checked against the pinned sha256.
    """
    p = Path(path)
    if not p.is_file():
        return None
    size = p.stat().st_size
    for f in KNOWN_FILES.values():
        if p.name == f.file_name or size == f.size:
            return f
    return None
