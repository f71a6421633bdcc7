"""Meta-graph rules: overlap edges, thresholds, CNM/Louvain, spectral embedding, distances."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from builders import metagraph as mg
from metashift_hf.errors import MetashiftError, UnknownNameError


def arr(*xs: int) -> np.ndarray:
    return np.array(sorted(set(xs)), dtype=np.int64)


def test_overlap_weights_by_hand():
    # A={0..9}, B={5..24}, C={20..23}: |A∩B|=5, min=10 -> 0.5; |B∩C|=4, min=4 -> 1.0; A∩C empty
    w = mg.overlap_weights([arr(*range(10)), arr(*range(5, 25)), arr(20, 21, 22, 23)])
    assert w[0, 1] == w[1, 0] == 0.5
    assert w[1, 2] == 1.0 and w[0, 2] == 0.0
    assert np.all(np.diag(w) == 0)


def test_analyse_class_first_version_runs():
    rng = np.random.default_rng(0)
    members = {f"dog(c{i:02d})": np.unique(rng.integers(0, 300, 60)) for i in range(12)}
    a = mg.analyse_class("dog", members)
    assert a.subsets == sorted(members)
    assert a.embedding_status == "ok"
    assert set(a.communities) == set(members)
    assert all(x < y for x, y, _ in a.edges)
