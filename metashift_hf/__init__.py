"""metashift-hf: MetaShift made real, current and easy to use on the Hugging Face ecosystem."""
from __future__ import annotations

__version__ = "0.1.0"
