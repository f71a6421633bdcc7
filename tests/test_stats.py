"""`stats`: published figures per source, exact checks for pinned pickles, consistency checks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from metashift_hf import cli
from metashift_hf.builders.build import BuildOptions, build_artifact
from metashift_hf.builders.build_inputs import InputRecord
from metashift_hf.builders.pickles import load_candidate_pickle
from metashift_hf.builders.subsets import CandidateSubsets
from metashift_hf.core.errors import InputFormatError
from metashift_hf.core.sources import KNOWN_FILES
from metashift_hf.sources import stats as st


FULL_SHA = KNOWN_FILES["subsets"].sha256
ATTR_SHA = KNOWN_FILES["attributes"].sha256


def _toy_candidates(seed: int = 0) -> CandidateSubsets:
    """Two classes with 6 subsets of >= 25 images, one with too few, plus small subsets."""
    rng = np.random.default_rng(seed)
    pool = [str(i) for i in range(400)]
    mapping = {}
    for subject in ("dog", "cat"):
        for ctx in ("sofa", "bed", "grass", "frisbee", "car", "table"):
            mapping[f"{subject}({ctx})"] = rng.choice(pool, size=int(rng.integers(25, 60)), replace=False)
    for ctx in ("sofa", "bed"):
        mapping[f"horse({ctx})"] = rng.choice(pool, size=30, replace=False)
    mapping["dog(kite)"] = ["1", "2", "3"]
    mapping["ocean(dog)"] = rng.choice(pool, size=40, replace=False)
    kinds = {"ocean(dog)": "general"}
    return CandidateSubsets.from_dict(mapping, kind=kinds)


def _toy(tmp_path, *, source="custom", inputs=(), options=BuildOptions(), name="art"):
    return build_artifact(
        _toy_candidates(),
        tmp_path / name,
        options,
        record=InputRecord(provenance=source, inputs=tuple(inputs)),
        plots=False,
    )


@pytest.fixture(scope="module")
def attributes_artifact(tmp_path_factory, shared_ref):
    pkl = shared_ref / "metashift" / "attributes-candidate-subsets.pkl"
    out = tmp_path_factory.mktemp("attr") / "art"
    build_artifact(
        load_candidate_pickle(pkl, attributes=True),
        out,
        BuildOptions(include_attributes=True),
        record=InputRecord(provenance="published", inputs=[{"path": str(pkl), "role": "attributes_pickle"}]),
        plots=False,
    )
    return out


def _row(report, figure):
    return next(r for r in report.rows if r.figure == figure)


def test_attribute_pickle_matches_the_published_figures(attributes_artifact, capsys):
    rep = st.compare(attributes_artifact)
    assert rep.reference == "attributes" and rep.failures == []
    for fig, pub in st.PUBLISHED_ATTRIBUTES.items():
        row = _row(rep, fig)
        assert row.check == "exact" and row.ok and row.ours == pub
    assert cli.main(["stats", "--artifact", str(attributes_artifact), "--verify"]) == 0
    out = capsys.readouterr().out
    assert "classes" in out and "66" in out and "679" in out and "0 failed" in out


def test_tampered_stats_fail_verify(tmp_path, capsys):
    art = _toy(tmp_path)
    stats_path = art.root / "stats.json"
    doc = json.loads(stats_path.read_text())
    doc["classes"] += 1
    stats_path.write_text(json.dumps(doc))
    rep = st.compare(art.root)
    assert [r.figure for r in rep.failures] == ["stats.json classes"]
    assert cli.main(["stats", "--artifact", str(art.root), "--verify"]) == 1
    assert "FAIL" in capsys.readouterr().out
    assert cli.main(["stats", "--artifact", str(art.root)]) == 0  # without --verify it only reports


def test_modified_table_fails_content_hash(tmp_path):
    art = _toy(tmp_path)
    edges = art.root / "edges.parquet"
    edges.write_bytes(edges.read_bytes() + b"\0")
    assert "content_hash" in [r.figure for r in st.compare(art.root).failures]


def test_demo_artifact_has_no_published_reference(tmp_path):
    rep = st.compare(_toy(tmp_path, source="demo").root)
    assert rep.reference == "none" and rep.failures == []
    assert all(r.published is None for r in rep.rows if r.check != "consistency")
    assert not any(r.figure.startswith("rule ") for r in rep.rows)


def test_pinned_full_pickle_must_match_exactly(tmp_path, monkeypatch):
    art = _toy(
        tmp_path,
        source="published",
        inputs=[{"path": "/nowhere/full-candidate-subsets.pkl", "role": "candidate_subsets", "sha256": FULL_SHA}],
    )
    rep = st.compare(art.root)
    assert rep.reference == "full"
    failed = {r.figure for r in rep.failures}
    assert {"candidate_keys", "classes", "subsets", "candidate_images"} <= failed
    # The same artifact passes once the published figures are the ones it really has.
    measured = st.measure(art.root, art.options)
    fake = {k: (round(v, 1) if k in ("subsets_per_class", "images_per_subset") else v) for k, v in measured.items()}
    monkeypatch.setattr(st, "PUBLISHED_FULL", fake)
    assert st.compare(art.root).failures == []


def test_mixed_and_custom_inputs_are_not_checked_against_published(tmp_path):
    art = _toy(
        tmp_path,
        source="published",
        inputs=[
            {"path": "a", "role": "candidate_subsets", "sha256": FULL_SHA},
            {"path": "b", "role": "attributes_pickle", "sha256": ATTR_SHA},
        ],
    )
    rep = st.compare(art.root)
    assert "mixed inputs" in rep.basis and rep.failures == []
    assert not any(r.check == "exact" for r in rep.rows)


def test_gqa_build_checks_rules_and_ontology_bounds(tmp_path):
    ok = st.compare(_toy(tmp_path, source="gqa", inputs=[{"path": "x.json", "role": "scene_graphs"}]).root)
    assert ok.failures == [] and _row(ok, "general_contexts").check == "<="
    assert "pairing=relation" in _row(ok, "classes").explanation
    bad = st.compare(_toy(tmp_path, source="gqa", options=BuildOptions(min_images_per_subset=20), name="b").root)
    assert [r.figure for r in bad.failures] == ["rule min_images_per_subset"]


def test_measure_counts_contexts_by_kind(tmp_path):
    art = _toy(tmp_path)
    m = st.measure(art.root, art.options)
    assert m["general_contexts"] == 1  # 'ocean' from 'ocean(dog)'
    assert m["object_contexts"] == 7 and m["candidate_keys"] == 16
    assert m["classes"] == 2 and m["subsets"] == 12 and m["subsets_per_class"] == 6.0


def test_json_output_and_bad_artifact(tmp_path, capsys):
    art = _toy(tmp_path)
    assert cli.main(["stats", "--artifact", str(art.root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["failures"] == [] and any(r["figure"] == "classes" for r in doc["rows"])
    assert cli.main(["stats", "--artifact", str(tmp_path / "missing")]) == 2
    assert "error:" in capsys.readouterr().err
    with pytest.raises(InputFormatError):
        st.compare(tmp_path)


def test_image_metadata_must_cover_candidate_images(tmp_path):
    cands = _toy_candidates()
    meta = [{"image_id": i, "width": 10, "height": 10} for i in cands.image_ids]
    full = build_artifact(cands, tmp_path / "a", record=InputRecord(provenance="gqa", image_meta=meta), plots=False)
    assert _row(st.compare(full.root), "images.parquet covers candidate images").ok
    part = build_artifact(
        cands, tmp_path / "b", record=InputRecord(provenance="gqa", image_meta=meta[5:]), plots=False
    )
    row = _row(st.compare(part.root), "images.parquet covers candidate images")
    assert row.ok is False and "5 candidate images" in row.explanation


def _write_match(root, **figures):
    (root / "match").mkdir()
    (root / "match" / "match.json").write_text(json.dumps(figures))


def test_match_figures_are_compared_when_present(tmp_path, monkeypatch):
    pinned = [{"path": "x", "role": "candidate_subsets", "sha256": FULL_SHA}]
    art = _toy(tmp_path, source="published", inputs=pinned)
    _write_match(
        art.root,
        hierarchy="paper",
        vocabulary_names=1262,
        matched_names=427,
        subsets=5040,
        classes=260,
        imagenet_leaves_covered=867,
    )
    rows = {r.figure: r for r in st.compare(art.root).rows if r.figure.startswith("match ")}
    assert rows["match subsets"].ok and rows["match classes"].ok is False
    assert rows["match classes"].difference == -1
    # Not the pinned full pickle: shown, not checked.
    other = _toy(tmp_path, name="other")
    _write_match(
        other.root,
        hierarchy="paper",
        vocabulary_names=1262,
        matched_names=1,
        subsets=2,
        classes=3,
        imagenet_leaves_covered=4,
    )
    rows = [r for r in st.compare(other.root).rows if r.figure.startswith("match ")]
    assert len(rows) == 5 and all(r.ok is None for r in rows)
