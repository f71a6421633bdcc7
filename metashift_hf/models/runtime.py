"""Process settings that decide throughput: the glibc allocator and the decode threads (per device).

glibc serves each large activation map of a CNN forward pass with a fresh ``mmap`` and gives it back
after the layer, so every batch page-faults its whole working set again (measured: 2.6-3.0 M faults
per 240 images with EfficientNet-Lite0, docs/evaluate.md). Keeping freed memory in the heap
(``mallopt``: no mmap for large blocks, no trimming) makes the pages stay mapped between batches.
Outputs are unchanged: only where memory comes from changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import platform
import sys
from typing import Any


logger = logging.getLogger(__name__)

# mallopt parameter numbers from glibc's malloc.h
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD, _M_MMAP_MAX = -1, -2, -3, -4
ALLOCATOR_SETTINGS = {
    "M_MMAP_MAX": 0,  # large blocks come from the heap, so a freed activation map is reused, not unmapped
    "M_TRIM_THRESHOLD": 1 << 30,  # never hand the heap's top back between batches (up to 1 GiB kept)
    "M_TOP_PAD": 64 << 20,  # grow the heap 64 MiB at a time: fewer brk calls while the first batch runs
}
_PARAM = {
    "M_MMAP_MAX": _M_MMAP_MAX,
    "M_TRIM_THRESHOLD": _M_TRIM_THRESHOLD,
    "M_TOP_PAD": _M_TOP_PAD,
    "M_MMAP_THRESHOLD": _M_MMAP_THRESHOLD,
}
DISABLE_ENV = "METASHIFT_HF_NO_MALLOPT"  # set to 1 to leave the allocator alone (e.g. to measure the difference)
_STATE: dict[str, Any] = {}


def tune_allocator() -> dict[str, Any]:
    """Apply :data:`ALLOCATOR_SETTINGS` once per process where the C library is glibc; the card says what happened."""
    if _STATE:
        return dict(_STATE)
    libc_name, libc_version = platform.libc_ver()
    card: dict[str, Any] = {"libc": f"{libc_name} {libc_version}".strip(), "applied": False, "settings": {}}
    if os.environ.get(DISABLE_ENV):
        card["reason"] = f"{DISABLE_ENV} is set"
    elif sys.platform != "linux" or libc_name != "glibc":
        card["reason"] = "not glibc: the allocator is left alone"
    else:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            done = {k: int(libc.mallopt(_PARAM[k], v)) == 1 for k, v in ALLOCATOR_SETTINGS.items()}
        except (OSError, AttributeError) as exc:  # a libc without mallopt
            card["reason"] = f"mallopt unavailable ({exc})"
        else:
            card["applied"] = all(done.values())
            card["settings"] = {k: v for k, v in ALLOCATOR_SETTINGS.items() if done[k]}
            card["how"] = "mallopt via ctypes at model load"
            # respects allocator settings a user made through the environment: they were applied at start-up
            card["environment"] = {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}
    _STATE.update(card)
    logger.debug("allocator: %s", card)
    return dict(card)


DECODE_THREADS_PER_GPU = 4  # one decode thread feeds ~290 images/s (measured): 4 keep a GPU busy for small models


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def decode_workers(requested: int | None = None, device: str = "cpu") -> int:
    """Decode threads: as asked (``--workers``), else the rule for the device.

    - CPU: the cores torch's threads leave free, at most 4, at least 1. On 2 cores with 2 torch threads,
      2 decode threads stall the forward pass; 1 overlaps with it.
    - A GPU (``cuda``, ``cuda:N``, ``mps``): ``min(cores per process, DECODE_THREADS_PER_GPU)``, the cores
      shared among the processes on this node (``LOCAL_WORLD_SIZE``, set by torchrun / accelerate launch).
      The forward pass leaves the CPU free, so one decode thread would cap the GPU near 290 images/s.
    """
    if requested is not None:
        return requested
    if device.startswith(("cuda", "mps")):
        try:
            local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
        except ValueError:
            local = 1
        return max(1, min(_cores() // local, DECODE_THREADS_PER_GPU))
    torch = sys.modules.get("torch")
    torch_threads = torch.get_num_threads() if torch is not None else 0
    return max(1, min(4, _cores() - torch_threads))


def overlap_rule(device: str = "cpu") -> bool:
    """Whether decoding overlaps the forward pass. On a GPU it does (the forward pass leaves the CPU free). On a
    CPU whose cores torch's threads all use, decode threads running beside the forward pass take a core from one
    torch thread while the others wait for it at every operator's barrier; decoding each batch on every core, then
    running the model on every core, keeps all cores busy in both phases (the ceiling docs/evaluate.md computes).
    With cores to spare (fewer torch threads than cores) the spare cores decode while the model runs."""
    if device.startswith(("cuda", "mps")):
        return True
    torch = sys.modules.get("torch")
    return torch is None or torch.get_num_threads() < _cores()


def phase_workers(requested: int | None = None) -> int:
    """Decode threads when decoding does not overlap the model (:func:`overlap_rule`): as asked, else every core."""
    return requested if requested is not None else _cores()


def runtime_card() -> dict[str, Any]:
    """What the run card records about the process: allocator, threads, cores."""
    torch = sys.modules.get("torch")
    return {
        "allocator": dict(_STATE) or {"applied": False, "reason": "no model loaded"},
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "cores": _cores(),
    }
