"""Per-class meta-graphs: overlap edges, communities, spectral embeddings and distances.

Nodes are the kept subsets of one class; an edge joins two subsets whose overlap coefficient
|A∩B| / min(|A|, |B|) is at least ``edge_threshold``. Communities come from CNM greedy modularity
(unweighted, what the original MetaShift code ran) or Louvain (weighted, seeded, what the paper
names). The embedding reproduces ``networkx.spectral_layout(G, dim=K)`` of the original code:
eigenvectors 2..K+1 of the weighted unnormalised Laplacian L = D - A, centred and divided by the
largest absolute coordinate. Decisions and measured figures: docs/metagraph.md.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import scipy.linalg
import scipy.sparse
import scipy.sparse.csgraph
import scipy.sparse.linalg
from threadpoolctl import ThreadpoolController

from metashift_hf.core.errors import (
    EmptyResultError,
    InputFormatError,
    MetashiftError,
    UnknownNameError,
    did_you_mean,
)

from . import distances


COMMUNITY_METHODS = ("cnm", "louvain")

# embedding_status values (also written to classes.parquet)
STATUS_OK = "ok"  # connected graph, every subset embedded
STATUS_LARGEST = "largest-component"  # disconnected: only the largest component is embedded
STATUS_TOO_SMALL = "too-small"  # no component has more than K nodes: nothing embedded
STATUS_DEGENERATE = "degenerate"  # lambda_{K+1} == lambda_{K+2}: the K-th axis is a basis choice

# Above this many nodes the dense eigensolver's O(n^3) cost dominates; use sparse shift-invert.
DENSE_EIGEN_MAX_NODES = 2000
# CNM rescans every row maximum after a merge up to this many nodes (measured faster than bookkeeping).
CNM_FULL_RESCAN_MAX_NODES = 256


@dataclass
class ClassAnalysis:
    """The meta-graph of one class (see DEVELOPERS.md, "Meta-graph API")."""

    subsets: list[str]
    edges: list[tuple[str, str, float]]
    communities: dict[str, int]
    embedding: dict[str, np.ndarray]
    embedding_status: str
    embedding_note: str
    subject: str = ""
    community_method: str = "cnm"
    edge_threshold: float = 0.2
    spectral_dim: int = 5
    # Laplacian eigenvalues 1..K+1 (0-based, ascending) of the embedded component, for inspection.
    eigenvalues: np.ndarray = field(default_factory=lambda: np.zeros(0))


# ----------------------------------------------------------------------------- BLAS threads


@functools.lru_cache(maxsize=1)
def _blas_controller() -> ThreadpoolController:
    # One scan of the loaded libraries: a fresh threadpool_limits per eigh call costs ~3.7 ms,
    # a limit through a kept controller ~11 us.
    return ThreadpoolController()


def _one_blas_thread():
    """Run LAPACK single-threaded (a context manager): our matrices are small (< ~1,000 nodes),
    where OpenBLAS threads gain nothing on a quiet machine and, when other jobs share the cores,
    make each eigh call spin-wait for descheduled threads (measured 20-40x slower; docs/metagraph.md)."""
    return _blas_controller().limit(limits=1, user_api="blas")


# ----------------------------------------------------------------------------- validation


def _check_threshold(edge_threshold: float) -> None:
    if not (0.0 < float(edge_threshold) <= 1.0):
        raise MetashiftError(
            f"edge_threshold={edge_threshold!r} is outside (0, 1]",
            "pass an overlap-coefficient threshold such as 0.2 (original code) or 0.1 (the paper's text)",
        )


def _check_dim(spectral_dim: int) -> None:
    if int(spectral_dim) != spectral_dim or spectral_dim < 1:
        raise MetashiftError(
            f"spectral_dim={spectral_dim!r} is not a positive integer",
            "pass the number of embedding dimensions K, e.g. 5 as in the original code",
        )


def _check_members(members: Mapping[str, np.ndarray], what: str) -> list[str]:
    if not members:
        raise EmptyResultError(f"{what} has no subsets", "pass at least one kept subset")
    names = sorted(members)
    for name in names:
        if not isinstance(name, str):
            raise InputFormatError(f"{what}: subset key {name!r} is not a string", "use names like 'dog(sofa)'")
        arr = members[name]
        if not isinstance(arr, np.ndarray) or arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise InputFormatError(
                f"{what}: members[{name!r}] is not a 1-D integer numpy array",
                "pass sorted unique int64 image indices per subset",
            )
        if arr.size == 0:
            raise InputFormatError(f"{what}: subset {name!r} has no images", "drop empty subsets before the analysis")
        if arr[0] < 0:
            raise InputFormatError(
                f"{what}: members[{name!r}] holds negative image index {int(arr[0])}",
                "pass non-negative indices into one shared image list",
            )
        if arr.size > 1 and not bool(np.all(arr[1:] > arr[:-1])):
            raise InputFormatError(
                f"{what}: members[{name!r}] is not sorted and unique",
                "pass np.unique(indices) for every subset",
            )
    return names


# ----------------------------------------------------------------------------- overlap graph


def overlap_weights(arrays: list[np.ndarray]) -> np.ndarray:
    """Dense matrix of overlap coefficients |A∩B| / min(|A|, |B|), zero diagonal.

    One sparse (subsets x images) incidence product gives every intersection size at once,
    instead of n^2 Python set intersections.
    """
    n = len(arrays)
    sizes = np.array([a.size for a in arrays], dtype=np.int64)
    flat = np.concatenate(arrays) if n else np.zeros(0, dtype=np.int64)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=indptr[1:])
    # each row's indices are already sorted and unique, so the CSR arrays can be used as they are
    inc = scipy.sparse.csr_array(
        (np.ones(flat.size, dtype=np.int32), flat, indptr), shape=(n, int(flat.max(initial=-1)) + 1)
    )
    inter = (inc @ inc.T).toarray()
    # int/int true division is correctly rounded, exactly like Python's len(a & b) / min(...)
    weights = inter / np.minimum.outer(sizes, sizes)
    np.fill_diagonal(weights, 0.0)
    return weights


def thresholded(weights: np.ndarray, edge_threshold: float) -> np.ndarray:
    """Drop edges below the threshold (the original: ``A[A < 0.2] = 0``)."""
    out = weights.copy()
    out[out < edge_threshold] = 0.0
    return out


# ----------------------------------------------------------------------------- communities


def cnm_communities(adjacency: np.ndarray) -> list[list[int]]:
    """Clauset-Newman-Moore greedy modularity on the unweighted graph ``adjacency != 0``.

    Gives the same partition as ``networkx.community.greedy_modularity_communities(G)`` when node
    ``i`` of ``adjacency`` sorts ``i``-th among G's node labels: networkx always merges the pair
    (u, v) with the largest modularity gain, ties to the smallest (u, v) label tuple, merges u into
    v, and stops at the first negative gain. We keep the same float operations in the same order
    (so exact ties stay ties) on a dense gain matrix with per-row maxima, which avoids networkx's
    per-entry heap objects. Returns communities as sorted node-index lists, largest first.
    """
    n = adjacency.shape[0]
    adj = adjacency != 0
    np.fill_diagonal(adj, False)
    n_edges = int(adj.sum()) // 2
    if n_edges == 0:
        return [[i] for i in range(n)]
    q0 = 1 / n_edges
    a = adj.sum(axis=1).astype(np.float64) * q0 * 0.5
    outer = np.multiply.outer(a, a)
    gain = np.where(adj, q0 * 1.0 - (outer + outer), -np.inf)
    best_col = np.argmax(gain, axis=1)
    best = gain[np.arange(n), best_col]
    members: dict[int, list[int]] = {i: [i] for i in range(n)}
    rows = np.arange(n)
    small = n <= CNM_FULL_RESCAN_MAX_NODES
    while len(members) > 1:
        u = int(np.argmax(best))  # first maximum = smallest row label among ties
        dq = best[u]
        if dq < 0:  # also -inf: no pair left
            break
        v = int(best_col[u])  # u < v always: the gain matrix is symmetric
        gu, gv = gain[u], gain[v]
        in_u, in_v = gu > -np.inf, gv > -np.inf
        # networkx: both -> dq_vw + dq_uw; only v -> dq_vw - (a_u a_w + a_w a_u);
        # only u -> dq_uw - (a_v a_w + a_w a_v). x + x == 2 * x exactly, so 2 * a_u * a_w is bit-equal.
        new = np.where(in_u, np.where(in_v, gv + gu, gu - 2.0 * a[v] * a), gv - 2.0 * a[u] * a)
        new[u] = new[v] = -np.inf
        gain[u, :] = -np.inf
        gain[:, u] = -np.inf
        gain[v, :] = new
        gain[:, v] = new
        a[v] += a[u]
        a[u] = 0.0
        members[v].extend(members.pop(u))
        if small:  # a full rescan is cheaper than bookkeeping on small matrices
            best_col = np.argmax(gain, axis=1)
            best = gain[rows, best_col]
            continue
        # rows whose maximum sat on column u or v must be rescanned; others only compare with v
        nbrs = np.flatnonzero(in_u | in_v)
        nbrs = nbrs[(nbrs != u) & (nbrs != v)]
        bc = best_col[nbrs]
        hit = (bc == u) | (bc == v)
        fresh, nv = nbrs[~hit], new[nbrs[~hit]]
        better = (nv > best[fresh]) | ((nv == best[fresh]) & (v < best_col[fresh]))
        best[fresh[better]] = nv[better]
        best_col[fresh[better]] = v
        rescan = np.append(nbrs[hit], v)
        cols = np.argmax(gain[rescan], axis=1)
        best_col[rescan] = cols
        best[rescan] = gain[rescan, cols]
        best[u] = -np.inf
    comms = [sorted(m) for m in members.values()]
    comms.sort(key=lambda c: (-len(c), c[0]))
    return comms


def louvain_communities(weights: np.ndarray, seed: int) -> list[list[int]]:
    """Louvain on the weighted graph (networkx implementation, seeded)."""
    import networkx as nx

    g = nx.Graph()
    g.add_nodes_from(range(weights.shape[0]))
    iu, ju = np.nonzero(np.triu(weights, 1))
    g.add_weighted_edges_from((int(i), int(j), float(weights[i, j])) for i, j in zip(iu, ju))
    comms = [sorted(c) for c in nx.community.louvain_communities(g, weight="weight", seed=seed)]
    comms.sort(key=lambda c: (-len(c), c[0]))
    return comms


# ----------------------------------------------------------------------------- spectral embedding


@dataclass
class _Embedding:
    nodes: np.ndarray  # indices of embedded nodes
    coords: np.ndarray  # len(nodes) x K
    status: str
    note: str
    eigenvalues: np.ndarray


def _laplacian_eigs(weights: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k smallest eigenpairs of L = D - A (ascending)."""
    n = weights.shape[0]
    lap = np.diag(weights.sum(axis=1)) - weights
    if n <= DENSE_EIGEN_MAX_NODES:
        with _one_blas_thread():
            return scipy.linalg.eigh(lap, subset_by_index=[0, k - 1])
    # L is positive semi-definite: shift-invert just below 0 finds the smallest eigenvalues reliably
    vals, vecs = scipy.sparse.linalg.eigsh(scipy.sparse.csr_matrix(lap), k=k, sigma=-1e-3, which="LM")
    order = np.argsort(vals)
    return vals[order], vecs[:, order]


