"""The one table of model sources: ``--model`` strings are looked up here, never in an if/elif chain.

A source is a small class with ``form`` (how it is written), ``extra`` (the pip extra it needs) and
``load(rest, device, dtype)``. An exact name (``efficientnet-lite0``) is looked up first, then the
part before ``:`` (``hf:REPO``). A new source is a subclass plus an entry in :data:`MODEL_SOURCES`;
callers that accept more (evaluate's ``predictions:FILE``) pass an extended mapping.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..core.errors import UnknownNameError
from .base import Classifier, Dtype, check_dtype
from .ecosystem import from_callable, hf_model, timm_model, torchvision_model
from .lite0 import efficientnet_lite0
from .runtime import tune_allocator


@dataclass(frozen=True)
class ModelSource:
    """Where models of one kind come from. ``exact``: the whole --model string is the name."""

    key: str
    form: str
    extra: str
    exact: bool = False

    def load(self, rest: str, device: str, dtype: Dtype) -> Any:
        raise NotImplementedError


@dataclass(frozen=True)
class _Source(ModelSource):
    loader: Callable[..., Any] = lambda rest, device, dtype: None

    def load(self, rest: str, device: str, dtype: Dtype) -> Any:
        return self.loader(rest, device, dtype)


def _lite0(rest: str, device: str, dtype: Dtype) -> Classifier:
    return efficientnet_lite0(device, dtype=dtype)


MODEL_SOURCES: dict[str, ModelSource] = {
    s.key: s
    for s in (
        _Source("efficientnet-lite0", "efficientnet-lite0", "eval", True, _lite0),
        _Source("hf", "hf:REPO_OR_FOLDER", "hf", False, hf_model),
        _Source("timm", "timm:NAME", "timm", False, timm_model),
        _Source("torchvision", "torchvision:NAME", "torchvision", False, torchvision_model),
    )
}


def model_forms(sources: Mapping[str, ModelSource] | None = None) -> str:
    return " | ".join(s.form for s in (sources or MODEL_SOURCES).values())


def find_source(spec: str, sources: Mapping[str, ModelSource] | None = None) -> tuple[ModelSource, str]:
    """The source of a --model string and the part after its prefix; UnknownNameError before any loading."""
    table = sources or MODEL_SOURCES
    exact = table.get(spec)
    if exact is not None and exact.exact:
        return exact, ""
    prefix, sep, rest = spec.partition(":")
    source = table.get(prefix)
    if sep and rest and source is not None and not source.exact:
        return source, rest
    raise UnknownNameError(f"unknown --model {spec!r}", f"use one of: {model_forms(table)}")


def load_model(
    spec: str | Callable | Classifier,
    device: str = "cpu",
    *,
    dtype: str = "float32",
    sources: Mapping[str, ModelSource] | None = None,
) -> Any:
    """A loaded model: a :class:`Classifier` for every built-in source (or what an extra source returns).

    ``spec``: a --model string, a Classifier (returned as is) or a callable list[PIL.Image] -> logits.
    The glibc allocator is tuned first (runtime.tune_allocator), before the model's memory is taken.
    """
    if isinstance(spec, Classifier):
        return spec
    if not isinstance(spec, str):
        return from_callable(spec)
    source, rest = find_source(spec, sources)
    dtype = check_dtype(dtype)
    tune_allocator()
    return source.load(rest, device, dtype)
