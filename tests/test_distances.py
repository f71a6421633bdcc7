"""Every within-class pair gets an answer: the original spectral rule where it is defined (bit for
bit as before), effective resistance on the other connected pairs, ``disconnected`` otherwise."""

from __future__ import annotations

import hashlib
import itertools

import networkx as nx
import numpy as np
import pytest

from metashift_hf.builders import distances as dist
from metashift_hf.builders import metagraph as mg
from metashift_hf.builders.build import build_from_inputs
from metashift_hf.builders.build_inputs import PublishedPickles


# sha256 over "a\tb\t<distance to 6 decimals>\n" for every pair of embedded subsets (a < b, classes
# sorted) of the attributes pickle at the default rules, as the release before this rule existed
# computed them (Artifact.distance = float(np.linalg.norm(ea - eb)); 688 pairs). Rounded because
# LAPACK builds differ in the last bits of the eigenvectors; bit-for-bit equality with the original
# formula on the stored embeddings is checked separately, on whatever platform runs the test.
ORIGINAL_SPECTRAL_SHA256 = "c6458babed4ddefcb639fcf6d233d0711f297d20c0e2511ada57c1ff8680cc44"


def test_attributes_pickle_every_pair_answered_spectral_unchanged(shared_ref, tmp_path):
    art = build_from_inputs(
        tmp_path / "a",
        given=PublishedPickles(attributes_pickle=shared_ref / "metashift" / "attributes-candidate-subsets.pkl"),
        plots=False,
    )
    h, counts = hashlib.sha256(), {}
    for subject in sorted(art.classes()):
        m = art.distance_matrix(subject)
        names = art.subsets_of(subject)
        assert list(m.names) == names
        for a, b in itertools.combinations(names, 2):
            d = art.distance(a, b)  # never raises for a pair of kept subsets of one class
            counts[(d.rule, d.status)] = counts.get((d.rule, d.status), 0) + 1
            if d.rule == "spectral":
                original = float(np.linalg.norm(art.embedding(a) - art.embedding(b)))
                assert d.value.hex() == original.hex(), (a, b)
                h.update(f"{a}\t{b}\t{d.value:.6f}\n".encode())
            assert (d.value is None) == (d.status == "disconnected")
    assert sum(counts.values()) == 3780
    assert counts == {("spectral", "ok"): 688, ("resistance", "ok"): 129, (None, "disconnected"): 2963}
    assert h.hexdigest() == ORIGINAL_SPECTRAL_SHA256
    # the example pair
    assert art.distance("dog(tan)", "dog(black)").status == "disconnected"


def _random_graph(rng, n, p):
    w = np.triu(rng.random((n, n)) * (rng.random((n, n)) < p), 1)
    return w + w.T


def test_resistance_equals_networkx():
    rng = np.random.default_rng(3)
    for _ in range(5):
        w = _random_graph(rng, 12, 0.35)
        m = dist.distance_matrix([f"c({i:02d})" for i in range(12)], w, {})
        g = nx.from_numpy_array(w)
        for comp in nx.connected_components(g):
            for i, j in itertools.combinations(sorted(comp), 2):
                expected = nx.resistance_distance(g.subgraph(comp), i, j, weight="weight", invert_weight=False)
                assert m.values[i, j] == pytest.approx(expected, rel=1e-9) and m.rules[i, j] == "resistance"
        labels = {i: k for k, comp in enumerate(nx.connected_components(g)) for i in comp}
        for i, j in itertools.combinations(range(12), 2):
            assert np.isnan(m.values[i, j]) == (labels[i] != labels[j])


def test_reordering_nodes_changes_nothing():
    rng = np.random.default_rng(5)
    members = {f"k({i:02d})": np.unique(rng.integers(0, 400, size=rng.integers(25, 60))) for i in range(30)}
    a = mg.analyse_class("k", members)
    m = mg.class_distances(a)
    perm = rng.permutation(len(a.subsets))
    w = mg.edge_weights(a)[np.ix_(perm, perm)]
    shuffled = dist.distance_matrix([a.subsets[i] for i in perm], w, a.embedding)
    for x, y, d in m.pairs():
        e = shuffled.get(x, y)
        assert e.status == d.status and e.rule == d.rule
        assert d.value is None or e.value == pytest.approx(d.value, rel=1e-9, abs=1e-12)


def test_mean_distance_names_every_rule():
    s, r = dist.Distance(1.0, "spectral", "ok"), dist.Distance(3.0, "resistance", "ok")
    assert dist.mean_distance([s, r]) == dist.Distance(2.0, "resistance+spectral", "ok")
    assert dist.mean_distance([s, dist.DISCONNECTED]) == dist.DISCONNECTED
    assert str(s) == "1.000000 (spectral)" and str(dist.DISCONNECTED) == "disconnected"


def test_spectral_numbers_are_the_original_per_pair_norm_bit_for_bit():
    rng = np.random.default_rng(7)
    names = [f"c({i:03d})" for i in range(60)]
    emb = {n: rng.normal(size=5) * 10.0 ** rng.integers(-3, 3) for n in names}
    w = np.ones((60, 60)) - np.eye(60)  # one component: every pair is spectral
    m = dist.distance_matrix(names, w, emb)
    for (i, a), (j, b) in itertools.combinations(enumerate(names), 2):
        original = float(np.linalg.norm(emb[a] - emb[b]))
        assert m.values[i, j].hex() == m.values[j, i].hex() == original.hex() and m.rules[i, j] == "spectral"
    assert (np.diag(m.values) == 0).all()