def spectral_embedding(weights: np.ndarray, spectral_dim: int) -> _Embedding:
    """Rows of eigenvectors 2..K+1 of the weighted Laplacian, rescaled like nx.spectral_layout.

    Decisions (docs/metagraph.md): a disconnected graph has several zero eigenvalues whose
    eigenvectors are an arbitrary basis of component indicators, so only the largest connected
    component (ties: the one holding the alphabetically first subset) is embedded, on its own
    Laplacian; other subsets get no embedding. A component needs more than K nodes to have K
    non-trivial eigenvectors; otherwise nothing is embedded. Each eigenvector's sign is fixed so
    that its largest-magnitude entry (first on ties) is positive.
    """
    k = int(spectral_dim)
    n = weights.shape[0]
    n_comp, labels = scipy.sparse.csgraph.connected_components(scipy.sparse.csr_matrix(weights > 0), directed=False)
    sizes = np.bincount(labels, minlength=n_comp)
    first = np.full(n_comp, n, dtype=np.int64)
    np.minimum.at(first, labels, np.arange(n))
    # the largest component; on ties the one holding the alphabetically first subset
    main = int(min(np.flatnonzero(sizes == sizes.max()), key=lambda c: first[c]))
    nodes = np.flatnonzero(labels == main)
    empty = np.zeros((0, k))
    if nodes.size <= k:
        note = (
            f"largest connected component has {nodes.size} subsets ({n_comp} components over {n} subsets); "
            f"a {k}-dimensional spectral embedding needs more than {k} connected subsets"
        )
        return _Embedding(np.zeros(0, dtype=np.int64), empty, STATUS_TOO_SMALL, note, np.zeros(0))
    sub = weights[np.ix_(nodes, nodes)]
    n_eig = min(k + 2, nodes.size)  # one past the last used, to see a tie at the cut
    vals, vecs = _laplacian_eigs(sub, n_eig)
    coords = vecs[:, 1 : k + 1].copy()
    rows = np.argmax(np.abs(coords), axis=0)
    coords *= np.where(coords[rows, np.arange(k)] < 0, -1.0, 1.0)
    coords -= coords.mean(axis=0)
    lim = np.abs(coords).max()
    if lim > 0:
        coords *= 1.0 / lim
    notes = []
    status = STATUS_OK
    if n_comp > 1:
        status = STATUS_LARGEST
        left = n - nodes.size
        notes.append(
            f"meta-graph has {n_comp} connected components; embedded the largest ({nodes.size} of {n} subsets), "
            f"{left} subsets have no embedding (distances to them are undefined)"
        )
    tol = 1e-9 * max(1.0, float(np.abs(vals).max()))
    ties = [i for i in range(1, n_eig - 1) if abs(vals[i + 1] - vals[i]) <= tol]
    inner = [i for i in ties if i + 1 <= k]
    if inner:
        notes.append(
            "repeated Laplacian eigenvalues inside the embedding (axes "
            + ", ".join(f"{i}/{i + 1}" for i in inner)
            + "): coordinates on those axes are one basis of the eigenspace and the max-coordinate scaling "
            "depends on it; distances are exact only up to that scale"
        )
    if k in ties:
        status = STATUS_DEGENERATE
        notes.append(
            f"lambda_{k + 1} = lambda_{k + 2} = {vals[k]:.6g} (Laplacian eigenvalues from lambda_1 = 0): axis {k} "
            "is an arbitrary pick from a larger eigenspace, so distances depend on the solver's basis"
        )
    return _Embedding(nodes, coords, status, "; ".join(notes), vals[1 : k + 1].copy())


