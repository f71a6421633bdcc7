"""Distance-rule study: which rule answers the within-class pairs the original rule leaves open?

The original rule (eigenvectors 2..K+1 of L = D - A of the largest connected component, scaled by the
largest absolute coordinate) gives no number for a subset outside the largest component or for a class
whose largest component has at most K subsets. Candidates for the other pairs, each computed on the
thresholded overlap graph of every class of an artifact:

- ``original``      the original rule (reference; ``metagraph.spectral_embedding``)
- ``component``     the same recipe on every connected component, K_c = min(K, m - 1) for m subsets;
                    pairs in different components: ``disconnected``
- ``regularised``   the same recipe on A + tau/n (every off-diagonal entry), tau = mean weighted degree
                    (Qin & Rohe 2013): one connected graph, every pair a number
- ``resistance``    effective resistance (commute time / volume) within a component, from the
                    pseudo-inverse of the component's Laplacian; across components ``disconnected``
- ``diffusion``     L2 distance between rows of P^3, P the lazy random walk (isolated subsets stay put)

Measured per rule: coverage (within-class pairs with a number), rank agreement with ``original`` where
both give a number (Spearman and Kendall per class, scipy), stability under node reordering (reversed
node order; largest change relative to the class's largest distance, and pairs whose status flips) and
under a 1% perturbation of the sets (every membership dropped with probability 0.01, seeded; Spearman
with the unperturbed numbers, and pairs whose status flips).

    python benchmarks/study_distances.py --artifact ARTIFACT [--max-classes N]

Prints a markdown table (docs/metagraph.md holds the measured one).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph
import scipy.spatial.distance
import scipy.stats


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from metashift_hf.builders import distances as dist  # noqa: E402
from metashift_hf.builders import metagraph as mg  # noqa: E402
from metashift_hf.builders.artifact import Artifact  # noqa: E402


def _pairwise(coords: np.ndarray) -> np.ndarray:
    return scipy.spatial.distance.cdist(coords, coords)


def rule_original(w: np.ndarray, k: int) -> np.ndarray:
    n = w.shape[0]
    out = np.full((n, n), np.nan)
    emb = mg.spectral_embedding(w, k)
    if emb.nodes.size:
        out[np.ix_(emb.nodes, emb.nodes)] = _pairwise(emb.coords)
    return out


def _per_component(w: np.ndarray, block: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``block(weights of one component)`` on every connected component; NaN across components."""
    n = w.shape[0]
    out = np.full((n, n), np.nan)
    labels = _components(w)
    for c in np.unique(labels):
        nodes = np.flatnonzero(labels == c)
        out[np.ix_(nodes, nodes)] = block(w[np.ix_(nodes, nodes)])
    return out


def rule_component(w: np.ndarray, k: int) -> np.ndarray:
    def block(sub: np.ndarray) -> np.ndarray:
        if sub.shape[0] == 1:
            return np.zeros((1, 1))
        return _pairwise(mg.spectral_embedding(sub, min(k, sub.shape[0] - 1)).coords)

    return _per_component(w, block)


def rule_regularised(w: np.ndarray, k: int) -> np.ndarray:
    n = w.shape[0]
    if n < 2:
        return np.full((n, n), np.nan)
    tau = w.sum() / n
    reg = w + (tau if tau > 0 else 1.0) / n
    np.fill_diagonal(reg, 0.0)
    try:
        emb = mg.spectral_embedding(reg, min(k, n - 1))
    except np.linalg.LinAlgError:  # LAPACK's MRRR solver fails on some near-uniform graphs: counted
        FAILURES["regularised"] = FAILURES.get("regularised", 0) + 1
        return np.full((n, n), np.nan)
    return _pairwise(emb.coords)


WITH_DISCONNECTED = ("component", "resistance", "chosen")  # rules that answer 'disconnected' across components
FAILURES: dict[str, int] = {}  # eigen-solver failures per rule (their pairs count as uncovered)


def _components(w: np.ndarray) -> np.ndarray:
    return scipy.sparse.csgraph.connected_components(scipy.sparse.csr_matrix(w > 0), directed=False)[1]


def rule_resistance(w: np.ndarray, k: int) -> np.ndarray:
    def block(sub: np.ndarray) -> np.ndarray:
        lap_pinv = np.linalg.pinv(np.diag(sub.sum(axis=1)) - sub, hermitian=True)
        d = np.diag(lap_pinv)
        return np.maximum(d[:, None] + d[None, :] - 2 * lap_pinv, 0.0)

    return _per_component(w, block)


def rule_diffusion(w: np.ndarray, k: int, t: int = 3) -> np.ndarray:
    deg = w.sum(axis=1)
    walk = np.where(deg[:, None] > 0, w / np.where(deg > 0, deg, 1.0)[:, None], np.eye(w.shape[0]))
    p = np.linalg.matrix_power(0.5 * (np.eye(w.shape[0]) + walk), t)
    return _pairwise(p)


def rule_chosen(w: np.ndarray, k: int) -> np.ndarray:
    """What the library does (builders/distances.py): original where defined, else resistance, else
    disconnected."""
    emb = mg.spectral_embedding(w, k)
    names = [f"s{i:05d}" for i in range(w.shape[0])]
    return dist.distance_matrix(names, w, {names[i]: emb.coords[r] for r, i in enumerate(emb.nodes.tolist())}).values


