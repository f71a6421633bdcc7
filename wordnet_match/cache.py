"""Where wordnet_match keeps things it derives or fetches (WordNet copy, the published tree)."""
from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "METASHIFT_HF_CACHE"


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache folder: ``cache_dir`` if given, else ``$METASHIFT_HF_CACHE``, else the user cache dir."""
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("metashift-hf"))
