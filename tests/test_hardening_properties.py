"""Issue 22 parts 2-3, property-based (hypothesis): the option checks, the Python API's argument types and
the readers (tags CSV, COCO JSON, predictions files) answer any input with a result or a MetashiftError,
never a traceback, and what they accept is what they claim (in range, finite, the same from CSV and parquet).

Deterministic (derandomize: the same examples on every run, no example database) and small: all tests
of this module together take a few seconds (measured in the issue's closing note).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hardening_inputs import tiny_artifact
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metashift_hf import cli
from metashift_hf.builders.artifact import Artifact
from metashift_hf.builders.coco import read_coco_annotations
from metashift_hf.builders.tags import read_tags_file
from metashift_hf.core import options as opt
from metashift_hf.core.errors import MetashiftError
from metashift_hf.hub import api
from metashift_hf.hub.task_data import DEFAULT_SEED, TaskRef
from metashift_hf.research.score import Predictions, score_plan


FAST = settings(
    max_examples=40, derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
SLOWER = settings(FAST, max_examples=20)  # examples that plan a task or write files

# anything a caller might pass where a number or a name is expected
ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
NUMBER_TEXT = st.one_of(
    st.text(max_size=10),
    st.integers(-(2**40), 2**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["0", "-0", "1e3", " 7 ", "+3", "0x10", "1_000", "nan", "-inf", "4294967296"]),
)

INT_CHECKS = [
    (opt.positive_int, 1, opt.INT_MAX),
    (opt.non_negative_int, 0, opt.INT_MAX),
    (opt.seed, 0, opt.SEED_MAX),
    (opt.int_at_least(2), 2, opt.INT_MAX),
]
REAL_CHECKS = [
    (opt.positive_float, 0.0, math.inf, True, False),
    (opt.non_negative_float, 0.0, math.inf, False, False),
    (opt.probability, 0.0, 1.0, False, False),
    (opt.level, 0.0, 1.0, True, True),
]


@FAST
@given(value=st.one_of(NUMBER_TEXT, ANY))
def test_integer_checks_return_an_integer_in_range_or_refuse(value):
    for check, low, high in INT_CHECKS:
        try:
            n = check(value, "n")
        except opt.OptionError:
            continue
        assert type(n) is int and low <= n <= high
        assert not isinstance(value, (bool, float))  # never rounded, never a bool
        assert n == int(value.strip() if isinstance(value, str) else value)


@FAST
@given(value=st.one_of(NUMBER_TEXT, ANY))
def test_real_checks_return_a_finite_number_in_range_or_refuse(value):
    for check, low, high, low_open, high_open in REAL_CHECKS:
        try:
            x = check(value, "x")
        except opt.OptionError:
            continue
        assert type(x) is float and math.isfinite(x)
        assert (low < x if low_open else low <= x) and (x < high if high_open else x <= high)


@FAST
@given(value=NUMBER_TEXT)
def test_command_line_numbers_parse_only_in_range(value):
    """The parser itself refuses (exit 2) what the checks refuse; what it accepts is in range."""
    argv = ["experiment", "conflicts", "--artifact", "A", "--out", "O", "--lr", value, "--steps", value]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = cli.build_parser(argv).parse_args(argv)
    except SystemExit as exc:
        assert exc.code == 2 and "Traceback" not in err.getvalue()
        return
    assert math.isfinite(args.lr) and args.lr > 0 and args.steps >= 1


@FAST
@given(value=ANY)
def test_names_are_a_list_of_distinct_strings_or_refused(value):
    try:
        names = opt.names(value, "classes")
    except opt.OptionError:
        return
    assert isinstance(names, tuple) and len(set(names)) == len(names) >= 1
    assert all(isinstance(n, str) and n.strip() for n in names)


@pytest.fixture(scope="module")
def art(tmp_path_factory) -> Artifact:
    return Artifact.load(tiny_artifact(tmp_path_factory.mktemp("props") / "art").root)


@SLOWER
@given(task=st.one_of(ANY, st.sampled_from(["class-cat", "classes", "class-unicorn"])), seed=ANY)
def test_plan_answers_any_argument_types_with_a_plan_or_a_clear_error(art, task, seed):
    try:
        tp = api.plan(TaskRef(task, artifact=art, seed=seed))
    except MetashiftError:
        return
    # a TaskRef checks (and converts) its seed where it is made; None is the default seed (review case N-T08)
    want = DEFAULT_SEED if seed is None else opt.seed(seed, "seed")
    assert task in ("class-cat", "classes") and tp.spec.seed == want and not isinstance(seed, bool)


@SLOWER
@given(splits=st.one_of(ANY, st.lists(st.sampled_from(["train", "test", "validation", ""]), max_size=3)))
def test_score_answers_any_splits_with_scores_or_a_clear_error(art, splits):
    tp = api.plan(TaskRef("class-cat", artifact=art))
    ids = list(tp.table()["image_id"])
    try:
        scores = score_plan({"image_id": ids, "prediction": ["cat"] * len(ids)}, tp, splits=splits)
    except MetashiftError:
        return
    assert list(scores.splits) == (["train"] if splits is None else splits)  # class-cat has one split, train


# ---------------------------------------------------------------------------------------------- readers

JSON_SCALAR = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**66), 2**66), st.floats(allow_nan=False), st.text(max_size=6)
)
JSON_ANY = st.recursive(
    JSON_SCALAR,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=8,
)
ID = st.one_of(st.integers(0, 5), st.integers(-(2**64), 2**64), JSON_SCALAR)


def coco_docs():
    image = st.fixed_dictionaries({"id": ID}, optional={"width": ID, "height": ID, "file_name": JSON_SCALAR})
    ann = st.fixed_dictionaries({"image_id": ID, "category_id": ID})
    cat = st.fixed_dictionaries(
        {"id": ID, "name": st.one_of(st.sampled_from(["cat", "dog", "sofa"]), JSON_SCALAR)},
        optional={"supercategory": JSON_SCALAR},
    )
    doc = st.fixed_dictionaries(
        {},
        optional={
            "images": st.one_of(st.lists(image, max_size=4), JSON_ANY),
            "annotations": st.one_of(st.lists(ann, max_size=5), JSON_ANY),
            "categories": st.one_of(st.lists(cat, max_size=3), JSON_ANY),
            "info": JSON_ANY,
        },
    )
    return st.one_of(doc, JSON_ANY)


@FAST
@given(doc=coco_docs())
def test_coco_reader_reads_or_refuses_any_json(doc):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "instances.json"
        path.write_text(json.dumps(doc))
        try:
            coco = read_coco_annotations([path])
        except MetashiftError:
            return
    ids = [int(i) for i in coco.images.column("image_id").to_pylist()]
    assert all(0 <= i < 2**63 for i in ids)
    assert set(coco.tags.tags) <= {c["name"] for c in doc["categories"]}  # every tag is a defined category


CSV_TEXT = st.text(alphabet=st.sampled_from(list('ab1,;"\n\r\t é\x00')), max_size=40)


@FAST
@given(body=CSV_TEXT, header=st.sampled_from(["image_id,tag\n", "image_id,tag,category\n", "tag\n", ""]))
def test_tags_reader_reads_or_refuses_any_csv(body, header):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tags.csv"
        path.write_text(header + body, encoding="utf-8")
        try:
            table = read_tags_file(path)
        except MetashiftError:
            return
    assert len(table.image_codes) == len(table.tag_codes)
    assert all(t and t == t.strip() for t in table.tags)


LABELS = st.sampled_from(["0", "1", "2", "3", "cat", "dog", "1.0", "-1", " 1"])


@FAST
@given(
    classes=st.sampled_from([("cat", "dog"), ("1", "2", "3"), ("0", "1")]),
    labels=st.one_of(st.lists(LABELS, min_size=1, max_size=5), st.lists(st.integers(-2, 4), min_size=1, max_size=5)),
)
def test_predictions_read_the_same_from_csv_and_parquet(classes, labels):
    frame = pd.DataFrame({"image_id": [f"i{k}" for k in range(len(labels))], "prediction": labels})
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, write in (("p.csv", lambda p: frame.to_csv(p, index=False)), ("p.parquet", frame.to_parquet)):
            write(Path(tmp) / name)
            try:
                results.append(Predictions.read(Path(tmp) / name, classes).predicted.tolist())
            except MetashiftError as exc:
                results.append(type(exc).__name__)
    assert results[0] == results[1]
    if isinstance(results[0], list):
        assert all(0 <= i < len(classes) for i in results[0])
        texts = [str(v) for v in labels]
        if any(t in classes for t in texts):  # names first: each row is the class it names
            assert [classes[i] for i in results[0]] == texts


@FAST
@given(
    rows=st.lists(
        st.tuples(
            st.floats(allow_nan=True, allow_infinity=True, width=32),
            st.floats(allow_nan=True, allow_infinity=True, width=32),
        ),
        min_size=1,
        max_size=4,
    ),
    prefix=st.sampled_from(["prob_", "logit_"]),
    prediction=st.one_of(st.none(), st.lists(st.sampled_from(["cat", "dog"]), min_size=4, max_size=4)),
    use=st.sampled_from([None, "prediction", "probabilities"]),
)
def test_score_columns_are_read_or_refused(rows, prefix, prediction, use):
    frame = pd.DataFrame(
        {
            "image_id": [f"i{k}" for k in range(len(rows))],
            f"{prefix}cat": [r[0] for r in rows],
            f"{prefix}dog": [r[1] for r in rows],
        }
    )
    if prediction is not None:
        frame["prediction"] = prediction[: len(rows)]
    try:
        preds = Predictions.read(frame, ("cat", "dog"), use=use)
    except MetashiftError:
        return
    if preds.probabilities is not None:
        assert np.isfinite(preds.probabilities).all() and np.allclose(preds.probabilities.sum(axis=1), 1)
        top = preds.probabilities.max(axis=1)
        assert (preds.probabilities[np.arange(len(rows)), preds.predicted] == top).all()
    if prediction is not None and use != "probabilities":
        assert [("cat", "dog")[i] for i in preds.predicted] == prediction[: len(rows)]
