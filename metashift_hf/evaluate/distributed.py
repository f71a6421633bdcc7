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
# the ranks meeting at the start (every rank launched, the address reachable) takes seconds when all is well:
# a rank that was never started or a wrong address is reported after minutes, not after the 6 h barrier timeout
RENDEZVOUS_TIMEOUT_ENV = "METASHIFT_HF_RENDEZVOUS_TIMEOUT_S"
DEFAULT_RENDEZVOUS_TIMEOUT_S = 300
_LAUNCH_FIX = "launch with torchrun / accelerate launch (they set WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT), or unset WORLD_SIZE for a single process"


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


def _env_int(name: str, default: int | None, low: int) -> int:
    """An integer launch variable (>= ``low``); a clear error when it is missing (no default) or malformed."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        if default is None:
            raise InputFormatError(f"{name} is not set in the environment of a distributed launch", _LAUNCH_FIX)
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise InputFormatError(f"{name}={raw!r} in the environment is not an integer", _LAUNCH_FIX) from None
    if value < low:
        raise InputFormatError(f"{name}={value} in the environment is below {low}", _LAUNCH_FIX)
    return value


def launched_world() -> tuple[int, int, int] | None:
    """(rank, world size, local rank) when started by torchrun / accelerate launch with several processes.

    Checked before any work: with WORLD_SIZE > 1, RANK must be set and below WORLD_SIZE (a rank that cannot
    exist would wait for ever), and MASTER_ADDR / MASTER_PORT must be set (torch's env:// rendezvous)."""
    world = _env_int("WORLD_SIZE", 1, 1)
    if world == 1:
        return None
    rank, local = _env_int("RANK", None, 0), _env_int("LOCAL_RANK", 0, 0)
    if rank >= world:
        raise InputFormatError(
            f"RANK={rank} with WORLD_SIZE={world}: ranks are 0..{world - 1}, so this one would wait for ever",
            _LAUNCH_FIX,
        )
    missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(v, "").strip()]
    if missing:
        raise InputFormatError(
            f"WORLD_SIZE={world} but {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set: the ranks "
            "have no address to meet at",
            _LAUNCH_FIX,
        )
    _env_int("MASTER_PORT", None, 1)
    return rank, world, local


def timeouts() -> tuple[int, int]:
    """(rendezvous, barrier) timeouts in seconds, from the environment or the defaults; checked integers >= 1."""
    return (
        _env_int(RENDEZVOUS_TIMEOUT_ENV, DEFAULT_RENDEZVOUS_TIMEOUT_S, 1),
        _env_int(BARRIER_TIMEOUT_ENV, DEFAULT_BARRIER_TIMEOUT_S, 1),
    )


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
    """The gloo process group of a torchrun / accelerate launch (a no-op for a single process or a shard).

    The ranks first meet under the short rendezvous timeout (every rank started, the address reachable:
    minutes), then the zoo's barriers run in a group with the long barrier timeout (a whole model pass)."""

    def __init__(self, part: Part):
        self.part = part
        self._dist: Any = None
        self._group: Any = None  # the gloo group with the barrier timeout
        self._made = False  # the default group is ours to destroy (accelerate may have made one already)

    def __enter__(self) -> "Group":
        if self.part.how == TORCH:
            import torch.distributed as dist  # torch only when launched distributed

            if not dist.is_available():
                raise MetashiftError(
                    "this torch has no torch.distributed", "install a torch build with distributed support"
                )
            rendezvous, barrier = timeouts()
            where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
            logger.info(
                "%s: waiting up to %d s for all %d ranks to meet at %s (%s)",
                self.part.label(),
                rendezvous,
                self.part.count,
                where,
                RENDEZVOUS_TIMEOUT_ENV,
            )
            try:
                if not dist.is_initialized():  # accelerate may have made one already
                    dist.init_process_group(
                        "gloo",
                        init_method="env://",
                        rank=self.part.index,
                        world_size=self.part.count,
                        timeout=timedelta(seconds=rendezvous),
                    )
                    self._made = True
                    dist.barrier()  # every rank is here (under the rendezvous timeout)
                self._group = dist.new_group(backend="gloo", timeout=timedelta(seconds=barrier))
            except (RuntimeError, ValueError, OSError) as exc:  # DistStoreError / DistNetworkError are RuntimeErrors
                if self._made and dist.is_initialized():
                    dist.destroy_process_group()
                raise MetashiftError(
                    f"{self.part.label()}: the {self.part.count} ranks did not all meet at {where} within "
                    f"{rendezvous} s ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})",
                    f"start every rank 0..{self.part.count - 1} with the same MASTER_ADDR/MASTER_PORT (torchrun "
                    f"--nproc-per-node N does), check the address is reachable from every node; "
                    f"{RENDEZVOUS_TIMEOUT_ENV} sets how long to wait",
                ) from None
            logger.info(
                "%s: all ranks met; barriers wait up to %d s (%s)", self.part.label(), barrier, BARRIER_TIMEOUT_ENV
            )
            self._dist = dist
        return self

    def __exit__(self, *exc: Any) -> bool:
        if self._dist is not None and self._dist.is_initialized():
            if self._made:
                self._dist.destroy_process_group()  # the default group, and with it ours
            elif self._group is not None:
                self._dist.destroy_process_group(self._group)
        return False

    def barrier(self) -> None:
        if self._dist is not None:
            logger.info("%s: waiting at a barrier for the other ranks", self.part.label())
            self._dist.barrier(group=self._group)

    def agree(self, what: str, value: str) -> None:
        """Every rank holds the same ``value`` (a digest of its plan), else every rank refuses."""
        if self._dist is None:
            return
        seen: list[Any] = [None] * self.part.count
        self._dist.all_gather_object(seen, value, group=self._group)
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
    """One model's logits for the zoo's images, for scoring: every row (from this process's pass or the cache) and,
    when rows came from the cache, what :func:`~metashift_hf.models.outputs.check_cached` recomputed of them."""

    rows: dict[str, np.ndarray]  # sha -> logits
    cache: OutputCache | None
    check: outputs.CacheCheck | None = None

    def block(self, shas: Sequence[str]) -> np.ndarray:
        return np.stack([self.rows[s] for s in shas]).astype(np.float32)


