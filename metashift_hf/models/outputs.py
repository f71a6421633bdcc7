"""The one way to run a model to per-image outputs (logits or pre-logits features), with one cache key.

    from metashift_hf.models import load_model, outputs
    clf = load_model("timm:local-dir:./resnet")
    run = outputs.logits(clf)                      # or outputs.features(clf): the penultimate layer
    values, stats = outputs.cached(run, shas, read, cache=outputs.OutputCache(run, cache_dir))

evaluate (:func:`metashift_hf.evaluate.predict.predict`), the zoo (single process, ``--shard`` and torchrun
ranks, :mod:`metashift_hf.evaluate.distributed`) and training's cached features
(:mod:`metashift_hf.research.features`) all compute through :func:`compute` (batched, decoding overlapped)
and cache under :attr:`ModelOutputs.key`, made in one place (:func:`output_key`): the model's fingerprint
(weights, class and structure, configuration files, preprocessing, head labels, dtype, input size:
:meth:`Classifier.fingerprint`), which output (logits, or features of which layer) and :data:`OUTPUT_FORMAT`.
Rows are keyed by the sha256 of each image's bytes, so two datasets sharing image ids never share rows.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Sequence

import numpy as np

from ..core.errors import InputFormatError, MetashiftError
from ..core.fsutil import atomic_file
from ..core.names import path_component, terminal_safe
from ..core.parts import AGREE_ATOL, AGREE_RTOL, PartMismatchError, PartStore
from ..core.paths import cache_root
from . import base
from .base import Classifier, Preprocessing, require_torch
from .batches import PREFETCH_BATCHES, RunConfig, map_batches


# 3: the key covers the model's code and configuration (class, structure, config files; issue 37); caches made
# under an earlier format (logits/<fingerprint>, features/<name>-<key>) are never read again
OUTPUT_FORMAT = 3
Output = Literal["logits", "features"]
# the layer whose values are cached: the head's logits, Lite0's pooled last convolution, timm's pre-logits,
# or the input of the last Linear layer (torchvision, transformers, nn.Modules)
LAYERS = ("logits", "lite0-pool", "timm-pre-logits", "last-linear-input")


@dataclass(frozen=True)
class CacheConfig:
    """Where outputs are cached: under ``folder`` (None: the package cache, ``core.paths.cache_root``);
    ``use=False`` neither reads nor writes a cache (models are still run once per image)."""

    folder: str | Path | None = None
    use: bool = True


@dataclass(frozen=True)
class ModelOutputs:
    """What one model computes per image: ``run(prepared batch) -> (n, width)`` float32 values of ``layer``.
    ``key``: the cache key (:func:`output_key`; "" for a model without a weights checksum: never cached)."""

    classifier: Classifier
    output: Output
    layer: str
    width: int
    run: Callable[[list], np.ndarray] = field(repr=False)
    how: str
    key: str

    @property
    def name(self) -> str:
        return self.classifier.name

    def prepare(self, data: bytes) -> Any:
        return self.classifier.prepare(data)

    def card(self) -> dict[str, Any]:
        return {**self.classifier.card(), "output": self.output, "layer": self.layer, "output_key": self.key}


def output_key(clf: Classifier, output: Output, layer: str) -> str:
    """The one cache key of a model's outputs: sha256 of its fingerprint, the output and layer, and the format."""
    fingerprint = clf.fingerprint()
    if not fingerprint:
        return ""
    doc = {"format": OUTPUT_FORMAT, "model": fingerprint, "output": output, "layer": layer}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def logits(clf: Classifier) -> ModelOutputs:
    """``clf``'s head outputs (:meth:`Classifier.logits`: checked shape, finite)."""
    return ModelOutputs(
        clf, "logits", "logits", clf.labels.size, clf.logits, "the model's head", output_key(clf, "logits", "logits")
    )