# ----------------------------------------------------------------------------- per-class analysis


def _community_ids(comms: list[list[int]], names: list[str]) -> dict[str, int]:
    # 0 = largest community; ties by smallest member name (indices follow sorted names)
    return {names[i]: cid for cid, comm in enumerate(comms) for i in comm}


def analyse_class(
    subject: str,
    members: dict[str, np.ndarray],
    *,
    edge_threshold: float = 0.2,
    community_method: str = "cnm",
    spectral_dim: int = 5,
    seed: int = 0,
) -> ClassAnalysis:
    """Meta-graph, communities and spectral embedding of one class.

    ``members`` maps each kept subset name to its sorted unique int64 image indices.
    """
    _check_threshold(edge_threshold)
    _check_dim(spectral_dim)
    if community_method not in COMMUNITY_METHODS:
        raise MetashiftError(
            f"unknown community_method {community_method!r}{did_you_mean(community_method, COMMUNITY_METHODS)}",
            f"use one of {', '.join(COMMUNITY_METHODS)}",
        )
    names = _check_members(members, f"class {subject!r}")
    weights = thresholded(overlap_weights([members[s] for s in names]), edge_threshold)
    iu, ju = np.nonzero(np.triu(weights, 1))
    edges = [(names[i], names[j], float(weights[i, j])) for i, j in zip(iu.tolist(), ju.tolist())]
    if community_method == "cnm":
        comms = cnm_communities(weights)
    else:
        comms = louvain_communities(weights, seed)
    emb = spectral_embedding(weights, spectral_dim)
    return ClassAnalysis(
        subsets=names,
        edges=edges,
        communities=_community_ids(comms, names),
        embedding={names[i]: emb.coords[r] for r, i in enumerate(emb.nodes.tolist())},
        embedding_status=emb.status,
        embedding_note=emb.note,
        subject=subject,
        community_method=community_method,
        edge_threshold=float(edge_threshold),
        spectral_dim=int(spectral_dim),
        eigenvalues=emb.eigenvalues,
    )


