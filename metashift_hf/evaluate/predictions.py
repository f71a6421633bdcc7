"""Per-image model outputs: computed here or read from a file of predictions made elsewhere."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..core.errors import InputFormatError, MissingImagesError
from ..core.fsutil import check_input_file, sha256_file
from ..core.options import OptionError
from ..models import Classifier, LabelMap, ModelSource, extended, find_source, load_model, tune_allocator


N_CLASSES = 1000


@dataclass
class HeadOutputs:
    """A classifier head's outputs for ``image_ids`` in that order: top-1 index (ImageNet-1k or the head's own
    labels) and, when known, the logits. Task-class predictions are :class:`metashift_hf.scoring.predictions.TaskPredictions`."""

    image_ids: list[str]
    top1: np.ndarray  # int64 (n,)
    logits: np.ndarray | None  # float32 (n, 1000) or None (index-only predictions files)

    def for_ids(self, ids: Sequence[str], source: str = "predictions") -> "HeadOutputs":
        """The same outputs reordered to ``ids``; every id must be present."""
        pos = {iid: i for i, iid in enumerate(self.image_ids)}
        missing = [i for i in ids if i not in pos]
        if missing:
            raise MissingImagesError(
                f"{source} has no prediction for {len(missing)} of the task's {len(ids)} images (e.g. {', '.join(missing[:5])})",
                "predict every image of the task (same image_id strings as the dataset's image_id column)",
                image_ids=missing,
            )
        idx = np.fromiter((pos[i] for i in ids), dtype=np.int64, count=len(ids))
        logits = None if self.logits is None else self.logits[idx]
        return HeadOutputs(list(ids), self.top1[idx], logits)


@dataclass
class PrecomputedPredictions:
    """A csv/parquet file with ``image_id`` plus ``imagenet_index`` (0-999) or 1,000 logits.

    Logits come either as one list column ``logits`` (parquet) or as columns ``logit_0`` …
    ``logit_999`` (csv or parquet). Restricted scoring needs logits.
    """

    path: Path
    predictions: HeadOutputs
    sha256: str
    # set when the outputs come from the zoo's logits cache: the model's own card and head labels
    model_card: dict[str, Any] | None = None
    labels: LabelMap | None = None

    @property
    def name(self) -> str:
        return self.model_card["name"] if self.model_card else f"predictions:{self.path.name}"

    def card(self) -> dict[str, Any]:
        if self.model_card is not None:
            return {**self.model_card, "logits_from": str(self.path)}
        return {
            "name": self.name,
            "kind": "predictions",
            "weights_sha256": None,
            "file_sha256": self.sha256,
            "preprocessing": "done elsewhere (precomputed predictions)",
            "has_logits": self.predictions.logits is not None,
        }

    @classmethod
    def read(cls, path: str | Path) -> "PrecomputedPredictions":
        import pandas as pd

        path = Path(path)
        fix = (
            "write a .csv or .parquet with a string column image_id and either imagenet_index (int 0-999), "
            "a list column logits (1000 floats) or columns logit_0..logit_999"
        )
        check_input_file(path, f"predictions file {path}", fix)
        suffix = path.suffix.lower()
        try:
            if suffix == ".csv":
                df = pd.read_csv(path, dtype={"image_id": str})
            elif suffix in (".parquet", ".pq"):
                df = pd.read_parquet(path)
            else:
                raise InputFormatError(f"predictions file {path} is neither .csv nor .parquet", fix)
        except InputFormatError:
            raise
        except Exception as exc:  # pandas/pyarrow parse errors vary by engine
            raise InputFormatError(f"cannot read predictions file {path}: {exc}", fix) from exc
        if "image_id" not in df.columns:
            raise InputFormatError(
                f"predictions file {path} has no image_id column (columns: {list(df.columns)[:8]})", fix
            )
        ids = [str(i) for i in df["image_id"]]
        dup = sorted(i for i, k in Counter(ids).items() if k > 1)
        if dup:
            raise InputFormatError(f"predictions file {path} repeats image_id {dup[:5]}", "keep one row per image")
        _one_kind_of_output(df, path)
        logits = _read_logits(df, path, fix)
        if logits is not None:
            top1 = logits.argmax(axis=1).astype(np.int64)
        elif "imagenet_index" in df.columns:
            col = pd.to_numeric(df["imagenet_index"], errors="coerce")
            bad = df["image_id"][col.isna() | (col < 0) | (col >= N_CLASSES) | (col != col.round())]
            if len(bad):
                raise InputFormatError(
                    f"predictions file {path}: imagenet_index is not an integer 0-999 for image_id {list(map(str, bad[:5]))}",
                    fix,
                )
            top1 = col.to_numpy().astype(np.int64)
        else:
            raise InputFormatError(f"predictions file {path} has neither imagenet_index nor logits", fix)
        return cls(path, HeadOutputs(ids, top1, logits), sha256_file(path))


def _one_kind_of_output(df, path: Path) -> None:
    """Refuse a file that gives the outputs twice (imagenet_index and logits, or logits both as a list column and as
    logit_<i> columns): one would be used and the other dropped without a word, and they may disagree (Z-28)."""
    given = [
        name
        for name, present in (
            ("imagenet_index", "imagenet_index" in df.columns),
            ("logits", "logits" in df.columns),
            ("logit_0..logit_999", any(str(c).startswith("logit_") for c in df.columns)),
        )
        if present
    ]
    if len(given) > 1:
        raise InputFormatError(
            f"predictions file {path} gives the model's outputs {len(given)} ways ({', '.join(given)} columns); "
            "which to score is ambiguous (one would be dropped without a word)",
            f"keep exactly one of them: imagenet_index (top-1 only) or the logits (top-1 is their argmax); "
            f"e.g. drop the {given[0]} column",
        )


def _read_logits(df, path: Path, fix: str) -> np.ndarray | None:
    cols = [f"logit_{i}" for i in range(N_CLASSES)]
    if "logits" in df.columns:
        rows = list(df["logits"])
        if any(r is None or len(r) != N_CLASSES for r in rows):
            raise InputFormatError(
                f"predictions file {path}: every logits entry must hold exactly {N_CLASSES} numbers", fix
            )
        arr = np.asarray([np.asarray(r, dtype=np.float32) for r in rows], dtype=np.float32).reshape(
            len(rows), N_CLASSES
        )
    elif cols[0] in df.columns:
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise InputFormatError(
                f"predictions file {path} lacks {len(missing)} logit columns (e.g. {missing[:3]})", fix
            )
        arr = df[cols].to_numpy(dtype=np.float32)
    else:
        return None
    if not np.isfinite(arr).all():
        raise InputFormatError(
            f"predictions file {path} has NaN or infinite logits", "write finite logits for every image"
        )
    return arr


class PredictionsSource(ModelSource):
    """``predictions:FILE``: outputs computed elsewhere, read instead of running a model."""

    name = "predictions"
    forms = ("predictions:FILE",)

    @staticmethod
    def load(rest: str, device: str, dtype: str) -> PrecomputedPredictions:
        return PrecomputedPredictions.read(rest)


# what evaluate accepts: every model source, and predictions files
EVAL_SOURCES = extended("model source", PredictionsSource)


def load_scorer(
    spec: Any, device: str = "cpu", dtype: str = "float32", image_size: int | None = None
) -> "Classifier | PrecomputedPredictions":
    """What evaluate scores: a model from the registry, or a predictions file (``predictions:FILE``).

    ``image_size``: the model is fed inputs of that side (``Classifier.at_image_size``); a predictions file's
    outputs were computed at whatever size made them, so it is refused with one. Loaded predictions (the zoo's
    logits of a model already scaled) pass as they are.
    The allocator is tuned here too (models.tune_allocator), so a model built in Python gets it as well.
    """
    tune_allocator()
    if isinstance(spec, PrecomputedPredictions):
        return spec
    if image_size is not None and isinstance(spec, str) and find_source(spec, EVAL_SOURCES)[0] is PredictionsSource:
        raise OptionError(
            f"image_size={image_size} cannot apply to {spec}: its outputs were computed already",
            "drop --image-size, or evaluate the model itself at that size",
        )
    loaded = spec if isinstance(spec, Classifier) else load_model(spec, device, dtype=dtype, sources=EVAL_SOURCES)
    return loaded if image_size is None else loaded.at_image_size(image_size)
