"""Meta-graph rules: overlap edges, thresholds, CNM/Louvain, spectral embedding, distances, pictures."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest
from threadpoolctl import threadpool_info

from metashift_hf.builders import metagraph as mg
from metashift_hf.core.errors import InputFormatError, MetashiftError, UnknownNameError


def arr(*xs: int) -> np.ndarray:
    return np.array(sorted(set(xs)), dtype=np.int64)


def rng_members(seed: int, n: int, pool: int = 400, lo: int = 25, hi: int = 200, subject: str = "dog") -> dict:
    """Subsets drawn from a small image pool, so overlaps are large and the meta-graph connected."""
    rng = np.random.default_rng(seed)
    return {
        f"{subject}(c{i:03d})": np.unique(rng.integers(0, pool, int(rng.integers(lo, hi)))).astype(np.int64)
        for i in range(n)
    }


def nx_graph(a: mg.ClassAnalysis) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(a.subsets)
    g.add_weighted_edges_from(a.edges)
    return g


def pairwise(pos: np.ndarray) -> np.ndarray:
    return np.linalg.norm(pos[:, None, :] - pos[None, :, :], axis=2)


def partition(communities: dict[str, int]) -> list[list[str]]:
    groups: dict[int, list[str]] = {}
    for s, c in communities.items():
        groups.setdefault(c, []).append(s)
    return sorted(sorted(g) for g in groups.values())


# ----------------------------------------------------------------------------- overlap edges


def test_overlap_weights_by_hand():
    # A={0..9}, B={5..24}, C={20..23}: |A∩B|=5, min=10 -> 0.5; |B∩C|=4, min=4 -> 1.0; A∩C empty
    w = mg.overlap_weights([arr(*range(10)), arr(*range(5, 25)), arr(20, 21, 22, 23)])
    assert w[0, 1] == w[1, 0] == 0.5
    assert w[1, 2] == w[2, 1] == 1.0
    assert w[0, 2] == 0.0
    assert np.all(np.diag(w) == 0)


def test_overlap_weights_equal_python_sets_bitwise():
    members = rng_members(3, 30, pool=2000, hi=600)
    names = sorted(members)
    w = mg.overlap_weights([members[s] for s in names])
    for (i, a), (j, b) in itertools.combinations(enumerate(names), 2):
        sa, sb = set(members[a].tolist()), set(members[b].tolist())
        assert w[i, j] == len(sa & sb) / min(len(sa), len(sb))


def test_edges_and_threshold_option():
    # overlaps with A (10 images): B shares 2 (0.2), C shares 1 (0.1), D shares 5 (0.5)
    members = {
        "x(a)": arr(*range(10)),
        "x(b)": arr(0, 1, *range(100, 110)),
        "x(c)": arr(2, *range(200, 215)),
        "x(d)": arr(*range(3, 8), *range(300, 320)),
        "x(e)": arr(*range(400, 430)),
        "x(f)": arr(*range(500, 530)),
    }
    a = mg.analyse_class("x", members)  # default 0.2, kept when >= 0.2 (original: A[A < 0.2] = 0)
    assert a.edges == [("x(a)", "x(b)", 0.2), ("x(a)", "x(d)", 0.5)]
    b = mg.analyse_class("x", members, edge_threshold=0.1)  # the paper's text
    assert b.edges == [("x(a)", "x(b)", 0.2), ("x(a)", "x(c)", 0.1), ("x(a)", "x(d)", 0.5)]
    c = mg.analyse_class("x", members, edge_threshold=0.3)
    assert c.edges == [("x(a)", "x(d)", 0.5)]
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(MetashiftError, match="edge_threshold"):
            mg.analyse_class("x", members, edge_threshold=bad)


# ----------------------------------------------------------------------------- communities


TIE_GRAPHS = [
    nx.cycle_graph(12),
    nx.complete_graph(7),
    nx.grid_2d_graph(5, 6),
    nx.star_graph(9),
    nx.path_graph(10),
    nx.disjoint_union(nx.complete_graph(4), nx.complete_graph(4)),
    nx.karate_club_graph(),
    nx.barbell_graph(5, 2),
    nx.hypercube_graph(4),
    nx.petersen_graph(),
    nx.empty_graph(5),
]


def _cnm_both(g: nx.Graph) -> tuple[list, list]:
    g = nx.convert_node_labels_to_integers(g)
    n = len(g)
    names = [f"s{i:04d}" for i in range(n)]  # sort order == index order
    named = nx.relabel_nodes(g, dict(enumerate(names)))
    ref = sorted(sorted(c) for c in nx.community.greedy_modularity_communities(named))
    ours = sorted(sorted(names[i] for i in c) for c in mg.cnm_communities(nx.to_numpy_array(g, nodelist=range(n))))
    return ours, ref


@pytest.mark.parametrize("g", TIE_GRAPHS, ids=lambda g: f"{len(g)}n{g.size()}e")
def test_cnm_equals_networkx_on_tie_graphs(g):
    ours, ref = _cnm_both(g)
    assert ours == ref


def test_cnm_equals_networkx_on_random_graphs():
    rng = np.random.default_rng(7)
    for _ in range(120):
        n = int(rng.integers(2, 70))
        g = nx.gnp_random_graph(n, float(rng.uniform(0.02, 0.5)), seed=int(rng.integers(1 << 30)))
        ours, ref = _cnm_both(g)
        assert ours == ref


def test_cnm_equals_networkx_on_large_graphs():
    # above CNM_FULL_RESCAN_MAX_NODES the incremental row-maximum bookkeeping is used; the grid,
    # the ring of cliques and the circulant graph are full of exact ties
    graphs = [
        nx.gnp_random_graph(300, 0.02, seed=1),
        nx.gnp_random_graph(420, 6 / 420, seed=2),
        nx.grid_2d_graph(17, 17),
        nx.ring_of_cliques(60, 5),
        nx.circulant_graph(270, [1, 2, 5]),
    ]
    for g in graphs:
        assert len(g) > mg.CNM_FULL_RESCAN_MAX_NODES
        ours, ref = _cnm_both(g)
        assert ours == ref


# a 4-regular graph where the incremental path's tie rule (equal gain -> smaller column) matters
REGULAR_TIE_EDGES = [
    (0, 1),
    (0, 3),
    (0, 7),
    (0, 8),
    (1, 2),
    (1, 4),
    (1, 9),
    (2, 7),
    (2, 8),
    (2, 9),
    (3, 4),
    (3, 5),
    (3, 9),
    (4, 6),
    (4, 8),
    (5, 6),
    (5, 7),
    (5, 8),
    (6, 7),
    (6, 9),
]


def test_cnm_incremental_bookkeeping_equals_networkx(monkeypatch):
    # force the large-graph code path on small, tie-heavy graphs
    monkeypatch.setattr(mg, "CNM_FULL_RESCAN_MAX_NODES", 0)
    rng = np.random.default_rng(0)
    graphs = [nx.Graph(REGULAR_TIE_EDGES)]
    for _ in range(60):
        n = int(rng.integers(3, 12)) * 2
        graphs.append(nx.random_regular_graph(int(rng.choice([2, 3, 4])), n, seed=int(rng.integers(1 << 30))))
        graphs.append(nx.gnp_random_graph(int(rng.integers(4, 30)), 0.3, seed=int(rng.integers(1 << 30))))
    for g in graphs + TIE_GRAPHS:
        ours, ref = _cnm_both(g)
        assert ours == ref


def test_cnm_through_analyse_class_equals_networkx_unweighted():
    members = rng_members(11, 40, pool=900, hi=300)
    a = mg.analyse_class("dog", members)
    ref = nx.community.greedy_modularity_communities(nx_graph(a))  # weight=None, as the original
    assert partition(a.communities) == sorted(sorted(c) for c in ref)


def test_community_ids_largest_first_ties_by_smallest_name():
    # two triangles of equal size and an isolated subset: ids 0/1 by smallest member name, then 2
    core = {
        "t(b1)": arr(*range(0, 30)),
        "t(b2)": arr(*range(0, 30)),
        "t(b3)": arr(*range(0, 30)),
        "t(a1)": arr(*range(100, 130)),
        "t(a2)": arr(*range(100, 130)),
        "t(a3)": arr(*range(100, 130)),
        "t(z)": arr(*range(500, 530)),
    }
    a = mg.analyse_class("t", core)
    assert {s for s, c in a.communities.items() if c == 0} == {"t(a1)", "t(a2)", "t(a3)"}
    assert {s for s, c in a.communities.items() if c == 1} == {"t(b1)", "t(b2)", "t(b3)"}
    assert a.communities["t(z)"] == 2


def test_louvain_seeded_and_deterministic():
    members = rng_members(5, 60, pool=1500, hi=400)
    runs = [mg.analyse_class("dog", members, community_method="louvain", seed=3) for _ in range(3)]
    assert runs[0].communities == runs[1].communities == runs[2].communities
    assert set(runs[0].communities) == set(members)
    ref = nx.community.louvain_communities(nx_graph(runs[0]), weight="weight", seed=3)
    assert partition(runs[0].communities) == sorted(sorted(c) for c in ref)
    ids = sorted(set(runs[0].communities.values()))
    assert ids == list(range(len(ids)))


def test_unknown_community_method():
    with pytest.raises(MetashiftError, match="louvain"):
        mg.analyse_class("dog", rng_members(0, 8), community_method="louvian")


# ----------------------------------------------------------------------------- spectral embedding


@pytest.mark.parametrize("seed,n", [(0, 6), (1, 12), (2, 40), (3, 90)])
def test_embedding_distances_equal_networkx_spectral_layout(seed, n):
    members = rng_members(seed, n)
    a = mg.analyse_class("dog", members)
    assert a.embedding_status == mg.STATUS_OK and a.embedding_note == ""
    assert nx.is_connected(nx_graph(a))
    pos = nx.spectral_layout(nx_graph(a), dim=5)  # what the original code ran
    p = np.array([pos[s] for s in a.subsets])
    q = np.array([a.embedding[s] for s in a.subsets])
    assert np.abs(pairwise(p) - pairwise(q)).max() < 1e-9
    # same normalisation: centred, largest absolute coordinate 1
    assert np.allclose(q.mean(axis=0), 0, atol=1e-12)
    assert np.isclose(np.abs(q).max(), 1.0)


def test_embedding_large_graph_and_sparse_solver(monkeypatch):
    # > 500 nodes: networkx switches to ARPACK; our dense and sparse (shift-invert) paths agree with it
    members = rng_members(8, 520, pool=3000, lo=60, hi=900)
    a = mg.analyse_class("dog", members)
    assert a.embedding_status == mg.STATUS_OK
    pos = nx.spectral_layout(nx_graph(a), dim=5)
    idx = np.random.default_rng(0).choice(len(a.subsets), 80, replace=False)
    names = [a.subsets[i] for i in idx]
    d_ref = pairwise(np.array([pos[s] for s in names]))
    d_dense = pairwise(np.array([a.embedding[s] for s in names]))
    assert np.abs(d_ref - d_dense).max() < 1e-6
    monkeypatch.setattr(mg, "DENSE_EIGEN_MAX_NODES", 100)
    b = mg.analyse_class("dog", members)
    d_sparse = pairwise(np.array([b.embedding[s] for s in names]))
    assert np.abs(d_sparse - d_dense).max() < 1e-6


def test_embedding_signs_fixed_and_deterministic():
    members = rng_members(4, 30)
    a = mg.analyse_class("dog", members)
    b = mg.analyse_class("dog", dict(reversed(list(members.items()))))  # insertion order is irrelevant
    q = np.array([a.embedding[s] for s in a.subsets])
    assert np.array_equal(q, np.array([b.embedding[s] for s in b.subsets]))
    assert a.edges == b.edges and a.communities == b.communities
    # the largest-magnitude entry of every axis is positive
    assert np.all(q[np.argmax(np.abs(q), axis=0), np.arange(q.shape[1])] > 0)


def _two_blobs(big: int, small: int) -> dict:
    """A connected blob of ``big`` subsets, another of ``small``, and one isolated subset."""
    m = {}
    for i in range(big):
        m[f"k(a{i:02d})"] = arr(*range(0, 30), *range(1000 + 10 * i, 1000 + 10 * i + 5 + i))
    for i in range(small):
        m[f"k(b{i:02d})"] = arr(*range(100, 130), *range(2000 + 10 * i, 2000 + 10 * i + 5 + i))
    m["k(zz)"] = arr(*range(5000, 5040))
    return m


def test_disconnected_graph_embeds_largest_component_only():
    members = _two_blobs(9, 4)
    a = mg.analyse_class("k", members)
    assert a.embedding_status == mg.STATUS_LARGEST
    assert "3 connected components" in a.embedding_note and "embedded the largest (9 of 14" in a.embedding_note
    assert sorted(a.embedding) == sorted(s for s in members if s.startswith("k(a"))
    # the component is embedded on its own: equal to spectral_layout of that component
    g = nx_graph(a).subgraph([s for s in a.subsets if s.startswith("k(a")])
    pos = nx.spectral_layout(g, dim=5)
    names = sorted(g)
    d_ref = pairwise(np.array([pos[s] for s in names]))
    d = pairwise(np.array([a.embedding[s] for s in names]))
    assert np.abs(d - d_ref).max() < 1e-9
    d = mg.subset_distance(a, "k(a00)", "k(a03)")
    assert d.rule == "spectral" and d.value == float(np.linalg.norm(a.embedding["k(a00)"] - a.embedding["k(a03)"]))
    # other components: resistance inside a component, disconnected across components (never an error)
    assert mg.subset_distance(a, "k(a00)", "k(b00)") == mg.distances.DISCONNECTED
    assert mg.subset_distance(a, "k(b00)", "k(zz)").status == "disconnected"
    inner = mg.subset_distance(a, "k(b00)", "k(b01)")
    assert inner.rule == "resistance" and inner.status == "ok" and inner.value > 0
    with pytest.raises(MetashiftError, match="disconnected"):
        float(mg.subset_distance(a, "k(a00)", "k(b00)"))
    with pytest.raises(UnknownNameError, match="did you mean"):
        mg.subset_distance(a, "k(a00)", "k(a0)")


def test_disconnected_tie_picks_component_with_first_name():
    members = _two_blobs(7, 7)
    a = mg.analyse_class("k", members)
    assert a.embedding_status == mg.STATUS_LARGEST
    assert sorted(a.embedding) == sorted(s for s in members if s.startswith("k(a"))


def test_too_small_graph_has_no_embedding():
    # largest component 4 subsets <= K=5: no 5 non-trivial eigenvectors (the original crashes here)
    members = _two_blobs(4, 3)
    a = mg.analyse_class("k", members)
    assert a.embedding_status == mg.STATUS_TOO_SMALL
    assert a.embedding == {}
    assert "needs more than 5 connected subsets" in a.embedding_note
    d = mg.subset_distance(a, "k(a00)", "k(a01)")
    assert d.rule == "resistance" and d.value > 0
    assert mg.subset_distance(a, "k(a00)", "k(zz)").status == "disconnected"
    m = mg.class_distances(a)
    assert m.coverage() == (4 * 3 // 2 + 3 * 2 // 2, 8 * 7 // 2)
    # a smaller K makes it embeddable
    b = mg.analyse_class("k", members, spectral_dim=3)
    assert b.embedding_status == mg.STATUS_LARGEST and len(b.embedding) == 4
    assert all(v.shape == (3,) for v in b.embedding.values())


def test_degenerate_eigenvalues_are_flagged():
    # 8 identical-overlap subsets = complete graph: every non-zero eigenvalue is 8 * 0.75
    members = {f"q(s{i})": arr(*range(30), *range(100 + 10 * i, 110 + 10 * i)) for i in range(8)}
    a = mg.analyse_class("q", members)
    assert a.embedding_status == mg.STATUS_DEGENERATE
    assert "arbitrary pick" in a.embedding_note
    assert np.allclose(a.eigenvalues, 6.0)
    again = mg.analyse_class("q", members)
    assert all(np.array_equal(a.embedding[s], again.embedding[s]) for s in a.subsets)


def test_eigh_runs_with_one_blas_thread_and_restores():
    def blas_threads():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    before = blas_threads()
    if not before:
        pytest.skip("threadpoolctl finds no BLAS in this process")
    with mg._one_blas_thread():
        assert blas_threads() == [1] * len(before)
    assert blas_threads() == before


def test_bad_members_rejected():
    with pytest.raises(InputFormatError, match="not sorted and unique"):
        mg.analyse_class("d", {"d(a)": np.array([3, 1, 2])})
    with pytest.raises(InputFormatError, match="negative image index"):
        mg.analyse_class("d", {"d(a)": np.array([-1, 2])})
    with pytest.raises(InputFormatError, match="no images"):
        mg.analyse_class("d", {"d(a)": np.array([], dtype=np.int64)})
    with pytest.raises(InputFormatError, match="integer numpy array"):
        mg.analyse_class("d", {"d(a)": [1, 2, 3]})
    with pytest.raises(MetashiftError, match="no subsets"):
        mg.analyse_class("d", {})
    with pytest.raises(MetashiftError, match="spectral_dim"):
        mg.analyse_class("d", {"d(a)": arr(1, 2)}, spectral_dim=0)


# ----------------------------------------------------------------------------- group distances


def path_groups() -> dict:
    # A-B-C path, both edges 0.5: Fiedler vector ~ (1, 0, -1) -> after scaling A=1, B=0, C=-1
    return {"g(A)": arr(*range(0, 10)), "g(B)": arr(*range(5, 15)), "g(C)": arr(*range(10, 20))}


def test_group_distance_code_by_hand():
    g = path_groups()
    assert mg.group_distance_code(g, "g(A)", "g(C)", spectral_dim=1).value == pytest.approx(2.0, abs=1e-12)
    assert mg.group_distance_code(g, "g(A)", "g(B)", spectral_dim=1).value == pytest.approx(1.0, abs=1e-12)
    # a list: mean of the pair distances (the original's 0.5 * (d_A + d_B))
    d = mg.group_distance_code(g, "g(A)", ["g(B)", "g(C)"], spectral_dim=1)
    assert d.value == pytest.approx(1.5, abs=1e-12) and d.rule == "spectral"
    # sets of image-id strings give the same graph
    as_sets = {k: {f"img{i:03d}" for i in v.tolist()} for k, v in g.items()}
    assert mg.group_distance_code(as_sets, "g(A)", ["g(B)", "g(C)"], spectral_dim=1).value == pytest.approx(1.5)


def test_group_distance_code_equals_original_recipe():
    # the original: graph over all groups, spectral_layout(dim=5), mean of ||pos[test] - pos[train_i]||
    groups = rng_members(21, 13, pool=600, lo=80, hi=300)
    names = sorted(groups)
    g = nx.Graph()
    g.add_nodes_from(names)
    for a, b in itertools.combinations(names, 2):
        sa, sb = set(groups[a].tolist()), set(groups[b].tolist())
        w = len(sa & sb) / min(len(sa), len(sb))
        if w >= 0.2:
            g.add_edge(a, b, weight=w)
    assert nx.is_connected(g)
    pos = nx.spectral_layout(g, dim=5)
    test, train = names[5], [names[0], names[9]]
    expected = 0.5 * (np.linalg.norm(pos[train[0]] - pos[test]) + np.linalg.norm(pos[train[1]] - pos[test]))
    assert mg.group_distance_code(groups, test, train).value == pytest.approx(expected, abs=1e-9)


def test_group_distance_code_errors():
    g = path_groups()
    with pytest.raises(UnknownNameError, match="did you mean"):
        mg.group_distance_code(g, "g(A)", "g(D)", spectral_dim=1)
    # 3 groups cannot give 5 axes: effective resistance of the path A-B-C (two edges of weight 0.5)
    d = mg.group_distance_code(g, "g(A)", "g(C)")
    assert d.rule == "resistance" and d.value == pytest.approx(4.0, abs=1e-12)
    assert mg.group_distance_code(g, "g(A)", ["g(B)", "g(C)"]).value == pytest.approx(3.0, abs=1e-12)
    g["g(Z)"] = arr(900, 901, 902)
    assert mg.group_distance_code(g, "g(A)", "g(Z)", spectral_dim=1).status == "disconnected"
    assert mg.group_distance_code(g, "g(A)", ["g(B)", "g(Z)"], spectral_dim=1).status == "disconnected"
    with pytest.raises(InputFormatError, match="mix"):
        mg.group_distance_code({"a": arr(1), "b": {1, 2}}, "a", "b")


def test_group_distance_paper_by_hand():
    analysis = mg.ClassAnalysis(
        subsets=["c(a)", "c(b)", "c(c)"],
        edges=[],
        communities={"c(a)": 0, "c(b)": 0, "c(c)": 0},
        embedding={"c(a)": np.array([0.0, 0.0]), "c(b)": np.array([2.0, 0.0]), "c(c)": np.array([0.0, 4.0])},
        embedding_status="ok",
        embedding_note="",
        subject="c",
    )
    members = {"c(a)": arr(1), "c(b)": arr(1, 2, 3), "c(c)": arr(9, 10)}
    # group a = {c(a) (1 image), c(b) (3 images)} -> centre (1.5, 0); group b = c(c) -> (0, 4)
    d = mg.group_distance_paper(analysis, members, ["c(a)", "c(b)"], ["c(c)"])
    assert d.value == pytest.approx(np.hypot(1.5, 4.0), abs=1e-12) and d.rule == "spectral"
    assert mg.group_distance_paper(analysis, members, ["c(b)"], ["c(a)"]).value == pytest.approx(2.0)
    with pytest.raises(UnknownNameError):
        mg.group_distance_paper(analysis, members, ["c(x)"], ["c(a)"])
    del analysis.embedding["c(c)"]
    assert mg.group_distance_paper(analysis, members, ["c(a)"], ["c(c)"]).status == "disconnected"
    # with edges a-b (0.5) and b-c (0.25): {a} vs {c} through b = 2 + 4; {a, b} shorted vs {c} = 4
    analysis.edges = [("c(a)", "c(b)", 0.5), ("c(b)", "c(c)", 0.25)]
    d = mg.group_distance_paper(analysis, members, ["c(a)"], ["c(c)"])
    assert d.rule == "resistance" and d.value == pytest.approx(6.0, abs=1e-12)
    assert mg.group_distance_paper(analysis, members, ["c(a)", "c(b)"], ["c(c)"]).value == pytest.approx(4.0)
    assert mg.group_distance_paper(analysis, members, ["c(a)", "c(c)"], ["c(c)"]).value == 0.0


# ----------------------------------------------------------------------------- real data


def test_attributes_pickle_classes_match_networkx_reference(shared_ref):
    """On the published attribute subsets (66 classes): CNM partitions equal networkx's, and the
    embedding distances equal spectral_layout's on every connected, non-degenerate class."""
    from metashift_hf.builders.pickles import restricted_load

    data = restricted_load(shared_ref / "metashift" / "attributes-candidate-subsets.pkl")
    kept = {k: v for k, v in data.items() if len(v) >= 25}
    by_subject: dict[str, list[str]] = {}
    for k in kept:
        by_subject.setdefault(k.split("(")[0], []).append(k)
    classes = {s: names for s, names in by_subject.items() if len(names) > 5}
    assert len(classes) == 66 and sum(map(len, classes.values())) == 679
    ids = {x: i for i, x in enumerate(sorted(set().union(*(kept[k] for k in kept))))}
    compared = 0
    for subject, names in sorted(classes.items()):
        members = {k: np.array(sorted(ids[x] for x in kept[k]), dtype=np.int64) for k in names}
        a = mg.analyse_class(subject, members)
        g = nx.Graph()
        g.add_nodes_from(sorted(names))
        for x, y in itertools.combinations(sorted(names), 2):
            w = len(kept[x] & kept[y]) / min(len(kept[x]), len(kept[y]))
            if w >= 0.2:
                g.add_edge(x, y, weight=w)
        assert sorted(g.edges(data="weight")) == sorted(a.edges)
        assert partition(a.communities) == sorted(sorted(c) for c in nx.community.greedy_modularity_communities(g))
        if a.embedding_status == mg.STATUS_OK:
            pos = nx.spectral_layout(g, dim=5)
            p = np.array([pos[s] for s in a.subsets])
            q = np.array([a.embedding[s] for s in a.subsets])
            assert np.abs(pairwise(p) - pairwise(q)).max() < 1e-6, subject
            compared += 1
    assert compared > 0