# ----------------------------------------------------------------------------- distances


def _check_subset(analysis: ClassAnalysis, name: str) -> None:
    if name not in analysis.communities:
        raise UnknownNameError(
            f"{name!r} is not a kept subset of class {analysis.subject!r}" + did_you_mean(name, analysis.subsets),
            "use a name listed by the class's subsets",
        )


def edge_weights(analysis: ClassAnalysis) -> np.ndarray:
    """The thresholded weight matrix of a class (nodes in ``analysis.subsets`` order) from its edges."""
    pos = {s: i for i, s in enumerate(analysis.subsets)}
    w = np.zeros((len(pos), len(pos)))
    for a, b, x in analysis.edges:
        w[pos[a], pos[b]] = w[pos[b], pos[a]] = x
    return w


def class_distances(analysis: ClassAnalysis) -> distances.DistanceMatrix:
    """Every pair of a class's subsets: ``spectral`` where both are embedded, ``resistance`` on the
    other connected pairs, ``disconnected`` otherwise (builders/distances.py)."""
    return distances.distance_matrix(analysis.subsets, edge_weights(analysis), analysis.embedding)


def subset_distance(analysis: ClassAnalysis, a: str, b: str) -> distances.Distance:
    """Distance between two subsets of one class: a number and its rule, or ``disconnected``."""
    for name in (a, b):
        _check_subset(analysis, name)
    return class_distances(analysis).get(a, b)


