"""Mutual information between clusters and context tags, k-means by size, and the training-conflict
matrix, on small worlds whose answers are known by construction."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from metashift_hf.core.errors import EmptyResultError, InputFormatError
from metashift_hf.research import clusters, conflicts


def test_mi_is_entropy_when_clusters_are_tags():
    k = [0, 0, 1, 1, 2, 2, 3, 3]
    tags = [["a"], ["a"], ["b"], ["b"], ["c"], ["c"], ["d"], ["d"]]
    assert clusters.mutual_information(k, tags) == pytest.approx(2.0)  # log2(4)
    assert clusters.cluster_entropy(k, tags) == pytest.approx(2.0)


def test_mi_is_zero_when_independent():
    k = [0, 0, 1, 1] * 3
    tags = [["a"], ["b"], ["a"], ["b"]] * 3
    assert clusters.mutual_information(k, tags) == pytest.approx(0.0, abs=1e-12)


def test_mi_spreads_multi_tag_images():
    # cluster 0: images tagged {a}; cluster 1: images tagged {a, b}: p(k,t) = [[.5, 0], [.25, .25]]
    k, tags = [0, 1], [["a"], ["a", "b"]]
    p = np.array([[0.5, 0.0], [0.25, 0.25]])
    pk, pt = p.sum(1), p.sum(0)
    want = sum(p[i, j] * math.log2(p[i, j] / (pk[i] * pt[j])) for i in range(2) for j in range(2) if p[i, j] > 0)
    assert clusters.mutual_information(k, tags) == pytest.approx(want)
    top = clusters.top_contexts(k, tags, n=2)
    assert top[0] == [{"context": "a", "share": 1.0, "lift": pytest.approx(1 / 0.75)}]
    assert [e["context"] for e in top[1]] == ["a", "b"]


def test_mi_errors():
    with pytest.raises(InputFormatError):
        clusters.mutual_information([0, 1], [["a"]])
    with pytest.raises(EmptyResultError):
        clusters.mutual_information([0, 1], [[], []])


def test_kmeans_by_size_and_clustered_sets():
    rng = np.random.default_rng(0)
    centres = np.array([[0, 0], [10, 0], [0, 10]])
    sizes = [30, 20, 10]
    x = np.concatenate([c + rng.normal(size=(n, 2)) for c, n in zip(centres, sizes)])
    ids = [f"i{j}" for j in range(len(x))]
    cl = clusters.kmeans_by_size("cat", ids, x, k=3, seed=1, n_init=4)
    assert cl.sizes == (30, 20, 10) and cl.n_init == 4
    assert set(cl.labels[:30]) == {0} and set(cl.labels[30:50]) == {1} and set(cl.labels[50:]) == {2}
    again = clusters.kmeans_by_size("cat", ids, x, k=3, seed=1, n_init=4)
    assert np.array_equal(cl.labels, again.labels)
    dog = clusters.kmeans_by_size("dog", [f"d{j}" for j in range(len(x))], x + 100, k=3, seed=1, n_init=4)
    d = clusters.clustered_sets([cl, dog])
    assert len(d[0]) == 60 and {"i0", "d0"} <= d[0]
    with pytest.raises(EmptyResultError):
        clusters.kmeans_by_size("cat", ids[:2], x[:2], k=3)


def _world(seed=0, n=200):
    """Feature 0 decides the label in E1/T1 (same rule), T2 has the rule flipped, T3 is pure noise."""
    rng = np.random.default_rng(seed)

    def sub(name, flip=False, noise=False):
        x = rng.normal(size=(n, 3))
        y = (x[:, 0] > 0).astype(int)
        if flip:
            y = 1 - y
        if noise:
            y = rng.integers(0, 2, size=n)
        return conflicts.Subset(name, x, y)

    return [sub("T1"), sub("T2", flip=True), sub("T3", noise=True)], [sub("E1"), sub("E2", flip=True)]


def test_conflict_matrix_signs_known_by_construction(tmp_path):
    train, evaluate = _world()
    run = conflicts.record(train, evaluate, 2, conflicts.ConflictConfig(steps=1200, every=20, lr=0.05, seed=3))
    m = conflicts.conflict_matrix(run)
    assert list(m.index) == ["T1", "T2", "T3"] and list(m.columns) == ["E1", "E2"]
    assert m.abs().to_numpy().max() == pytest.approx(1.0) and (m.abs() <= 1 + 1e-12).all().all()
    assert m.at["T1", "E1"] > 0 > m.at["T2", "E1"]  # same rule helps, flipped rule hurts
    assert m.at["T2", "E2"] > 0 > m.at["T1", "E2"]
    assert abs(m.at["T3", "E1"]) < m.at["T1", "E1"]
    hist = run.history()
    assert len(hist) == 2 * (1200 // 20) and np.allclose(hist.filter(like="share:").sum(axis=1), 1.0)
    conflicts.write_matrix(m, tmp_path / "m.csv", tmp_path / "m.png")
    back = pd.read_csv(tmp_path / "m.csv", index_col=0)
    assert np.allclose(back.to_numpy(), m.to_numpy())
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_conflicts_deterministic_and_errors():
    train, evaluate = _world()
    cfg = conflicts.ConflictConfig(steps=200, every=20, seed=1)
    a = conflicts.conflict_matrix(conflicts.record(train, evaluate, 2, cfg))
    b = conflicts.conflict_matrix(conflicts.record(train, evaluate, 2, cfg))
    assert a.equals(b)
    with pytest.raises(InputFormatError):
        conflicts.record(train, evaluate, 2, conflicts.ConflictConfig(steps=20, every=20))
    with pytest.raises(InputFormatError):
        conflicts.Subset("bad", np.zeros((3, 2)), np.zeros(2))
