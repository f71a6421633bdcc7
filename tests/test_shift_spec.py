"""ShiftSpec: frozen, versioned, strict JSON; the public reader metashift_hf.shift_spec."""

from __future__ import annotations

import dataclasses
import json

import pytest

import metashift_hf
from metashift_hf.core.errors import InputFormatError, UnknownNameError
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.tasks.plan import GroupDef, SetSource
from metashift_hf.tasks.shifts import DGGroups, DGSizes, collection, domain_generalisation
from metashift_hf.tasks.spec import SPEC_VERSION, GroupSpec, ShiftDistance, ShiftSpec


def _spec() -> ShiftSpec:
    ids = {f"cat({c})": [f"c{c}{i}" for i in range(30)] for c in "ab"}
    ids |= {f"dog({c})": [f"d{c}{i}" for i in range(30)] for c in "ab"}
    src = SetSource(ids)
    return domain_generalisation(
        "t",
        src,
        DGGroups(
            ("cat", "dog"),
            (GroupDef("cat", "a", ("a",), "a"), GroupDef("dog", "a", ("a",), "a")),
            (GroupDef("cat", "b", ("b",), "b"), GroupDef("dog", "b", ("b",), "b")),
        ),
        sizes=DGSizes(train_per_group=10, validation_per_group=5, id_test_per_group=5),
        distance=ShiftDistance(value=0.5, rule="code", note="n", per_class={"cat": 0.4, "dog": None}),
    ).spec


def test_round_trip_and_frozen():
    spec = _spec()
    assert spec.spec_version == SPEC_VERSION and spec.shift_type == "marginal"
    assert ShiftSpec.from_json(spec.to_json()) == spec == ShiftSpec.from_json(spec.to_json(compact=True))
    data = json.loads(spec.to_json())
    assert data["train_groups"][0]["class"] == "cat" and "cls" not in data["train_groups"][0]
    assert set(spec.groups()) == {"train", "validation", "test", "id_test"}
    assert isinstance(spec.train_groups[0], GroupSpec) and spec.train_groups[0].n == 10
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.seed = 3  # type: ignore[misc]
    coll = collection("c", SetSource({"cat(a)": ["1", "2"]}), contexts={"cat": {"a": frozenset({"1", "2"})}}).spec
    assert ShiftSpec.from_json(coll.to_json()) == coll and coll.shift_type == "none"


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d.update(extra=1), "unknown keys \\['extra'\\]"),
        (lambda d: d.pop("seed"), "missing keys \\['seed'\\]"),
        (lambda d: d["train_groups"][0].update(colour="red"), "GroupSpec has unknown keys"),
        (lambda d: d.update(spec_version=SPEC_VERSION + 1), "spec_version"),
        (lambda d: d.pop("spec_version"), "spec_version None"),
        (lambda d: d.update(shift_type="sideways"), "'sideways' is not one of"),
        (lambda d: d.update(seed="0"), "seed: expected int"),
        (lambda d: d["distance"].update(value="far"), "distance.value"),
        (lambda d: d.update(classes="cat"), "classes: expected a list"),
    ],
)
def test_from_json_refuses_bad_input(change, message):
    data = json.loads(_spec().to_json())
    change(data)
    with pytest.raises(InputFormatError, match=message):
        ShiftSpec.from_json(json.dumps(data))
    with pytest.raises(InputFormatError, match="not valid JSON"):
        ShiftSpec.from_json("{")


def test_public_reader_errors(tmp_path):
    spec = _spec()
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "shift_spec.json").write_text(spec.to_json())
    (tmp_path / "two" / "a").mkdir(parents=True)
    (tmp_path / "two" / "b").mkdir()
    for c in "ab":
        (tmp_path / "two" / c / "shift_spec.json").write_text(spec.to_json())
    # a repo folder's card declares its configs (the spec is read without any parquet row)
    card = "---\nconfigs:\n" + "".join(f"- config_name: {c}\n" for c in "ab") + "---\n"
    (tmp_path / "two" / "README.md").write_text(card)
    (tmp_path / "README.md").write_text("---\nconfigs:\n- config_name: one\n---\n")
    assert (
        metashift_hf.shift_spec(tmp_path / "one")
        == spec
        == metashift_hf.shift_spec(TaskRef(str(tmp_path / "two"), config="b"))
    )
    assert metashift_hf.shift_spec(spec) is spec
    with pytest.raises(UnknownNameError, match="2 configs"):
        metashift_hf.shift_spec(tmp_path / "two")
    with pytest.raises(UnknownNameError, match="did you mean"):
        metashift_hf.shift_spec(TaskRef(tmp_path / "two", config="bb"))
    with pytest.raises(UnknownNameError, match="task id"):
        metashift_hf.shift_spec("paper-dg-cat-dog-1")  # a task id needs artifact=
    with pytest.raises(InputFormatError, match="artifact"):
        metashift_hf.shift_spec(TaskRef(tmp_path / "one", options={"scale": 0.5}))
    with pytest.raises(InputFormatError, match="cannot read a task"):
        metashift_hf.shift_spec(42)