def _as_index_arrays(groups: Mapping[str, object]) -> dict[str, np.ndarray]:
    """Groups as sorted unique int arrays; sets of ids (e.g. image-id strings) get shared indices."""
    arrays = {k: v for k, v in groups.items() if isinstance(v, np.ndarray)}
    others = {k: v for k, v in groups.items() if not isinstance(v, np.ndarray)}
    if arrays and others:
        raise InputFormatError(
            "groups mix numpy index arrays and Python sets",
            "pass every group the same way: all int index arrays or all sets of image ids",
        )
    if arrays:
        return {k: np.unique(v) for k, v in arrays.items()}
    for k, v in others.items():
        if not isinstance(v, (set, frozenset, list, tuple)):
            raise InputFormatError(f"group {k!r} is a {type(v).__name__}", "pass a set of image ids or an int array")
    vocab = sorted(set().union(*others.values()))
    index = {x: i for i, x in enumerate(vocab)}
    return {k: np.array(sorted(index[x] for x in v), dtype=np.int64) for k, v in others.items()}


def group_distance_code(
    groups: Mapping[str, np.ndarray | set],
    a: str,
    b: str | list[str],
    *,
    edge_threshold: float = 0.2,
    spectral_dim: int = 5,
) -> distances.Distance:
    """The original code's group distance.

    Rebuild the meta-graph whose nodes are *all* the given groups (unions of subsets, e.g. every
    train, test and additional-test group of the dog experiments), embed it like
    ``spectral_layout(dim=K)``, and return ||pos[a] - pos[b]||; for a list ``b`` (the two training
    groups of an experiment) the mean of the distances from ``a`` to each. Pairs the embedding leaves
    open get the same fallback as subsets (``resistance`` in the group graph, or ``disconnected``).
    """
    _check_threshold(edge_threshold)
    _check_dim(spectral_dim)
    targets = [b] if isinstance(b, str) else list(b)
    if not targets:
        raise MetashiftError("group_distance_code got an empty list for b", "pass at least one group name")
    for name in [a, *targets]:
        if name not in groups:
            raise UnknownNameError(
                f"group {name!r} is not among the given groups" + did_you_mean(name, groups),
                "pass the group's name as a key of groups",
            )
    idx = _as_index_arrays(groups)
    names = _check_members(idx, "groups")
    weights = thresholded(overlap_weights([idx[s] for s in names]), edge_threshold)
    emb = spectral_embedding(weights, spectral_dim)
    pos = {names[i]: emb.coords[r] for r, i in enumerate(emb.nodes.tolist())}
    matrix = distances.distance_matrix(names, weights, pos)
    return distances.mean_distance([matrix.get(a, t) for t in targets])


def _weighted_centre(analysis: ClassAnalysis, members: Mapping[str, np.ndarray], group: list[str]) -> np.ndarray:
    vecs = [analysis.embedding[name] for name in group]
    w = np.asarray([len(members[name]) for name in group], dtype=np.float64)
    return (np.asarray(vecs) * w[:, None]).sum(axis=0) / w.sum()


def group_distance_paper(
    analysis: ClassAnalysis,
    members: Mapping[str, np.ndarray],
    group_a: list[str],
    group_b: list[str],
) -> distances.Distance:
    """The paper's group distance: size-weighted mean of member subsets' embeddings, then Euclidean
    (rule ``spectral``). When a member has no embedding: the effective resistance between the two
    groups in the class meta-graph, each group's subsets shorted together (``resistance``), or
    ``disconnected``."""
    for group in (group_a, group_b):
        if not group:
            raise MetashiftError("group_distance_paper got an empty group", "pass at least one subset per group")
        for name in group:
            _check_subset(analysis, name)
            if name not in members:
                raise UnknownNameError(
                    f"{name!r} has no entry in members", "pass the same members used for analyse_class"
                )
    if all(name in analysis.embedding for name in [*group_a, *group_b]):
        value = float(
            np.linalg.norm(
                _weighted_centre(analysis, members, list(group_a)) - _weighted_centre(analysis, members, list(group_b))
            )
        )
        return distances.Distance(value, distances.RULE_SPECTRAL, distances.STATUS_OK)
    pos = {s: i for i, s in enumerate(analysis.subsets)}
    return distances.contracted_resistance(
        edge_weights(analysis), [pos[s] for s in group_a], [pos[s] for s in group_b]
    )
