"""Process settings that decide CPU throughput: the glibc allocator and the decode threads.

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
_PARAM = {"M_MMAP_MAX": _M_MMAP_MAX, "M_TRIM_THRESHOLD": _M_TRIM_THRESHOLD, "M_TOP_PAD": _M_TOP_PAD,
          "M_MMAP_THRESHOLD": _M_MMAP_THRESHOLD}
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


def decode_workers(requested: int | None = None) -> int:
    """Decode threads: as asked, else the cores torch's threads leave free (at least 1).

    On 2 cores with 2 torch threads, 2 decode threads stall the forward pass; 1 overlaps with it.
    """
    if requested is not None:
        return requested
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    torch = sys.modules.get("torch")
    torch_threads = torch.get_num_threads() if torch is not None else 0
    return max(1, min(4, cores - torch_threads))


def runtime_card() -> dict[str, Any]:
    """What the run card records about the process: allocator, threads, cores."""
    torch = sys.modules.get("torch")
    return {"allocator": dict(_STATE) or {"applied": False, "reason": "no model loaded"},
            "torch_threads": torch.get_num_threads() if torch is not None else None,
            "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()}
