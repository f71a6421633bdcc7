"""The one table of model sources: ``--model`` strings are looked up here, never in an if/elif chain.

A source is a small class registered in :data:`MODEL_SOURCES` (the project's one registry idiom,
:class:`metashift_hf.core.registry.Registry`) with ``name`` (the exact name, or the prefix before ``:``),
``forms`` (how it is written: every spelling the docs and ``--help`` show comes from here), ``extra``
(the pip extra it needs) and ``load(rest, device, dtype)``. An exact source (``efficientnet-lite0``)
matches the whole string, the others the part before the first ``:`` (``hf:REPO``). Callers that accept
more (evaluate's ``predictions:FILE``) register their sources in a registry of their own that holds these
too (:func:`extended`).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

from ..core.errors import UnknownNameError
from ..core.registry import Registry
from .base import Classifier, Dtype, check_dtype
from .ecosystem import from_callable, hf_model, timm_model, torchvision_model
from .lite0 import efficientnet_lite0
from .runtime import tune_allocator


class ModelSource:
    """Where models of one kind come from. ``exact``: the whole --model string is the name."""

    name: ClassVar[str]
    forms: ClassVar[tuple[str, ...]]
    extra: ClassVar[str] = ""
    exact: ClassVar[bool] = False

    @staticmethod
    def load(rest: str, device: str, dtype: Dtype) -> Any:
        raise NotImplementedError


MODEL_SOURCES: Registry[type[ModelSource]] = Registry("model source", "")


@MODEL_SOURCES.register
class Lite0Source(ModelSource):
    name = "efficientnet-lite0"
    forms = ("efficientnet-lite0",)
    extra = "eval"
    exact = True

    @staticmethod
    def load(rest: str, device: str, dtype: Dtype) -> Classifier:
        return efficientnet_lite0(device, dtype=dtype)


@MODEL_SOURCES.register
class HFSource(ModelSource):
    name = "hf"
    forms = ("hf:REPO_OR_FOLDER",)
    extra = "hf"
    load = staticmethod(hf_model)


@MODEL_SOURCES.register
class TimmSource(ModelSource):
    name = "timm"
    forms = ("timm:NAME", "timm:hf-hub:REPO", "timm:local-dir:FOLDER")
    extra = "timm"
    load = staticmethod(timm_model)


@MODEL_SOURCES.register
class TorchvisionSource(ModelSource):
    name = "torchvision"
    forms = ("torchvision:NAME",)
    extra = "torchvision"
    load = staticmethod(torchvision_model)


def extended(what: str, *more: type[ModelSource]) -> Registry[type[ModelSource]]:
    """A registry of every model source plus ``more`` (e.g. evaluate's ``predictions:FILE``)."""
    table: Registry[type[ModelSource]] = Registry(what, "")
    for source in (*MODEL_SOURCES.values(), *more):
        table.register(source)
    return table


def model_forms(sources: Registry[type[ModelSource]] | None = None) -> str:
    """Every spelling of a --model string, ``" | "``-joined (for --help, errors and docs)."""
    return " | ".join(f for s in (sources or MODEL_SOURCES).values() for f in s.forms)


def find_source(spec: str, sources: Registry[type[ModelSource]] | None = None) -> tuple[type[ModelSource], str]:
    """The source of a --model string and the part after its prefix; UnknownNameError before any loading."""
    table = sources or MODEL_SOURCES
    if isinstance(spec, str):
        if spec in table and table[spec].exact:
            return table[spec], ""
        prefix, sep, rest = spec.partition(":")
        if sep and rest and prefix in table and not table[prefix].exact:
            return table[prefix], rest
    raise UnknownNameError(f"unknown --model {spec!r}", f"use one of: {model_forms(table)}")


def load_model(
    spec: str | Callable | Classifier,
    device: str = "cpu",
    *,
    dtype: str = "float32",
    sources: Registry[type[ModelSource]] | None = None,
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