def head_linear(torch: Any, clf: Classifier) -> tuple[Any, str]:
    """(the torch module of ``clf``, the qualified name of its head: the last Linear layer, inside the
    ``classifier`` of a transformers model). MetashiftError when it has none (a plain callable)."""
    module = clf.torch_module
    scope = "classifier" if clf.kind == "hf" and hasattr(module, "classifier") else ""
    found = (module.get_submodule(scope) if scope else module) if isinstance(module, torch.nn.Module) else None
    heads = [n for n, m in found.named_modules() if isinstance(m, torch.nn.Linear)] if found is not None else []
    if not heads or clf.weights_sha256 is None:
        raise MetashiftError(
            f"backbone {clf.name}: no torch module with a final Linear layer and a weights checksum "
            "to take penultimate features from",
            "use a model of the registry (efficientnet-lite0, hf:, timm:, torchvision:), "
            "or wrap your network with metashift_hf.models.from_module",
        )
    return module, ".".join(p for p in (scope, heads[-1]) if p)


def features(clf: Classifier) -> ModelOutputs:
    """``clf``'s pre-logits features. Lite0: the global average pool of its last convolution; timm:
    ``forward_head(forward_features(x), pre_logits=True)``; hf: the input of the last Linear of the model's
    ``classifier`` (transformers' pooled output, the CLS token, ...); torchvision and modules: the input of
    the last Linear layer (the final fc/classifier replaced by the identity)."""
    torch = require_torch()
    if clf.kind == "efficientnet-lite0":
        module = clf.forward
        layer, how, dim = (
            "lite0-pool",
            "global average pool of the last convolution (extract_features), BatchNorm folded",
            int(module._fc.in_features),
        )

        def extract(batch):
            return module.extract_features(batch).mean(dim=(2, 3))
    else:
        module, head_name = head_linear(torch, clf)
        head = module.get_submodule(head_name)
        module.eval()
        if clf.kind == "timm" and hasattr(module, "forward_head"):
            layer, how = "timm-pre-logits", "timm forward_head(forward_features(x), pre_logits=True)"
            dim = int(getattr(module, "head_hidden_size", None) or module.num_features)

            def extract(batch):
                return module.forward_head(module.forward_features(batch), pre_logits=True)
        else:
            layer, how, dim = (
                "last-linear-input",
                "the input of the model's last Linear layer (its penultimate layer)",
                int(head.in_features),
            )
            extract = _head_input(module, head)

    def run(prepared: list) -> np.ndarray:
        batch = clf.batch(prepared)
        with torch.inference_mode():
            out = extract(batch)
        return out.reshape(len(prepared), -1).float().cpu().numpy()

    return ModelOutputs(clf, "features", layer, dim, run, how, output_key(clf, "features", layer))


def _head_input(module: Any, head: Any) -> Callable[[Any], Any]:
    """A function batch -> the input of ``head`` (a Linear of ``module``) when ``module`` runs on the batch:
    the penultimate layer, as if the head were replaced by the identity."""

    def extract(batch):
        seen: list = []
        hook = head.register_forward_pre_hook(lambda _m, inputs: seen.append(inputs[0].detach()))
        try:
            module(batch)
        finally:
            hook.remove()
        return seen[-1]

    return extract


def cache_folder(outputs: ModelOutputs, cache_dir: str | Path | None = None) -> Path:
    """``<cache>/<output>/<model name as one safe folder name>-<key[:16]>``."""
    return cache_root(cache_dir) / outputs.output / f"{path_component(outputs.name)}-{outputs.key[:16]}"