# ----------------------------------------------------------------------------- pictures


def test_plot_written_and_deterministic(tmp_path):
    pytest.importorskip("matplotlib")
    from metashift_hf.builders.plots import plot_class

    members = _two_blobs(9, 4)
    a = mg.analyse_class("k", members)
    p1, p2 = tmp_path / "k.png", tmp_path / "again" / "k.png"
    plot_class(a, members, p1)
    plot_class(a, members, p2)
    data = p1.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert data == p2.read_bytes()
    assert [f.name for f in tmp_path.iterdir() if f.name.startswith(".")] == []  # no temp files left


def test_plot_has_a_community_legend_and_tight_margins(tmp_path):
    """Issue 12: a legend explains the colours; the picture is cropped to its content (no wide margins)."""
    pytest.importorskip("matplotlib")
    from PIL import Image

    from metashift_hf.builders.plots import plot_class

    members = _two_blobs(9, 4)
    a = mg.analyse_class("k", members)
    legend = plot_class(a, members, tmp_path / "k.png")
    n_comm = len(set(a.communities.values()))
    assert len(legend) == n_comm and all(entry.startswith("community ") for entry in legend)
    assert sum(int(e.split(": ")[1].split()[0]) for e in legend) == len(a.subsets)
    with Image.open(tmp_path / "k.png") as im:
        rgb = np.asarray(im.convert("RGB"))
    ink = np.argwhere(rgb.min(axis=2) < 250)  # non-white pixels
    (top, left), (bottom, right) = ink.min(axis=0), ink.max(axis=0)
    h, w = rgb.shape[:2]
    assert max(top, h - bottom) < 0.08 * h and max(left, w - right) < 0.08 * w


