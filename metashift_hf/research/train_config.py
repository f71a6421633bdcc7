"""What to train: :class:`TrainConfig` (method, probe, seeds, epochs, ...), the training seeds
(:func:`parse_seeds`) and the TOML file that holds the flags (:func:`config_toml`, :func:`load_config`)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

import numpy as np

from ..core import options as opt
from ..core.errors import UnknownNameError, short_repr
from .algorithms import SAMPLINGS, SELECTION_TEXT, SELECTIONS, algorithm_info, resolve_hparams


Method = Literal["erm", "reweight", "groupdro", "irm", "coral", "mixup", "jtt", "dfr"]
Probe = Literal["linear", "finetune"]
PROBES: tuple[str, ...] = ("linear", "finetune")
# (epochs, lr, batch size) per probe. Fine-tuning: the seed paper's Adam / 5e-5 / 32.
DEFAULTS = {"linear": (50, 1e-3, 64), "finetune": (10, 5e-5, 32)}


@dataclass(frozen=True)
class TrainConfig:
    """What to train; ``None`` epochs/lr/batch_size take the probe's defaults (:data:`DEFAULTS`)."""

    method: Method = "erm"
    probe: Probe = "linear"
    seeds: "int | str | Sequence[int]" = 1  # a count N (seeds 0..N-1), "3-5", "0,2,7" or a list
    device: str = "cpu"
    epochs: int | None = None
    lr: float | None = None
    batch_size: int | None = None
    weight_decay: float = 0.0
    image_size: int | None = None  # linear probe: backbone input size (None: the model's 224)
    select: str | None = None  # average | worst-group | oracle; None: the method's default (algorithms)
    # shuffle | group-balanced (the MetaShift paper's loader) | domain-balanced (DomainBed's); None: the caller's
    # default (shuffle for train/compare, group-balanced for the paper experiments)
    sampling: str | None = None
    hparams: Mapping[str, float] = field(default_factory=dict)  # overrides of algorithms.HPARAMS[method]
    backbone: str = "efficientnet-lite0"  # or a registry model: features.BACKBONE_FORMS

    @property
    def seed_list(self) -> tuple[int, ...]:
        return parse_seeds(self.seeds)

    @property
    def selection_rule(self) -> str:
        return (
            "model selection: "
            + SELECTION_TEXT[self.select or algorithm_info(self.method).default_selection]
            + "; ties go to the earlier epoch"
        )

    def resolved(self) -> "TrainConfig":
        info = algorithm_info(self.method)  # an unknown method is refused here
        if self.select is not None and self.select not in SELECTIONS:
            raise UnknownNameError(f"unknown selection {self.select!r}", f"use one of: {', '.join(SELECTIONS)}")
        if self.sampling is not None and self.sampling not in SAMPLINGS:
            raise UnknownNameError(f"unknown sampling {self.sampling!r}", f"use one of: {', '.join(SAMPLINGS)}")
        if self.probe not in PROBES:
            raise UnknownNameError(f"unknown probe {self.probe!r}", f"use one of: {', '.join(PROBES)}")
        if not isinstance(self.device, str) or not self.device:
            raise opt.OptionError(f"device {self.device!r} is not a device name", "use cpu, cuda or cuda:N")
        epochs, lr, bs = DEFAULTS[self.probe]
        # None takes the probe's default; anything given is checked (0, NaN, inf and negatives refused)
        return replace(
            self,
            seeds=parse_seeds(self.seeds),
            select=self.select or info.default_selection,
            sampling=self.sampling or "shuffle",
            hparams=resolve_hparams(self.method, self.hparams),
            epochs=epochs if self.epochs is None else opt.positive_int(self.epochs, "epochs"),
            lr=lr if self.lr is None else opt.positive_float(self.lr, "lr"),
            batch_size=bs if self.batch_size is None else opt.positive_int(self.batch_size, "batch_size"),
            weight_decay=opt.non_negative_float(self.weight_decay, "weight_decay"),
            image_size=opt.optional(opt.image_size, self.image_size, "image_size"),
        )  # evaluate's one range