class OutputCache:
    """One model's outputs (one :attr:`ModelOutputs.key`) by image sha256, in verified parts
    (:class:`metashift_hf.core.parts.PartStore`) plus ``model.json`` (the model's card).

    A run adds one part with what it computed, so runs never rewrite each other; a part that fails its
    checks is skipped with a warning, removed and its rows computed again. Only the ``wanted`` rows are held
    in memory (a model's cache grows with every zoo). ``width``: every part's (default: the outputs')."""

    def __init__(
        self,
        outputs: ModelOutputs | str,
        cache_dir: str | Path | None = None,
        *,
        wanted: Iterable[str] | None = None,
        width: int | None = None,
    ):
        key = outputs.key if isinstance(outputs, ModelOutputs) else outputs
        if not isinstance(key, str) or len(key) != 64:
            raise InputFormatError(
                "an outputs cache needs a model key (sha256 hex)",
                "models without a weights checksum (plain callables) are not cached",
            )
        self.key = key
        if isinstance(outputs, ModelOutputs):
            self.folder, self._card = cache_folder(outputs, cache_dir), outputs.card()
            width = outputs.width if width is None else width
        else:  # a bare key: a folder of its own (tests, tools)
            self.folder, self._card = cache_root(cache_dir) / "outputs" / key[:16], {}
        self._store = PartStore(self.folder, "part", "values", key, f"outputs cache {self.folder.name}")
        self._origin: dict[str, Path] = {}  # sha -> the part its row was read from
        self._rows, self.width = self._store.read(width, wanted, self._origin)

    def __contains__(self, sha: str) -> bool:
        return sha in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def part_of(self, sha: str) -> Path | None:
        """The part ``sha``'s row was read from (None: added by this process)."""
        return self._origin.get(sha)

    def get(self, shas: Iterable[str]) -> np.ndarray:
        rows = [self._rows[s] for s in shas]
        return np.stack(rows).astype(np.float32, copy=False) if rows else np.zeros((0, self.width or 0), np.float32)

    def add(self, shas: Sequence[str], values: np.ndarray) -> Path | None:
        """Store new rows as one part file; returns it (None when nothing was new)."""
        new = {s: row for s, row in zip(shas, values) if s not in self._rows}
        if not new:
            return None
        keys = sorted(new)
        block = np.stack([new[k] for k in keys]).astype(np.float32)
        if self.width is not None and block.shape[1] != self.width:
            raise InputFormatError(
                f"outputs cache {self.folder}: rows of width {block.shape[1]}, the model has {self.width} outputs",
                "a bug in the caller: store the model's own outputs",
            )
        path = self._store.write(keys, block)
        if self._card and not (self.folder / "model.json").is_file():
            with atomic_file(self.folder / "model.json", "w") as f:
                f.write(json.dumps({"key": self.key, "model": self._card}, indent=2, sort_keys=True, default=str))
                f.write("\n")
        self._rows.update(zip(keys, block))
        self.width = block.shape[1]
        return path


def compute(
    outputs: ModelOutputs, keys: Sequence[str], read: Callable[[str], bytes], settings: RunConfig = RunConfig()
) -> np.ndarray:
    """``outputs`` of the images ``keys`` (bytes from ``read(key)``), in order, ``settings.batch_size`` at a
    time: the one place a model is run over images."""
    desc = settings.desc or f"{outputs.output} {outputs.name}"
    return map_batches(
        outputs.prepare,
        outputs.run,
        keys,
        read,
        width=outputs.width,
        settings=replace(settings, desc=desc),
        device=outputs.classifier.device,
    )


# What the prepared inputs of one pass may hold in memory: every distinct preprocessing keeps (PREFETCH_BATCHES + 1)
# batches of float32 (3, crop, crop) arrays in flight (19 MB at 224 px in batches of 32), so 1 GiB lets ~50 distinct
# preprocessings share a decode. The models themselves are loaded anyway (a zoo loads each once) and run one after
# another on each batch: the activations of one model at a time, as in a one-model run.
PASS_INPUT_BYTES = 1 << 30
_UNKNOWN_SIDE = 224  # a preprocessing callable does not say its output size: counted as a 224 px crop


def preparation(run: ModelOutputs) -> Any:
    """What decides ``run``'s prepared input from the decoded image: equal keys give identical arrays, so the models
    that share one are fed one resize + crop. A :class:`Preprocessing` by its numbers (not the ``source`` note that
    says where they were read); any other callable by identity."""
    prep = run.classifier.preprocessing
    if isinstance(prep, Preprocessing):
        return replace(prep, source="")
    return ("rgb",) if prep is None else ("callable", id(prep))


