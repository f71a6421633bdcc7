"""Issue 37 (review round 5, B1/B2): a task's meta-graph facts are checked against themselves and against the
task's rows (N-R01, N-R13, N-R14, N-R20), and the shift spec records each split's rows, so that rows of another
split (N-E01) or changed rows are told apart (builders/meta_graph_facts.py, metashift_hf/tasks/spec.py)."""

from __future__ import annotations

import base64
import json
import math

import pyarrow as pa
import pytest

from metashift_hf.builders.meta_graph_facts import EDGE_TYPE, MetaGraphFacts
from metashift_hf.core.errors import InputFormatError
from metashift_hf.tasks import families as tasks
from metashift_hf.tasks.spec import (
    MEMBERS_BITS_MAX,
    MEMBERS_BUDGET_BITS,
    SPEC_VERSION,
    ShiftSpec,
    SplitMembers,
    row_key,
)


TASK = "shift-conditional-cat-dog-delta30"


@pytest.fixture(scope="module")
def planned(builder_world):
    """TASK planned on the builder world: (plan, its facts from the artifact, the build's spectral_dim)."""
    art = builder_world["artifact"]
    tp = tasks.plan_task(TASK, art)
    return tp, MetaGraphFacts.of_artifact(art, _contexts(tp)), art.options.spectral_dim


def _contexts(tp):
    return [(r.label, r.contexts) for rows in tp.splits.values() for r in rows]


def _rows(tp, community=lambda r: r.community):
    return [(r.image_id, r.label, r.group, r.contexts, community(r)) for rows in tp.splits.values() for r in rows]


def _keys(rows):
    return [row_key(r.image_id, r.label, r.group, r.context, r.contexts, r.community) for r in rows]


def _reread(tp, facts, change=lambda t: t):
    """The facts written to arrow, changed, and read back as the facts reader does."""
    return MetaGraphFacts.from_arrow(change(facts.to_arrow()), "meta_graph.parquet", tp.classes, _contexts(tp))


def _column(table, name, values):
    return table.set_column(table.schema.get_field_index(name), name, pa.array(values, table.schema.field(name).type))


# -- facts against rows -----------------------------------------------------------------------------------------
def test_facts_and_rows_of_a_planned_task_agree(planned):
    tp, facts, k = planned
    _reread(tp, facts).check_rows(_rows(tp), "meta_graph.parquet", spectral_dim=k)


def test_n_r13_facts_communities_shifted_disagree_with_the_rows(planned):
    """N-R13: meta_graph.parquet's communities +5 were reported by bugs with exit 0."""
    tp, facts, k = planned
    shifted = _reread(tp, facts, lambda t: _column(t, "community", [c + 5 for c in t.column("community").to_pylist()]))
    with pytest.raises(InputFormatError, match="disagree on communities") as exc:
        shifted.check_rows(_rows(tp), "meta_graph.parquet of F", spectral_dim=k)
    assert "meta_graph.parquet of F" in exc.value.what and "export" in exc.value.fix


@pytest.mark.parametrize("case, shift", [("N-R01", 7), ("N-R20", 1)])
def test_n_r01_n_r20_rows_communities_shifted_disagree_with_the_facts(planned, case, shift):
    """N-R01/N-R20: the rows' community column shifted; bugs reported the file's, Evaluator.grouping the rows'."""
    tp, facts, k = planned
    with pytest.raises(InputFormatError, match=r"disagree on communities \(\d+ row"):
        facts.check_rows(_rows(tp, lambda r: r.community + shift), "meta_graph.parquet", spectral_dim=k)
    # one row is enough; a row without a kept context must say -1
    one = _rows(tp)
    one[3] = (*one[3][:4], one[3][4] + shift)
    with pytest.raises(InputFormatError, match=f"image {one[3][0]} of group"):
        facts.check_rows(one, "meta_graph.parquet")
    with pytest.raises(InputFormatError, match="none kept"):
        facts.check_rows([(*_rows(tp)[0][:3], (), 0)], "meta_graph.parquet")
    with pytest.raises(InputFormatError, match="does not list"):
        facts.check_rows([(*_rows(tp)[0][:3], ("no-such-context",), 0)], "meta_graph.parquet")


