"""Distances with an answer for every pair: a number under a named rule, or ``disconnected``.

Rules, in order (docs/metagraph.md, "Distances", holds the study that chose them):

- ``spectral`` — the original rule: Euclidean distance between the stored spectral embeddings
  (eigenvectors 2..K+1 of L = D - A of the largest connected component, scaled by the largest
  absolute coordinate). Used wherever both subsets have such an embedding; numbers are bit-identical
  to ``float(np.linalg.norm(ea - eb))``.
- ``resistance`` — effective resistance between the two subsets in the thresholded meta-graph,
  R_ab = L+_aa + L+_bb - 2 L+_ab on their connected component. Used for every other pair joined by a
  path. It does not depend on node order or an eigenvector basis, and moved least under a 1%
  perturbation of the sets among the candidates; it is on another scale than ``spectral``, so the
  two are never mixed in one number and every number names its rule.
- status ``disconnected`` — no path joins the subsets at the edge threshold; no number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Literal, Mapping, Sequence

import numpy as np
import scipy.linalg
import scipy.sparse
import scipy.sparse.csgraph

from metashift_hf.core.errors import MetashiftError


Rule = Literal["spectral", "resistance"]
Status = Literal["ok", "disconnected"]
RULE_SPECTRAL: Rule = "spectral"
RULE_RESISTANCE: Rule = "resistance"
RULES: tuple[Rule, ...] = (RULE_SPECTRAL, RULE_RESISTANCE)
STATUS_OK: Status = "ok"
STATUS_DISCONNECTED: Status = "disconnected"

RULE_HELP = {
    RULE_SPECTRAL: "Euclidean distance of the original spectral embeddings (largest component, K dims)",
    RULE_RESISTANCE: "effective resistance in the thresholded meta-graph (pairs outside the embedded component)",
}


@dataclass(frozen=True)
class Distance:
    """One answer: ``value`` under ``rule`` (status ``ok``), or no value (status ``disconnected``).

    ``rule`` is a rule name, or several joined by ``+`` for a mean over pairs answered by different
    rules (a group against a list of groups)."""

    value: float | None
    rule: str | None
    status: Status

    def __str__(self) -> str:
        return STATUS_DISCONNECTED if self.value is None else f"{self.value:.6f} ({self.rule})"

    def __float__(self) -> float:
        """The number; a ``MetashiftError`` for ``disconnected`` (check ``status`` to avoid it)."""
        if self.value is None:
            raise MetashiftError(
                "the subsets are disconnected: no path joins them in the meta-graph",
                "check Distance.status before using the value, or lower the edge threshold",
            )
        return self.value

    def as_dict(self) -> dict:
        return {"value": self.value, "rule": self.rule, "status": self.status}


DISCONNECTED = Distance(None, None, STATUS_DISCONNECTED)


@dataclass(frozen=True)
class DistanceMatrix:
    """Every pair of ``names``: ``values`` (NaN where disconnected) and ``rules`` ('' where disconnected)."""

    names: tuple[str, ...]
    values: np.ndarray
    rules: np.ndarray

    def index(self, name: str) -> int:
        return self.names.index(name)

    def get(self, a: str, b: str) -> Distance:
        i, j = self.index(a), self.index(b)
        v = float(self.values[i, j])
        return DISCONNECTED if np.isnan(v) else Distance(v, str(self.rules[i, j]), STATUS_OK)

    def pairs(self) -> Iterator[tuple[str, str, Distance]]:
        """Every unordered pair (a < b by position), row by row."""
        for i, j in zip(*np.triu_indices(len(self.names), 1)):
            yield self.names[i], self.names[j], self.get(self.names[i], self.names[j])

    def coverage(self) -> tuple[int, int]:
        """(pairs with a number, all unordered pairs)."""
        iu = np.triu_indices(len(self.names), 1)
        return int((~np.isnan(self.values[iu])).sum()), int(iu[0].size)


def _effective_resistance(weights: np.ndarray) -> np.ndarray:
    """R_ij on a connected weighted graph: L+ = (L + J/m)^-1 - J/m (L's null space is the constants)."""
    m = weights.shape[0]
    if m == 1:
        return np.zeros((1, 1))
    lap = np.diag(weights.sum(axis=1)) - weights
    pinv = scipy.linalg.inv(lap + 1.0 / m) - 1.0 / m
    d = np.diag(pinv)
    r = d[:, None] + d[None, :] - 2.0 * pinv
    np.fill_diagonal(r, 0.0)
    return np.maximum(r, 0.0)  # rounding can leave -1e-17 on near-identical nodes


def distance_matrix(names: Sequence[str], weights: np.ndarray, embedding: Mapping[str, np.ndarray]) -> DistanceMatrix:
    """Every pair of the nodes ``names`` of the thresholded meta-graph ``weights``.

    ``embedding`` holds the original rule's coordinates (only the embedded component has them).
    """
    names = tuple(names)
    n = len(names)
    values = np.full((n, n), np.nan)
    rules = np.full((n, n), "", dtype=object)
    emb_idx = np.array([i for i, s in enumerate(names) if s in embedding], dtype=np.int64)
    if emb_idx.size:
        coords = np.asarray([embedding[names[i]] for i in emb_idx], dtype=np.float64)
        # The original rule is np.linalg.norm(ea - eb) = sqrt(d.dot(d)) (BLAS ddot). A stacked
        # (1 x K) @ (K x 1) matmul takes the same dot per pair, so every number is bit-identical
        # (tested), ~17x faster than a loop; an axis-wise norm would round differently.
        diff = coords[:, None, :] - coords[None, :, :]
        values[np.ix_(emb_idx, emb_idx)] = np.sqrt(np.matmul(diff[..., None, :], diff[..., :, None])[..., 0, 0])
        rules[np.ix_(emb_idx, emb_idx)] = RULE_SPECTRAL
    _, labels = scipy.sparse.csgraph.connected_components(scipy.sparse.csr_matrix(weights > 0), directed=False)
    embedded = np.zeros(n, dtype=bool)
    embedded[emb_idx] = True
    for c in np.unique(labels):
        nodes = np.flatnonzero(labels == c)
        if embedded[nodes].all():
            continue  # the embedded component: spectral numbers everywhere
        block = np.ix_(nodes, nodes)
        r = _effective_resistance(weights[block])
        keep = ~embedded[nodes][:, None] | ~embedded[nodes][None, :]  # pairs the spectral rule leaves open
        values[block] = np.where(keep, r, values[block])
        rules[block] = np.where(keep, RULE_RESISTANCE, rules[block])
    return DistanceMatrix(names, values, rules)


def mean_distance(parts: Sequence[Distance]) -> Distance:
    """Mean over several answers (a group against a list of groups); disconnected if any part is."""
    if any(p.value is None for p in parts):
        return DISCONNECTED
    rules = sorted({p.rule for p in parts if p.rule})
    return Distance(sum(p.value for p in parts) / len(parts), "+".join(rules), STATUS_OK)


def contracted_resistance(weights: np.ndarray, group_a: Sequence[int], group_b: Sequence[int]) -> Distance:
    """Effective resistance between two node sets (each shorted into one node) of a weighted graph;
    0 when they share a node, ``disconnected`` when no path joins them."""
    a, b = set(int(i) for i in group_a), set(int(i) for i in group_b)
    if a & b:
        return Distance(0.0, RULE_RESISTANCE, STATUS_OK)
    n = weights.shape[0]
    # node ids after shorting: every member of a -> 0, of b -> 1, the others 2..
    others = [i for i in range(n) if i not in a and i not in b]
    new = np.empty(n, dtype=np.int64)
    new[sorted(a)] = 0
    new[sorted(b)] = 1
    new[others] = np.arange(2, 2 + len(others))
    proj = scipy.sparse.csr_matrix((np.ones(n), (new, np.arange(n))), shape=(2 + len(others), n))
    merged = (proj @ scipy.sparse.csr_matrix(weights) @ proj.T).toarray()
    np.fill_diagonal(merged, 0.0)
    _, labels = scipy.sparse.csgraph.connected_components(scipy.sparse.csr_matrix(merged > 0), directed=False)
    if labels[0] != labels[1]:
        return DISCONNECTED
    nodes = np.flatnonzero(labels == labels[0])
    r = _effective_resistance(merged[np.ix_(nodes, nodes)])
    return Distance(float(r[0, 1]), RULE_RESISTANCE, STATUS_OK)