def passes(runs: Sequence[ModelOutputs], batch_size: int) -> list[list[ModelOutputs]]:
    """``runs`` cut into passes, each decoding every image once for all its models: in order, a new pass when one
    more distinct preprocessing would put more than :data:`PASS_INPUT_BYTES` of prepared inputs in flight."""
    groups: list[list[ModelOutputs]] = []
    held: set = set()
    spent = 0
    for run in runs:
        key = preparation(run)
        prep = run.classifier.preprocessing
        side = prep.crop if isinstance(prep, Preprocessing) else _UNKNOWN_SIDE
        cost = 0 if key in held else (PREFETCH_BATCHES + 1) * batch_size * 3 * side * side * 4
        if groups and spent + cost > PASS_INPUT_BYTES:
            groups, held, spent = [*groups, []], set(), 0
            cost = (PREFETCH_BATCHES + 1) * batch_size * 3 * side * side * 4
        if not groups:
            groups.append([])
        groups[-1].append(run)
        held.add(key)
        spent += cost
    return groups


def compute_together(
    runs: Sequence[ModelOutputs], keys: Sequence[str], read: Callable[[str], bytes], settings: RunConfig = RunConfig()
) -> list[np.ndarray]:
    """Each of ``runs``' outputs over the images ``keys``, image-major: each image is decoded once
    (:func:`~metashift_hf.models.base.open_rgb`), resized and cropped once per distinct :func:`preparation`, and every
    model is fed the batch of its preparation. Batches are cut as in :func:`compute`, and each model runs its own
    :attr:`ModelOutputs.run` on them, so its values are those of a one-model :func:`compute`, bit for bit."""
    if len(runs) == 1:
        return [compute(runs[0], keys, read, settings)]
    order = list(dict.fromkeys(preparation(r) for r in runs))
    first = {k: next(r for r in runs if preparation(r) == k) for k in order}  # the model whose preprocessing runs
    slot = [order.index(preparation(r)) for r in runs]
    edges = np.cumsum([0] + [r.width for r in runs])

    def prepare(data: bytes) -> tuple:
        rgb = base.open_rgb(data)
        try:
            return tuple(first[k].classifier.prepare_rgb(rgb) for k in order)
        finally:
            rgb.close()

    def run_all(prepared: list) -> np.ndarray:
        return np.concatenate([r.run([p[s] for p in prepared]) for r, s in zip(runs, slot)], axis=1)

    names = ", ".join(r.name for r in runs)
    values = map_batches(
        prepare,
        run_all,
        keys,
        read,
        width=int(edges[-1]),
        settings=replace(settings, desc=settings.desc or f"{runs[0].output} {names}"),
        device=runs[0].classifier.device,
    )
    return [np.ascontiguousarray(values[:, edges[i] : edges[i + 1]]) for i in range(len(runs))]


CHECK_SAMPLE = 8  # cached rows recomputed per model and read (issue 46 D2): a forged part is unlikely to pass


def check_tolerance(device: str, dtype: str) -> tuple[float, float]:
    """(rtol, atol) within which a recomputed row must equal its cached one. An honest row recomputed in another
    batch moves in its last bits on a CPU in float32 (batch-dependent kernels: :data:`~metashift_hf.core.parts.
    AGREE_RTOL`); a GPU's kernels (TF32 convolutions, algorithms chosen per batch size) and bfloat16 move more."""
    if dtype == "bfloat16":
        return 1e-1, 1e-1
    return (AGREE_RTOL, AGREE_ATOL) if device == "cpu" else (1e-2, 1e-2)


@dataclass(frozen=True)
class CacheCheck:
    """What :func:`check_cached` recomputed: ``checked`` cached rows (a sample drawn with ``seed``), agreeing within
    ``rtol``/``atol`` (:func:`check_tolerance` for ``device``); ``max_abs_diff`` the largest difference seen."""

    checked: int
    of: int  # cached rows read
    seed: int
    device: str
    rtol: float
    atol: float
    max_abs_diff: float

    def card(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "of": self.of,
            "seed": self.seed,
            "device": self.device,
            "rtol": self.rtol,
            "atol": self.atol,
            "max_abs_diff": self.max_abs_diff,
        }


