"""The artifact folder: tables per the contract, the Artifact reader, errors, determinism."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from fixtures.worlds import two_cluster_subsets
from metashift_hf.builders.artifact import Artifact, ArtifactStats, Manifest
from metashift_hf.builders.build import BuildOptions, build_artifact
from metashift_hf.builders.build_inputs import InputRecord
from metashift_hf.builders.subsets import CandidateSubsets
from metashift_hf.core.errors import EmptyResultError, InputFormatError, MetashiftError, UnknownNameError


def world() -> dict[str, list[str]]:
    """Two classes with two context clusters each (joined by one bridge subset), plus small/unkept subsets."""
    d = two_cluster_subsets(seed=7, contexts=5)
    for subject in ("cat", "dog"):
        d[f"{subject}(rare)"] = [f"{subject}-in-{i}" for i in range(3)]
    d["cat(dog)"] = ["both-1", "both-2"]
    d["dog(cat)"] = ["both-2", "both-3"]
    d["bird(tree)"] = [f"b{i}" for i in range(30)]  # big enough but bird has one subset only
    return d


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("art") / "artifact"
    a = build_artifact(
        CandidateSubsets.from_dict(world()),
        out,
        BuildOptions(),
        record=InputRecord(provenance="custom", inputs=[{"path": "x", "sha256": "0" * 64, "role": "test"}]),
        plots=False,
    )
    return a


def test_tables_follow_contract(built):
    root = built.root
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["format"] == "metashift-hf-artifact" and manifest["format_version"] == 1
    assert manifest["options"] == BuildOptions().to_dict() and len(manifest["content_hash"]) == 64
    subsets = pq.read_table(root / "subsets.parquet").to_pandas()
    assert list(subsets.columns) == [
        "subset",
        "subject",
        "context",
        "kind",
        "category",
        "n_images",
        "kept",
        "community",
    ]
    assert subsets["subset"].tolist() == sorted(subsets["subset"])
    assert len(subsets) == 27
    kept = subsets[subsets.kept]
    assert sorted(set(kept.subject)) == ["cat", "dog"] and len(kept) == 22
    assert (subsets[~subsets.kept].community == -1).all() and (kept.community >= 0).all()
    membership = pq.read_table(root / "membership.parquet").to_pandas()
    assert list(membership.columns) == ["subset", "image_id"]
    assert len(membership) == int(subsets.n_images.sum())
    assert list(zip(membership.subset, membership.image_id)) == sorted(zip(membership.subset, membership.image_id))
    edges = pq.read_table(root / "edges.parquet").to_pandas()
    assert (edges.source < edges.target).all() and (edges.weight >= 0.2).all()
    classes = pq.read_table(root / "classes.parquet").to_pandas()
    assert classes.subject.tolist() == ["cat", "dog"] and classes.n_subsets.tolist() == [11, 11]
    assert classes.embedding_status.tolist() == ["ok", "ok"]
    assert (classes.n_communities >= 2).all()
    emb = pq.read_table(root / "embeddings.parquet").to_pandas()
    assert all(np.isfinite(np.asarray(e)).all() for e in emb.embedding)
    stats = built.stats
    assert isinstance(stats, ArtifactStats) and isinstance(built.manifest, Manifest)
    assert isinstance(built.options, BuildOptions) and built.manifest.options == built.options
    assert stats.subsets_per_class.max >= stats.subsets_per_class.min and stats.kinds["object"].kept >= 0
    assert (stats.classes, stats.subsets, stats.candidate_keys, stats.kept_subsets_any_class) == (2, 22, 27, 23)
    assert stats.images == len(built.class_images("cat") | built.class_images("dog"))
    assert Manifest.from_dict(built.manifest.to_dict()) == built.manifest
    assert ArtifactStats.from_dict(stats.to_dict()) == stats


def test_reader_api(built):
    assert built.classes() == ["cat", "dog"]
    assert built.subsets_of("cat") == ["cat(bridge)"] + [f"cat(grass{k})" for k in range(5)] + [
        f"cat(sofa{k})" for k in range(5)
    ]
    assert "cat(rare)" in built.subsets_of("cat", kept_only=False)
    assert built.images("cat(rare)") == frozenset(world()["cat(rare)"])
    assert built.pair_images("cat", "dog") == frozenset({"both-1", "both-2", "both-3"})
    assert built.pair_images("cat", "bird") == frozenset()
    assert len(built.subsets_table()) == 27
    assert built.image_metadata("cat-in-1") is None  # no scene graphs in this build
    same = built.distance("cat(sofa0)", "cat(sofa1)")
    far = built.distance("cat(sofa0)", "cat(grass0)")
    assert 0 <= same.value < far.value and same.rule == far.rule == "spectral"
    assert built.distance("cat(sofa0)", "cat(grass0)").value == float(
        np.linalg.norm(built.embedding("cat(sofa0)") - built.embedding("cat(grass0)"))
    )
    coms = built.communities("cat")
    assert len({coms[f"cat(sofa{k})"] for k in range(5)}) == 1 and coms["cat(sofa0)"] != coms["cat(grass0)"]


def test_group_distances(built):
    groups = {
        "indoor": ["sofa0", "sofa1"],
        "outdoor": ["cat(grass0)", "grass1"],
        "mixed": ["sofa2", "grass2"],
        "a": ["sofa3"],
        "b": ["grass3"],
        "c": ["sofa2"],
    }
    paper = built.group_distance("cat", groups, "indoor", "outdoor", rule="paper")
    analysis, members = built.analysis("cat")
    from metashift_hf.builders import metagraph

    assert paper == metagraph.group_distance_paper(
        analysis, members, ["cat(sofa0)", "cat(sofa1)"], ["cat(grass0)", "cat(grass1)"]
    )
    assert built.set_distance("cat", ["sofa0", "sofa1"], ["cat(grass0)", "grass1"]) == paper
    code = built.group_distance("cat", groups, "indoor", "outdoor", rule="code")
    assert code.value > built.group_distance("cat", groups, "indoor", "a", rule="code").value
    both = built.group_distance("cat", groups, "a", ["indoor", "outdoor"], rule="code")
    assert both.value == pytest.approx(
        (
            built.group_distance("cat", groups, "a", "indoor").value
            + built.group_distance("cat", groups, "a", "outdoor").value
        )
        / 2
    )
    with pytest.raises(UnknownNameError):
        built.group_distance("cat", groups, "indoor", "nowhere")
    with pytest.raises(InputFormatError):
        built.group_distance("cat", groups, "indoor", "outdoor", rule="median")
    with pytest.raises(MetashiftError, match="not a subset of class"):
        built.group_distance("cat", {"x": ["dog(sofa0)"], "y": ["sofa1"]}, "x", "y")


def test_reader_errors(built, tmp_path):
    with pytest.raises(MetashiftError, match="different classes"):
        built.distance("cat(sofa0)", "dog(sofa0)")
    with pytest.raises(UnknownNameError, match="did you mean"):
        built.distance("cat(sofa9)", "cat(sofa0)")
    with pytest.raises(UnknownNameError, match="not kept"):
        built.distance("cat(rare)", "cat(sofa0)")
    with pytest.raises(UnknownNameError, match="not a class"):
        built.distance("bird(tree)", "bird(tree)")
    with pytest.raises(UnknownNameError, match="did you mean 'cat'"):
        built.subsets_of("cta")
    with pytest.raises(UnknownNameError):
        built.pair_images("cat", "unicorn")
    with pytest.raises(InputFormatError, match="no manifest.json"):
        Artifact.load(tmp_path)


def test_every_pair_gets_an_answer(tmp_path):
    # two disconnected clusters of 6 subsets each: only the largest component (tie -> first) is embedded
    d = {}
    for j in range(6):
        d[f"x(a{j})"] = [f"a{i}" for i in range(30)]
    for j in range(5):
        d[f"x(b{j})"] = [f"b{i}" for i in range(30)]
    a = build_artifact(CandidateSubsets.from_dict(d), tmp_path / "art", plots=False)
    assert a.class_info("x")["embedding_status"] != "ok"
    assert a.distance("x(a0)", "x(b0)").status == "disconnected"
    assert a.distance("x(a0)", "x(a1)").rule == "spectral"
    inner = a.distance("x(b0)", "x(b1)")  # identical sets joined by weight 1 in a 5-clique: R = 2/5
    assert inner.rule == "resistance" and inner.value == pytest.approx(0.4, abs=1e-12)
    m = a.distance_matrix("x")
    assert m.coverage() == (15 + 10, 55)
    table = pq.read_table(tmp_path / "art" / "distances.parquet").to_pandas()
    assert len(table) == 55 and set(table.status) == {"ok", "disconnected"}
    for row in table.itertuples():
        d = m.get(row.source, row.target)
        assert (d.status, d.rule) == (row.status, row.rule if isinstance(row.rule, str) else None)
        assert d.value == row.distance if d.value is not None else np.isnan(row.distance)


def test_empty_result_and_nothing_written(tmp_path):
    out = tmp_path / "art"
    with pytest.raises(EmptyResultError) as e:
        build_artifact(CandidateSubsets.from_dict({"cat(sofa)": ["1", "2"]}), out)
    assert "lower --min-images-per-subset" in e.value.fix
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_bad_options():
    with pytest.raises(InputFormatError, match="pairing"):
        BuildOptions(pairing="near").validate()
    with pytest.raises(InputFormatError, match="edge_threshold"):
        BuildOptions(edge_threshold=2.0).validate()
    with pytest.raises(InputFormatError, match="unknown build options"):
        BuildOptions.from_dict({"min_images": 3})


def test_determinism_byte_identical(tmp_path):
    c1 = CandidateSubsets.from_dict(world())
    c2 = CandidateSubsets.from_dict(dict(reversed(list(world().items()))))
    a = build_artifact(c1, tmp_path / "a", BuildOptions(community_method="louvain", seed=3), plots=False)
    b = build_artifact(c2, tmp_path / "b", BuildOptions(community_method="louvain", seed=3), plots=False)
    for name in ("subsets", "membership", "classes", "edges", "embeddings"):
        assert (a.root / f"{name}.parquet").read_bytes() == (b.root / f"{name}.parquet").read_bytes()
    assert a.content_hash == b.content_hash


def test_interrupted_build_leaves_old_artifact(tmp_path, monkeypatch):
    out = tmp_path / "art"
    first = build_artifact(CandidateSubsets.from_dict(world()), out, plots=False)
    import metashift_hf.builders.artifact as art

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(art, "table_hash", boom)
    with pytest.raises(KeyboardInterrupt):
        build_artifact(
            CandidateSubsets.from_dict(world()), out, BuildOptions(edge_threshold=0.5), plots=False, force=True
        )
    assert Artifact.load(out).content_hash == first.content_hash
    assert sorted(p.name for p in tmp_path.iterdir()) == ["art"]


def test_manifest_and_stats_are_read_strictly(tmp_path):
    d = {f"x(a{j})": [f"a{i}" for i in range(30)] for j in range(7)}
    art = build_artifact(CandidateSubsets.from_dict(d), tmp_path / "art", plots=False)
    assert art.options.min_images_per_subset == 25 and art.manifest.tables and art.stats.classes == 1
    manifest = json.loads((art.root / "manifest.json").read_text())
    (art.root / "manifest.json").write_text(json.dumps(dict(manifest, colour="red")))
    with pytest.raises(InputFormatError, match="unknown keys \\['colour'\\]"):
        Artifact.load(art.root)
    (art.root / "manifest.json").write_text(
        json.dumps(dict(manifest, options=dict(manifest["options"], spectral_dim="5")))
    )
    with pytest.raises(InputFormatError, match="spectral_dim"):
        Artifact.load(art.root)
    (art.root / "manifest.json").write_text(json.dumps(manifest))
    stats = json.loads((art.root / "stats.json").read_text())
    del stats["edges"]
    (art.root / "stats.json").write_text(json.dumps(stats))
    with pytest.raises(InputFormatError, match="missing keys \\['edges'\\]"):
        Artifact.load(art.root)
