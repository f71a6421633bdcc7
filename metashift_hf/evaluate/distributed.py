"""The zoo's model passes past one process: torch.distributed ranks and ``--shard i/n`` job arrays.

Every process of a run plans the same batches: the zoo's distinct images sorted by sha256, cut into
``batch_size`` batches, and takes batches ``index, index + count, ...`` (whole batches, so each image
runs in exactly the batch a single process would run it in, and its logits are the same bit for bit).
What a process computes goes into the content-addressed outputs cache (:mod:`metashift_hf.models.outputs`) as its own part,
so processes never write the same file; whoever scores reads every part back.

- ``torchrun`` / ``accelerate launch`` (``WORLD_SIZE`` > 1 in the environment): the ranks plan on the
  images the cache lacks (read by all before any rank writes: one barrier), compute their batches, write
  their parts, wait for each other, and rank 0 scores and writes the leaderboard. The process group is
  gloo whatever the device: it only carries barriers and a small check that every rank planned the same
  images, models and batch size (a rank that sees other images refuses before any model pass).
- ``--shard i/n``: independent processes (Slurm / Kubernetes job arrays) with no connection to each
  other, so no common view of the cache: each plans on *all* the images and computes those of its batches
  with any image missing from the cache (in whole batches); a later plain run over the same cache scores
  and writes the leaderboard without running any model.

Multi-node runs need ``--cache-dir`` on a file system every node sees.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..core import options as opt
from ..core.errors import InputFormatError, MetashiftError
from ..models import Classifier, OutputCache, outputs


logger = logging.getLogger(__name__)

TORCH = "torch.distributed"
SHARD = "shard"
SINGLE = "single"
# a barrier waits for the slowest rank's whole model pass: generous, and overridable for very large zoos
BARRIER_TIMEOUT_ENV = "METASHIFT_HF_DIST_TIMEOUT_S"
DEFAULT_BARRIER_TIMEOUT_S = 6 * 3600


@dataclass(frozen=True)
class Part:
    """This process's share of the zoo's batches: ``index`` of ``count``, and how the share was given."""

    index: int = 0
    count: int = 1
    how: str = SINGLE  # SINGLE | TORCH | SHARD

    @property
    def scores(self) -> bool:
        """Whether this process scores the tasks and writes the leaderboard (a shard never does)."""
        return self.how == SINGLE or (self.how == TORCH and self.index == 0)

    def label(self) -> str:
        return (
            "single process"
            if self.how == SINGLE
            else f"{'rank' if self.how == TORCH else 'shard'} {self.index}/{self.count}"
        )


def launched_world() -> tuple[int, int, int] | None:
    """(rank, world size, local rank) when started by torchrun / accelerate launch with several processes."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        raise InputFormatError(
            "WORLD_SIZE, RANK or LOCAL_RANK in the environment is not an integer",
            "launch with torchrun / accelerate launch, or unset them for a single process",
        ) from None
    return (rank, world, local) if world > 1 else None


def choose_part(shard: Any = None) -> Part:
    """``--shard i/n`` if given, else the torch.distributed rank if launched so, else a single process."""
    world = launched_world()
    if shard is not None:
        if world is not None:
            raise InputFormatError(
                "--shard splits a zoo over independent jobs; this process was started by a "
                "distributed launcher (WORLD_SIZE > 1)",
                "use either torchrun / accelerate launch (the ranks split the images) or --shard i/n",
            )
        index, count = opt.shard(shard, "shard")
        return Part(index, count, SHARD)
    if world is not None:
        return Part(world[0], world[1], TORCH)
    return Part()


def rank_device(device: str, part: Part) -> str:
    """A distributed rank on ``cuda`` (no index) uses its node-local GPU, ``cuda:LOCAL_RANK``."""
    if part.how == TORCH and device == "cuda":
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return device


def check_part(part: Part, *, use_cache: bool, models: Sequence[Classifier]) -> None:
    """Several processes meet only in the logits cache: without it, or for a model it cannot key, they cannot."""
    if part.how == SINGLE:
        return
    if not use_cache:
        raise InputFormatError(
            f"--no-cache with a zoo split over processes ({part.label()})",
            "drop --no-cache: the processes pass their logits through the cache (--cache-dir)",
        )
    unkeyed = [m.name for m in models if not m.fingerprint()]
    if unkeyed:
        raise InputFormatError(
            f"model {unkeyed[0]} has no weights fingerprint, so its logits cannot be cached "
            f"and a zoo split over processes ({part.label()}) cannot share them",
            "run it in a single process, or give it weights with a checksum",
        )


def batches(shas: Sequence[str], batch_size: int) -> list[list[str]]:
    """The sorted images cut into batches: the same cut in every process of a run."""
    ordered = sorted(shas)
    return [ordered[i : i + batch_size] for i in range(0, len(ordered), batch_size)]


def share(shas: Sequence[str], batch_size: int, part: Part) -> list[list[str]]:
    """Batches ``index, index + count, ...``: whole batches, interleaved so every process gets a like share."""
    return batches(shas, batch_size)[part.index :: part.count]


