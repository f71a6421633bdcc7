"""Clustered OOD sets when contexts are unknown: k-means per class on image embeddings, the sets
D_k (each class's k-th largest cluster), and what a cluster "means" in terms of context tags.

Mutual information between cluster id K and context tags T: an image with several tags spreads
its unit weight evenly over them, giving a joint distribution p(k, t); MI = sum p(k,t) log2
(p(k,t) / (p(k) p(t))) in bits. It is 0 when tags are independent of clusters and H(K) when every
cluster holds exactly one tag (and each tag one cluster).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..core.errors import EmptyResultError, InputFormatError


@dataclass(frozen=True)
class Clustering:
    """k-means of one class: ``labels[i]`` = rank of image i's cluster by size (0 = largest)."""

    cls: str
    image_ids: tuple[str, ...]
    labels: np.ndarray
    sizes: tuple[int, ...]
    seed: int
    n_init: int
    inertia: float


def kmeans_by_size(
    cls: str, image_ids: Sequence[str], features: np.ndarray, k: int = 8, *, seed: int = 0, n_init: int = 10
) -> Clustering:
    """scikit-learn KMeans (seeded, ``n_init`` restarts); clusters renumbered by size, largest first
    (ties: smaller original id)."""
    from sklearn.cluster import KMeans  # heavy optional dependency, loaded when clustering

    x = np.asarray(features, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] != len(image_ids):
        raise InputFormatError(
            f"class {cls}: {len(image_ids)} image ids but features of shape {x.shape}",
            "pass one feature row per image id",
        )
    if x.shape[0] < k:
        raise EmptyResultError(
            f"class {cls} has {x.shape[0]} images, fewer than k={k} clusters",
            "lower k, or use a class with more images",
        )
    km = KMeans(n_clusters=k, random_state=int(seed), n_init=int(n_init)).fit(x)
    counts = np.bincount(km.labels_, minlength=k)
    order = sorted(range(k), key=lambda c: (-counts[c], c))
    rank = np.empty(k, dtype=np.int64)
    rank[order] = np.arange(k)
    labels = rank[km.labels_]
    return Clustering(
        cls,
        tuple(map(str, image_ids)),
        labels,
        tuple(int(counts[c]) for c in order),
        int(seed),
        int(n_init),
        float(km.inertia_),
    )


def _joint(clusters: Sequence[int], tags: Sequence[Sequence[str]]) -> tuple[np.ndarray, list, list[str]]:
    if len(clusters) != len(tags):
        raise InputFormatError(f"{len(clusters)} cluster ids but {len(tags)} tag lists", "pass one tag list per image")
    ks = sorted(set(int(c) for c in clusters))
    ts = sorted({t for tt in tags for t in tt})
    ki, ti = {k: i for i, k in enumerate(ks)}, {t: i for i, t in enumerate(ts)}
    p = np.zeros((len(ks), len(ts)))
    for c, tt in zip(clusters, tags):
        tt = sorted(set(tt))
        for t in tt:  # an image's unit weight is spread over its tags; untagged images carry none
            p[ki[int(c)], ti[t]] += 1.0 / len(tt)
    total = p.sum()
    if total == 0:
        raise EmptyResultError("no image has a context tag", "pass images with at least one context")
    return p / total, ks, ts


def mutual_information(clusters: Sequence[int], tags: Sequence[Sequence[str]]) -> float:
    """MI (bits) between cluster id and context tag (see the module docstring)."""
    p, _, _ = _joint(clusters, tags)
    pk, pt = p.sum(1, keepdims=True), p.sum(0, keepdims=True)
    nz = p > 0
    return float((p[nz] * np.log2(p[nz] / (pk @ pt)[nz])).sum())


def cluster_entropy(clusters: Sequence[int], tags: Sequence[Sequence[str]]) -> float:
    """H(K) in bits under the same weighting (the MI's upper bound)."""
    p, _, _ = _joint(clusters, tags)
    pk = p.sum(1)
    pk = pk[pk > 0]
    return float(-(pk * np.log2(pk)).sum())


def top_contexts(clusters: Sequence[int], tags: Sequence[Sequence[str]], n: int = 3) -> dict[int, list[dict]]:
    """Per cluster, its ``n`` most frequent tags: share of the cluster's tag weight and lift p(t|k)/p(t)."""
    p, ks, ts = _joint(clusters, tags)
    pt = p.sum(0)
    out = {}
    for i, k in enumerate(ks):
        row = p[i]
        if row.sum() == 0:
            out[k] = []
            continue
        best = sorted(range(len(ts)), key=lambda j: (-row[j], ts[j]))[:n]
        out[k] = [
            {"context": ts[j], "share": float(row[j] / row.sum()), "lift": float(row[j] / row.sum() / pt[j])}
            for j in best
            if row[j] > 0
        ]
    return out


def clustered_sets(clusterings: Sequence[Clustering]) -> dict[int, set[str]]:
    """k (0 = largest) -> D_k = union over classes of each class's k-th largest cluster."""
    out: dict[int, set[str]] = {}
    for cl in clusterings:
        for iid, k in zip(cl.image_ids, cl.labels.tolist()):
            out.setdefault(int(k), set()).add(iid)
    return dict(sorted(out.items()))
