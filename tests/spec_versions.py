"""An exported folder rewritten as an older metashift-hf would have written it: every copy of its shift spec (the
config's shift_spec.json, the card's features and each shard's features) at an older ``spec_version``, without the
keys added since, as the spec's upgrade chain expects (metashift_hf/tasks/spec.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import yaml


SPEC_MARK = "metashift-hf shift_spec "
# the key each spec_version added (metashift_hf/tasks/spec.py); older versions lack it
_ADDED = {6: "facts_sha256", 5: "members"}


def _older(spec: dict, version: int) -> dict:
    dropped = {key for v, key in _ADDED.items() if v > version}
    return {k: v for k, v in spec.items() if k not in dropped} | {"spec_version": version}


def as_spec_version(repo: Path, config: str, version: int) -> None:
    """Rewrite exported folder ``repo``'s config ``config`` as one written at spec_version ``version`` (4 or 5)."""
    path = repo / config / "shift_spec.json"
    path.write_text(json.dumps(_older(json.loads(path.read_text()), version), indent=2, sort_keys=True) + "\n")
    card = repo / "README.md"
    _, front, body = card.read_text().split("---\n", 2)
    meta = yaml.safe_load(front)
    infos = meta["dataset_info"] if isinstance(meta["dataset_info"], list) else [meta["dataset_info"]]
    for info in infos:
        for feature in info["features"]:
            if str(feature.get("id", "")).startswith(SPEC_MARK):
                spec = _older(json.loads(feature["id"][len(SPEC_MARK) :]), version)
                feature["id"] = SPEC_MARK + json.dumps(spec, sort_keys=True, separators=(",", ":"))
    card.write_text("---\n" + yaml.safe_dump(meta, sort_keys=False) + "---\n" + body)
    for p in sorted((repo / config).glob("*-*-of-*.parquet")):
        table = pq.read_table(p)
        info = json.loads(table.schema.metadata[b"huggingface"])
        group = info["info"]["features"]["group"]
        spec = _older(json.loads(group["id"][len(SPEC_MARK) :]), version)
        group["id"] = SPEC_MARK + json.dumps(spec, sort_keys=True, separators=(",", ":"))
        p.unlink()
        pq.write_table(table.replace_schema_metadata({b"huggingface": json.dumps(info).encode()}), p)