def test_n_r14_distances_beyond_the_embedding_are_refused(planned):
    """N-R14: every distance set to 9.99 reordered the bugs with exit 0; the embedding's coordinates lie in [-1, 1],
    so no distance passes 2 sqrt(K)."""
    tp, facts, k = planned
    far = _reread(
        tp,
        facts,
        lambda t: _column(
            t, "distance_to_largest_community", [None if d is None else 9.99 for d in t.column(3).to_pylist()]
        ),
    )
    with pytest.raises(InputFormatError, match=f"within {2 * math.sqrt(k):.4g}"):
        far.check_rows(_rows(tp), "meta_graph.parquet", spectral_dim=k)
    assert max(f.distance_to_largest_community or 0 for f in facts.subsets.values()) <= 2 * math.sqrt(k)


def test_n_images_below_the_task_images_is_refused(planned):
    tp, facts, _ = planned
    small = _reread(tp, facts, lambda t: _column(t, "n_images", [1] * t.num_rows))
    with pytest.raises(InputFormatError, match="images show it"):
        small.check_rows(_rows(tp), "meta_graph.parquet")


# -- the file against itself ------------------------------------------------------------------------------------
def _edges_of(facts):
    return [(s, t, w) for s, f in facts.subsets.items() for t, w in f.edges or ()]


def test_an_edge_changed_at_one_end_is_refused(planned):
    tp, facts, _ = planned
    s, t, w = _edges_of(facts)[0]
    table = facts.to_arrow()
    edges = table.column("edges").to_pylist()
    i = table.column("subset").to_pylist().index(s)
    edges[i] = [e if e["target"] != t else {"target": t, "weight": w / 2} for e in edges[i]]
    with pytest.raises(InputFormatError, match="same weight"):
        _reread(tp, facts, lambda tb: tb.set_column(5, "edges", pa.array(edges, EDGE_TYPE)))


def test_a_distance_removed_on_one_side_of_an_edge_is_refused(planned):
    """N-R14 variant: distances follow the file's own edges (one connected component: both known or both not)."""
    tp, facts, _ = planned
    s = next(
        s
        for s, t, _ in _edges_of(facts)
        if facts.subsets[t].distance_to_largest_community and facts.subsets[s].distance_to_largest_community
    )
    dist = [None if f.subset == s else f.distance_to_largest_community for f in facts.subsets.values()]
    with pytest.raises(InputFormatError, match="one connected component"):
        _reread(tp, facts, lambda t: _column(t, "distance_to_largest_community", dist))


def test_edges_of_an_unkept_subset_or_of_part_of_a_class_are_refused(planned):
    tp, facts, _ = planned
    s, _, _ = _edges_of(facts)[0]
    comm = [-1 if f.subset == s else f.community for f in facts.subsets.values()]
    dist = [None if f.subset == s else f.distance_to_largest_community for f in facts.subsets.values()]
    with pytest.raises(InputFormatError, match="community -1"):
        _reread(tp, facts, lambda t: _column(_column(t, "community", comm), "distance_to_largest_community", dist))
    lonely = next(s for s, f in facts.subsets.items() if f.edges == ())
    edges = [
        None if f.subset == lonely or f.edges is None else [{"target": t, "weight": w} for t, w in f.edges]
        for f in facts.subsets.values()
    ]
    with pytest.raises(InputFormatError, match="lists edges for"):
        _reread(tp, facts, lambda t: t.set_column(5, "edges", pa.array(edges, EDGE_TYPE)))


def _every_task(art, scale):
    for tid in tasks.task_ids(art):
        yield tasks.plan_task(tid, art, **({"scale": scale} if tid.startswith("paper-") else {}))


@pytest.mark.slow  # 25 s: 59 tasks planned, their facts computed
def test_facts_and_rows_agree_on_every_task_of_a_world(builder_world):
    """The checks are sound: no task the builders make trips them (a refusal of a real export would be worse)."""
    art = builder_world["artifact"]
    for tp in _every_task(art, 0.1):
        facts = _reread(tp, MetaGraphFacts.of_artifact(art, _contexts(tp)))
        facts.check_rows(_rows(tp), tp.task_id, spectral_dim=art.options.spectral_dim)