def parse_seeds(spec: "int | str | Sequence[int]") -> tuple[int, ...]:
    """Training seeds: a count N (0..N-1), ``"a-b"`` (inclusive), ``"0,2,5-7"`` or a list; sorted, distinct.

    Each seed is in [0, 2**32 - 1] (:func:`core.options.seed`) and there are at most
    :data:`core.options.SEEDS_MAX` of them, both checked before any list is built (``0-1000000000`` is
    refused at once instead of filling memory)."""
    if isinstance(spec, bool):
        raise opt.OptionError(f"seeds {spec!r} is not a seed list", "use a count (3), a range (3-5) or a list (0,2,7)")
    if isinstance(spec, (int, np.integer)):
        return tuple(range(opt.seed_count(spec, "seeds")))
    if isinstance(spec, str):
        text = spec.strip()
        if text.isdigit():
            return tuple(range(opt.seed_count(text, "seeds")))  # the text checked first: int() of 5000 digits raises
        out: set[int] = set()
        for part in text.split(","):
            a, sep, b = part.strip().partition("-")
            if not (a.isdigit() and (not sep or b.isdigit())):
                raise opt.OptionError(
                    f"seeds {spec!r}: {part.strip()!r} is not a seed or a range",
                    "use a count (3), a range (3-5) or a list (0,2,5-7) of non-negative integers",
                )
            lo = opt.seed(a, "seeds")
            hi = opt.seed(b, "seeds") if sep else lo
            if hi < lo:
                raise opt.OptionError(
                    f"seeds {spec!r}: the range {part.strip()} is empty", "write it low-high, e.g. 3-5"
                )
            _bound_seeds(spec, len(out) + hi - lo + 1)  # before the range is built
            out.update(range(lo, hi + 1))
        return tuple(sorted(out))
    if not isinstance(spec, (list, tuple, range, np.ndarray)):  # 1.5, None, a dict: no raw TypeError
        raise opt.OptionError(
            f"seeds {spec!r} is not a count, a range or a list of seeds", "use e.g. 3, '3-5' or [0, 2, 7]"
        )
    _bound_seeds(spec, len(spec))
    if not len(spec) or any(isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)) for s in spec):
        raise opt.OptionError(f"seeds {short_repr(spec)} is not a list of non-negative integers", "use e.g. [0, 1, 2]")
    return tuple(sorted({opt.seed(s, "seeds") for s in spec}))


def _bound_seeds(spec: Any, n: int) -> None:
    if n > opt.SEEDS_MAX:
        raise opt.OptionError(
            f"seeds {short_repr(spec)} asks for {n} seeds, more than the maximum {opt.SEEDS_MAX}",
            f"ask for at most {opt.SEEDS_MAX} seeds per call, e.g. --seeds 5 or --seeds 0-9",
        )


# -- the config file: TOML with the flags' names (tomllib reads it; this small writer writes it) ------

CONFIG_KEYS: tuple[str, ...] = (
    "method",
    "probe",
    "seeds",
    "device",
    "epochs",
    "lr",
    "batch_size",
    "weight_decay",
    "image_size",
    "select",
    "sampling",
    "backbone",
)


def config_toml(cfg: TrainConfig) -> str:
    """``cfg`` as TOML (keys as :data:`CONFIG_KEYS`, the method's hyper-parameters under ``[hparams]``)."""
    lines = [
        "# metashift-hf train configuration: `metashift-hf train --config-file THIS` (flags given on the",
        "# command line win over it); the same keys as TrainConfig.",
    ]
    for key in CONFIG_KEYS:
        value = getattr(cfg, key)
        if value is None:
            continue
        if isinstance(value, (tuple, list)):
            value = "[" + ", ".join(str(int(v)) for v in value) + "]"
        elif isinstance(value, str):
            value = json.dumps(value)
        elif isinstance(value, float):
            value = repr(value)
        lines.append(f"{key} = {value}")
    if cfg.hparams:
        lines += ["", "[hparams]"] + [f"{k} = {float(v)!r}" for k, v in sorted(cfg.hparams.items())]
    return "\n".join(lines) + "\n"


def load_config(path: "str | os.PathLike") -> dict[str, Any]:
    """TrainConfig keyword arguments from a TOML file; unknown keys and wrong types are refused."""
    import tomllib  # standard library from Python 3.11

    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise opt.OptionError(
            f"config file {p} does not exist", "pass a TOML file written by `train` (config.toml)"
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise opt.OptionError(
            f"config file {p} is not valid TOML: {exc}", "fix the file (key = value lines)"
        ) from None
    unknown = sorted(set(raw) - set(CONFIG_KEYS) - {"hparams"})
    if unknown:
        raise opt.OptionError(
            f"config file {p}: unknown key(s) {', '.join(unknown)}", f"use only: {', '.join(CONFIG_KEYS)}, [hparams]"
        )
    hp = raw.get("hparams", {})
    if not isinstance(hp, dict):
        raise opt.OptionError(f"config file {p}: hparams must be a table", "write [hparams] then name = value lines")
    for key in ("method", "probe", "device", "select", "sampling", "backbone"):
        if key in raw and not isinstance(raw[key], str):
            raise opt.OptionError(f"config file {p}: {key} = {raw[key]!r} must be a string", f'write {key} = "..."')
    return {**{k: v for k, v in raw.items() if k != "hparams"}, **({"hparams": hp} if hp else {})}


__all__ = ["TrainConfig", "parse_seeds", "config_toml", "load_config", "CONFIG_KEYS", "PROBES", "DEFAULTS"]
