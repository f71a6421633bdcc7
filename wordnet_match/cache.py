"""Where wordnet_match keeps things it derives or fetches (WordNet copy, the published tree)."""
from __future__ import annotations

import os
from pathlib import Path

from metashift_hf.download import default_cache_dir


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """``cache_dir`` if given, else the package's one cache folder (``$METASHIFT_HF_CACHE`` or the
    per-user cache, as for downloads and the data manifest)."""
    return Path(cache_dir) if cache_dir is not None else default_cache_dir()