RULES: dict[str, Callable[[np.ndarray, int], np.ndarray]] = {
    "original": rule_original,
    "component": rule_component,
    "regularised": rule_regularised,
    "resistance": rule_resistance,
    "diffusion": rule_diffusion,
    "chosen": rule_chosen,
}


def _upper(m: np.ndarray) -> np.ndarray:
    return m[np.triu_indices(m.shape[0], 1)]


def _rank(a: np.ndarray, b: np.ndarray) -> tuple[float, float] | None:
    both = ~np.isnan(a) & ~np.isnan(b)
    x, y = a[both], b[both]
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    return float(scipy.stats.spearmanr(x, y)[0]), float(scipy.stats.kendalltau(x, y)[0])


def perturbed(members: dict[str, np.ndarray], rng: np.random.Generator, p: float = 0.01) -> dict[str, np.ndarray]:
    out = {}
    for name, arr in members.items():
        keep = arr[rng.random(arr.size) >= p]
        out[name] = keep if keep.size else arr[:1]
    return out


def study(artifact: Artifact, max_classes: int | None = None, seed: int = 0) -> dict[str, dict]:
    o = artifact.options
    thr, k = float(o.edge_threshold), int(o.spectral_dim)
    rng = np.random.default_rng(seed)
    acc = {
        r: {
            "pairs": 0,
            "covered": 0,
            "answered": 0,
            "sp": [],
            "kt": [],
            "reorder": [],
            "reorder_flip": 0,
            "pert_sp": [],
            "pert_flip": 0,
            "cpu": 0.0,
        }
        for r in RULES
    }
    classes = artifact.classes()[: max_classes or None]
    for subject in classes:
        members = artifact.members(artifact.subsets_of(subject))
        names = sorted(members)
        w = mg.thresholded(mg.overlap_weights([members[s] for s in names]), thr)
        pm = perturbed(members, rng)
        wp = mg.thresholded(mg.overlap_weights([pm[s] for s in names]), thr)
        labels = _components(w)
        apart = _upper(labels[:, None] != labels[None, :])  # pairs with no path: 'disconnected' is an answer
        rev = np.arange(len(names))[::-1]
        wr = w[np.ix_(rev, rev)]
        base = {}
        for r, fn in RULES.items():
            t0 = time.process_time()
            d = fn(w, k)
            acc[r]["cpu"] += time.process_time() - t0
            base[r] = d
            u = _upper(d)
            a = acc[r]
            a["pairs"] += u.size
            a["covered"] += int((~np.isnan(u)).sum())
            a["answered"] += int((~np.isnan(u) | (apart if r in WITH_DISCONNECTED else False)).sum())
            dr = fn(wr, k)[np.ix_(rev, rev)]  # reversed order, mapped back
            ur = _upper(dr)
            a["reorder_flip"] += int((np.isnan(u) != np.isnan(ur)).sum())
            both = ~np.isnan(u) & ~np.isnan(ur)
            if both.any():
                scale = max(float(np.nanmax(u)), 1e-300)
                a["reorder"].append(float(np.abs(u[both] - ur[both]).max()) / scale)
            upert = _upper(fn(wp, k))
            a["pert_flip"] += int((np.isnan(u) != np.isnan(upert)).sum())
            rk = _rank(u, upert)
            if rk:
                a["pert_sp"].append(rk[0])
        for r in RULES:
            rk = _rank(_upper(base["original"]), _upper(base[r]))
            if rk:
                acc[r]["sp"].append(rk[0])
                acc[r]["kt"].append(rk[1])
    return acc


def table(acc: dict[str, dict], title: str) -> str:
    rows = [
        f"**{title}**",
        "",
        "| rule | pairs with a number | answered (number or `disconnected`) | Spearman / Kendall vs original (median over classes) | reordering: max change "
        "(median, max over classes) · status flips | 1% perturbation: Spearman (median, min) · status flips "
        "| CPU s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r, a in acc.items():
        med = lambda v: f"{np.median(v):.3f}" if v else "–"  # noqa: E731
        rows.append(
            f"| `{r}` | {a['covered']:,} / {a['pairs']:,} ({100 * a['covered'] / max(a['pairs'], 1):.1f}%) "
            f"| {100 * a['answered'] / max(a['pairs'], 1):.1f}% "
            f"| {med(a['sp'])} / {med(a['kt'])} ({len(a['sp'])} classes) "
            f"| {med(a['reorder'])}, {max(a['reorder']) if a['reorder'] else 0:.3g} · {a['reorder_flip']:,} "
            f"| {med(a['pert_sp'])}, {min(a['pert_sp']) if a['pert_sp'] else float('nan'):.3f} · {a['pert_flip']:,} "
            f"| {a['cpu']:.2f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--artifact", required=True)
    ap.add_argument("--max-classes", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    art = Artifact.load(args.artifact)
    t0 = time.perf_counter()
    acc = study(art, args.max_classes, args.seed)
    n = len(art.classes()[: args.max_classes or None])
    print(
        table(
            acc,
            f"{args.artifact}: {n} classes, edge_threshold {art.options.edge_threshold}, "
            f"K = {art.options.spectral_dim}",
        )
    )
    print(
        f"\n({time.perf_counter() - t0:.1f} s wall; eigen-solver failures (graphs, incl. reordered and "
        f"perturbed copies): {FAILURES or 'none'})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