def check_cached(
    outputs: ModelOutputs,
    cache: OutputCache,
    shas: Sequence[str],
    read: Callable[[str], bytes],
    settings: RunConfig = RunConfig(),
    *,
    seed: int = 0,
    sample: int = CHECK_SAMPLE,
) -> CacheCheck:
    """Recompute ``sample`` of the cached rows ``shas`` (drawn with ``seed`` from the sorted keys) and compare them
    with the cache: a part whose rows the model does not give (every image "airliner", its checksum recomputed) is
    refused with :class:`PartMismatchError` naming it. A part forging a fraction f of the rows read passes with
    probability about (1 - f) ** sample."""
    rtol, atol = check_tolerance(outputs.classifier.device, outputs.classifier.dtype)
    pool = sorted(set(shas))
    if not pool or sample < 1:
        return CacheCheck(0, len(pool), seed, outputs.classifier.device, rtol, atol, 0.0)
    rng = np.random.default_rng(seed)
    picked = [pool[i] for i in sorted(rng.choice(len(pool), size=min(sample, len(pool)), replace=False))]
    fresh = compute(outputs, picked, read, replace(settings, batch_size=len(picked), progress=False))
    held = cache.get(picked)
    diff = np.abs(fresh.astype(np.float64) - held)
    bad = np.flatnonzero((diff > atol + rtol * np.abs(fresh)).any(axis=1))
    if len(bad):
        sha = picked[int(bad[0])]
        part = cache.part_of(sha)
        raise PartMismatchError(
            f"outputs cache {terminal_safe(cache.folder)}: the part {terminal_safe(part.name if part else '?')} "
            f"holds values for image {sha[:16]}… that model {terminal_safe(outputs.name)} does not give when "
            f"recomputed (largest difference {float(diff[bad[0]].max()):.4g}; the tolerance on "
            f"{outputs.classifier.device} {outputs.classifier.dtype} is rtol {rtol:g}, atol {atol:g}): "
            f"{len(bad)} of {len(picked)} rows checked disagree",
            "a cache is trusted input: remove that part (its rows are computed again), or use a cache folder "
            "only you write (--cache-dir)",
        )
    return CacheCheck(len(picked), len(pool), seed, outputs.classifier.device, rtol, atol, float(diff.max()))


@dataclass(frozen=True)
class Counts:
    """Distinct images run through the model by this call, and those whose outputs came from the cache."""

    computed: int
    cached: int


def cached(
    outputs: ModelOutputs,
    ids: Sequence[str],
    read: Callable[[str], bytes],
    settings: RunConfig = RunConfig(),
    cache: OutputCache | None = None,
    *,
    key: Callable[[str], str] = str,
) -> tuple[np.ndarray, Counts]:
    """``outputs`` of the images ``ids`` (bytes from ``read(id)``), in order: rows are cached by ``key(id)`` (the
    sha256 of the image's bytes), so an image is computed once (:func:`compute`, errors naming its id) whatever
    ids it has, and the new rows are added to ``cache`` as one part."""
    keys = {i: key(i) for i in ids}
    first: dict[str, str] = {}  # key -> the first id with it, among those not cached
    for i in ids:
        if (cache is None or keys[i] not in cache) and keys[i] not in first:
            first[keys[i]] = i
    todo = list(first.values())
    new = compute(outputs, todo, read, settings) if todo else np.zeros((0, outputs.width), np.float32)
    if cache is not None and todo:
        cache.add([keys[i] for i in todo], new)
    rows: dict[str, np.ndarray] = dict(zip(first, new))
    have = [k for k in dict.fromkeys(keys.values()) if k not in rows]
    if have:  # only with a cache: without one every image is computed
        rows.update(zip(have, cache.get(have)))  # type: ignore[union-attr]
    values = np.stack([rows[keys[i]] for i in ids]) if len(ids) else np.zeros((0, outputs.width), np.float32)
    return values.astype(np.float32, copy=False), Counts(len(todo), len(have))


__all__ = [
    "OUTPUT_FORMAT",
    "LAYERS",
    "CHECK_SAMPLE",
    "CacheCheck",
    "CacheConfig",
    "Counts",
    "ModelOutputs",
    "OutputCache",
    "RunConfig",
    "cache_folder",
    "cached",
    "check_cached",
    "check_tolerance",
    "compute",
    "compute_together",
    "features",
    "head_linear",
    "logits",
    "output_key",
    "passes",
    "preparation",
]