@dataclass
class ZooPass:
    """What this process's model passes did: per model, the images it ran (``mine``) and those the cache held when
    it looked (``cached``); ``fresh`` holds the computed rows only when there is no cache to put them in."""

    mine: dict[str, list[str]]
    cached: dict[str, int]
    fresh: dict[str, dict[str, np.ndarray]]

    @property
    def computed(self) -> dict[str, int]:
        return {name: len(shas) for name, shas in self.mine.items()}


def _plan(run: outputs.ModelOutputs, store: OutputCache | None, shas: list[str], part: Part, batch_size: int) -> list:
    """This process's images of ``run``: whole batches of the images the cache lacks (a shard: of all the images,
    those batches with a gap, as it has no common view of the cache)."""
    if part.how == SHARD:
        mine = [b for b in share(shas, batch_size, part) if store is None or any(s not in store for s in b)]
    else:
        mine = share([s for s in shas if store is None or s not in store], batch_size, part)
    return [s for b in mine for s in b]


def compute_logits(
    clfs: Sequence[Classifier],
    images: Images,
    part: Part,
    group: Group,
    settings: outputs.RunConfig,
    cache: outputs.CacheConfig,
) -> ZooPass:
    """This process's share of every model over the zoo's images, image-major: the models that need the same images
    share passes (:func:`~metashift_hf.models.outputs.passes`) in which each image is decoded once and resized and
    cropped once per distinct preprocessing (:func:`~metashift_hf.models.outputs.compute_together`); a model whose
    logits are all cached runs no pass and decodes nothing. Each model's batches are those of a one-model run (its
    images sorted by sha256, cut in ``batch_size``), so its logits are the same bit for bit. What a process computes
    goes into the cache as one part per model."""
    runs = [outputs.logits(c) for c in clfs]
    stores = {
        r.name: OutputCache(r, cache.folder, wanted=images.wanted) if (cache.use and r.key) else None for r in runs
    }
    shas = sorted(images.wanted)
    if part.how != SHARD:
        group.barrier()  # every rank has read the cache before any rank writes a part: all plan the same gaps
    mine = {r.name: _plan(r, stores[r.name], shas, part, settings.batch_size) for r in runs}
    cached = {r.name: sum(1 for s in shas if stores[r.name] is not None and s in stores[r.name]) for r in runs}
    fresh: dict[str, dict[str, np.ndarray]] = {r.name: {} for r in runs}
    same: dict[tuple[str, ...], list[outputs.ModelOutputs]] = {}  # the models that need the same images
    for r in runs:
        if mine[r.name]:
            same.setdefault(tuple(mine[r.name]), []).append(r)
    for todo, together in same.items():
        for chunk in outputs.passes(together, settings.batch_size):
            where = "" if part.how == SINGLE else f" ({part.label()})"
            desc = f"zoo {', '.join(r.name for r in chunk)}{where}"
            values = outputs.compute_together(chunk, list(todo), images.read, replace(settings, desc=desc))
            for r, v in zip(chunk, values):
                store = stores[r.name]
                if store is not None:
                    store.add(list(todo), v)
                else:
                    fresh[r.name] = dict(zip(todo, v))
    if part.how == TORCH:
        group.barrier()  # every rank's parts are on disk
    return ZooPass(mine, cached, fresh)


def scoring_logits(
    clf: Classifier,
    images: Images,
    done: ZooPass,
    settings: outputs.RunConfig,
    cache: outputs.CacheConfig,
    *,
    seed: int,
    check_sample: int = outputs.CHECK_SAMPLE,
) -> ModelLogits:
    """Every row of ``clf`` for scoring (rank 0 or a single process), read back from the cache (and checked: the
    parts of other ranks and runs) when there is one. The rows this process did not compute are the cache's word:
    a seeded sample of ``check_sample`` of them is recomputed (:func:`~metashift_hf.models.outputs.check_cached`)."""
    run = outputs.logits(clf)
    shas = sorted(images.wanted)
    if not (cache.use and run.key):
        return ModelLogits(done.fresh[clf.name], None)
    store = OutputCache(run, cache.folder, wanted=images.wanted)
    absent = [s for s in shas if s not in store]
    if absent:
        raise MetashiftError(
            f"{len(absent)} image(s) of model {clf.name} are in no rank's cache part",
            "put --cache-dir on a file system every node sees (all ranks write their parts there)",
        )
    ours = set(done.mine[clf.name])
    theirs = [s for s in shas if s not in ours]
    check = outputs.check_cached(run, store, theirs, images.read, settings, seed=seed, sample=check_sample)
    return ModelLogits(dict(zip(shas, store.get(shas))), store, check)