# -- split membership -------------------------------------------------------------------------------------------
def test_n_e01_training_rows_are_not_the_test_split(planned):
    """N-E01: 100 training rows passed as the test split were scored as it ("100.0%")."""
    tp, _, _ = planned
    spec = ShiftSpec.from_json(tp.spec.to_json())
    assert spec.spec_version == SPEC_VERSION == 6 and spec == tp.spec
    test = spec.members_of("test")
    assert test is not None and test.n == len(tp.splits["test"]) and spec.members_of("nope") is None
    assert test.foreign(_keys(tp.splits["train"][:100])).all()
    part = tp.splits["test"][::3]
    assert not test.foreign(_keys(part)).any() and not test.same_rows(_keys(part))
    assert test.same_rows(_keys(reversed(tp.splits["test"])))  # any order: shuffle() is the user's choice
    # a row of the split with its label, group, contexts or community changed is not the split's either
    r = tp.splits["test"][0]
    changed = [
        row_key(r.image_id, r.label, r.group, r.context, r.contexts, r.community + 1),
        row_key(r.image_id, "dog" if r.label == "cat" else "cat", r.group, r.context, r.contexts, r.community),
        row_key(r.image_id, r.label, r.group, r.context, (*r.contexts, "extra"), r.community),
        row_key(r.image_id, r.label, r.group, r.context, r.contexts, None),
    ]
    assert test.foreign(changed).all()


def test_members_follow_the_rows_when_images_are_skipped(planned):
    tp, _, _ = planned
    drop = {tp.splits["test"][0].image_id, tp.splits["train"][0].image_id}
    fewer = tp.without_images(drop)
    for split, rows in fewer.splits.items():
        m = fewer.spec.members_of(split)
        assert m.n == len(rows) and m.same_rows(_keys(rows))
    assert fewer.spec.members_of("test").foreign(_keys(tp.splits["test"][:1])).all()


def test_a_large_split_keeps_a_bounded_filter():
    """100,000 rows: the filter trades bits for size (P = 8), at most MEMBERS_BUDGET_BITS; its false passes are
    about 2**-P (measured here on 20,000 other rows)."""
    keys = [row_key(str(i), "cat", "cat(x)", "x", ["x"], 0) for i in range(100_000)]
    m = SplitMembers.of("train", keys)
    assert m.filter_bits == 8 and len(base64.b64decode(m.filter)) == 125_000 <= MEMBERS_BUDGET_BITS // 8  # 122 KiB
    assert not m.foreign(keys).any() and m.same_rows(keys)
    other = [row_key(str(i), "dog", "dog(x)", "x", ["x"], 0) for i in range(20_000)]
    assert 1 - m.foreign(other).mean() < 2 * 2**-8
    small = SplitMembers.of("test", keys[:1000])
    assert small.filter_bits == MEMBERS_BITS_MAX and small.foreign(other).all()


def test_a_changed_members_record_is_refused(planned):
    tp, _, _ = planned
    data = json.loads(tp.spec.to_json())
    first = data["members"][0]
    cases = [
        ({**first, "filter": first["filter"][:-8]}, "bytes"),
        ({**first, "filter": "*" + first["filter"][1:]}, "base64"),
        ({**first, "digest": "x" * 64}, "sha256"),
        ({**first, "filter_bits": 40}, "out of range"),
        ({**first, "n": first["n"] + 1}, "split_sizes"),
    ]
    for changed, message in cases:
        with pytest.raises(InputFormatError, match=message):
            ShiftSpec.from_dict({**data, "members": [changed, *data["members"][1:]]}, "shift_spec.json")
    with pytest.raises(InputFormatError, match="split_sizes"):
        ShiftSpec.from_dict({**data, "members": data["members"][1:]})


def test_a_version_4_spec_reads_without_members(planned):
    tp, _, _ = planned
    data = {k: v for k, v in json.loads(tp.spec.to_json()).items() if k not in ("members", "facts_sha256")}
    old = ShiftSpec.from_dict({**data, "spec_version": 4})
    assert old.members is None and old.members_of("test") is None and old.spec_version == 4
    with pytest.raises(InputFormatError, match="no 'members' key"):
        ShiftSpec.from_dict({**data, "spec_version": 4, "members": None})
    with pytest.raises(InputFormatError, match="members"):
        ShiftSpec.from_dict({**data, "spec_version": 5})  # version 5 requires it