def test_isolated_subsets_sit_on_a_compact_grid_not_a_ring(tmp_path):
    """A class without edges (every subset its own community) draws as a labelled grid, and the
    picture says there are no edges; subsets without an edge beside a connected part go below it."""
    from metashift_hf.builders.plots import GRID_STEP, layout, spring_positions

    names = [f"k(c{i:02d})" for i in range(18)]
    lay = layout(names, [])
    assert lay.isolated == names and lay.grid_columns == 6  # 3 rows of 6, in name order
    assert np.allclose(np.diff(lay.xy[:6, 0]), GRID_STEP) and np.allclose(lay.xy[:6, 1], 0.0)
    assert np.allclose(lay.xy[6:12, 1], -GRID_STEP) and np.allclose(lay.xy[12:, 1], -2 * GRID_STEP)
    # a connected class keeps exactly the spring layout it always had
    edges = [("k(a)", "k(b)", 0.5), ("k(b)", "k(c)", 0.4)]
    assert np.array_equal(layout(["k(a)", "k(b)", "k(c)"], edges).xy, spring_positions(3, [(0, 1, 0.5), (1, 2, 0.4)]))
    mixed = layout(["k(a)", "k(b)", "k(c)", "k(z)"], edges[:1])
    assert mixed.isolated == ["k(c)", "k(z)"] and (mixed.xy[2:, 1] < mixed.xy[:2, 1].min()).all()

    pytest.importorskip("matplotlib")
    from metashift_hf.builders.plots import plot_class

    members = {f"k(c{i})": arr(*range(100 * i, 100 * i + 30)) for i in range(6)}  # no two overlap
    a = mg.analyse_class("k", members)
    assert a.edges == []
    assert plot_class(a, members, tmp_path / "k.png") == ["6 subsets, each its own community (no edges)"]
    assert (tmp_path / "k.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