class Group:
    """The gloo process group of a torchrun / accelerate launch (a no-op for a single process or a shard)."""

    def __init__(self, part: Part):
        self.part = part
        self._dist: Any = None
        self._made = False  # the group is ours to destroy (accelerate may have made one already)

    def __enter__(self) -> "Group":
        if self.part.how == TORCH:
            import torch.distributed as dist  # torch only when launched distributed

            if not dist.is_available():
                raise MetashiftError(
                    "this torch has no torch.distributed", "install a torch build with distributed support"
                )
            if not dist.is_initialized():  # accelerate may have made one already
                seconds = int(os.environ.get(BARRIER_TIMEOUT_ENV, DEFAULT_BARRIER_TIMEOUT_S))
                dist.init_process_group(
                    "gloo",
                    init_method="env://",
                    rank=self.part.index,
                    world_size=self.part.count,
                    timeout=timedelta(seconds=seconds),
                )
                self._made = True
            self._dist = dist
        return self

    def __exit__(self, *exc: Any) -> bool:
        if self._made and self._dist.is_initialized():
            self._dist.destroy_process_group()
        return False

    def barrier(self) -> None:
        if self._dist is not None:
            self._dist.barrier()

    def agree(self, what: str, value: str) -> None:
        """Every rank holds the same ``value`` (a digest of its plan), else every rank refuses."""
        if self._dist is None:
            return
        seen: list[Any] = [None] * self.part.count
        self._dist.all_gather_object(seen, value)
        if len(set(seen)) != 1:
            raise InputFormatError(
                f"the ranks planned different {what} (rank {self.part.index} differs from another)",
                "give every rank the same --model, --tasks, --images, --artifact and --batch-size "
                "(on several nodes: the same files at the same paths)",
            )


def plan_digest(shas: Sequence[str], models: Sequence[Classifier], batch_size: int) -> str:
    keys = [outputs.logits(m).key or m.name for m in models]
    doc = {"images": sorted(shas), "models": keys, "batch_size": batch_size}
    return hashlib.sha256(json.dumps(doc).encode()).hexdigest()


@dataclass(frozen=True)
class Images:
    """The zoo's distinct images: ``wanted`` maps each image's sha256 to where it is, ``read(sha)`` gives its bytes."""

    wanted: Mapping[str, Any]
    read: Callable[[str], bytes]


@dataclass
class ModelLogits:
    """One model's logits for the zoo's images in this process: computed here, or read from the cache."""

    computed: int  # images run through the model in this process
    cached: int  # images whose logits were in the cache when this process looked
    rows: dict[str, np.ndarray]  # sha -> logits (empty in a process that does not score)
    cache: OutputCache | None

    def block(self, shas: Sequence[str]) -> np.ndarray:
        return np.stack([self.rows[s] for s in shas]).astype(np.float32)


def model_logits(
    clf: Classifier, images: Images, part: Part, group: Group, settings: outputs.RunConfig, cache: outputs.CacheConfig
) -> ModelLogits:
    """This process's share of ``clf`` over the zoo's images, through the one model-output path
    (:mod:`metashift_hf.models.outputs`: its cache key and :func:`~metashift_hf.models.outputs.compute`);
    every row when this process scores."""
    run = outputs.logits(clf)
    store = OutputCache(run, cache.folder, wanted=images.wanted) if (cache.use and run.key) else None
    shas = sorted(images.wanted)
    have = [s for s in shas if store is not None and s in store]
    if part.how == SHARD:  # no common view of the cache: whole batches of all images, those with a gap
        mine = [b for b in share(shas, settings.batch_size, part) if store is None or any(s not in store for s in b)]
    else:
        group.barrier()  # every rank has read the cache before any rank writes a part: all plan the same gaps
        todo = [s for s in shas if store is None or s not in store]
        mine = share(todo, settings.batch_size, part)
    todo_mine = [s for b in mine for s in b]
    rows: dict[str, np.ndarray] = {}
    if todo_mine:
        desc = f"zoo {clf.name}" + ("" if part.how == SINGLE else f" ({part.label()})")
        new = outputs.compute(run, todo_mine, images.read, replace(settings, desc=desc))
        if store is not None:
            store.add(todo_mine, new)
        rows.update(zip(todo_mine, new))
    if part.how == TORCH:
        group.barrier()  # every rank's part is on disk
        if part.scores:  # the other ranks' rows, read back (and checked) from their parts
            store = OutputCache(run, cache.folder, wanted=images.wanted)
            absent = [s for s in shas if s not in store]
            if absent:
                raise MetashiftError(
                    f"{len(absent)} image(s) of model {clf.name} are in no rank's cache part",
                    "put --cache-dir on a file system every node sees (all ranks write their parts there)",
                )
    if not part.scores:
        rows = {}
    elif store is not None:  # holds what was cached, what this process added and (rank 0) the other ranks' parts
        rows = dict(zip(shas, store.get(shas)))
    return ModelLogits(len(todo_mine), len(have), rows, store)
