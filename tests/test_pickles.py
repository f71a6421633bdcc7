"""Restricted unpickler and the pinned sha256 of the published pickles."""

from __future__ import annotations

import collections
import pickle

import pytest

from metashift_hf.builders.pickles import KNOWN_PICKLES, load_candidate_pickle, restricted_load, verify_known
from metashift_hf.core.errors import ChecksumError, InputFormatError, UnsafePickleError


def test_loads_published_format(tmp_path):
    d = collections.defaultdict(set)
    d["dog(frisbee)"] |= {"1", "2"}
    d["ocean(dog)"] |= {"2"}
    path = tmp_path / "mine.pkl"
    path.write_bytes(pickle.dumps(d, protocol=3))
    assert restricted_load(path) == d
    c = load_candidate_pickle(path)
    assert c.names == ["dog(frisbee)", "ocean(dog)"] and c.kinds == ["object", "general"]
    assert c.categories == [None, "place"]
    assert c.images("dog(frisbee)") == frozenset({"1", "2"})


def test_forbidden_global_is_refused_and_not_run(tmp_path):
    marker = tmp_path / "ran"
    # a pickle that would call os.system("touch ran") when loaded by the plain unpickler
    payload = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."
    path = tmp_path / "evil.pkl"
    path.write_bytes(payload)
    with pytest.raises(UnsafePickleError) as e:
        restricted_load(path)
    assert "os.system" in e.value.what and str(path) in e.value.what and e.value.fix
    assert not marker.exists()
    other = tmp_path / "ordered.pkl"
    other.write_bytes(pickle.dumps(collections.OrderedDict(a={"1"})))
    with pytest.raises(UnsafePickleError, match="collections.OrderedDict"):
        load_candidate_pickle(other)


@pytest.mark.parametrize(
    "obj, message",
    [
        ([("dog(ball)", {"1"})], "top-level object is list"),
        ({"dog(ball)": "1"}, "maps to str"),
        ({"dog(ball)": {1, 2}}, "holds image id"),
        ({"dog ball": {"1"}}, "not of the form 'subject(context)'"),
    ],
)
def test_wrong_shapes(tmp_path, obj, message):
    path = tmp_path / "x.pkl"
    path.write_bytes(pickle.dumps(obj))
    with pytest.raises(InputFormatError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        load_candidate_pickle(path)
    assert str(path) in e.value.what


def test_truncated_and_missing(tmp_path):
    path = tmp_path / "t.pkl"
    path.write_bytes(pickle.dumps({"dog(ball)": {"1", "2"}})[:-5])
    with pytest.raises(InputFormatError, match="not a readable pickle"):
        restricted_load(path)
    with pytest.raises(InputFormatError, match="does not exist"):
        restricted_load(tmp_path / "nope.pkl")


def test_known_file_checksum(tmp_path, shared_ref):
    real = shared_ref / "metashift" / "attributes-candidate-subsets.pkl"
    assert verify_known(real) == KNOWN_PICKLES["attributes-candidate-subsets.pkl"][1]
    # same name and size as the published file, different bytes -> ChecksumError
    fake = tmp_path / "attributes-candidate-subsets.pkl"
    data = bytearray(real.read_bytes())
    data[100] ^= 0xFF
    fake.write_bytes(bytes(data))
    with pytest.raises(ChecksumError) as e:
        load_candidate_pickle(fake, attributes=True)
    assert str(fake) in e.value.what and "re-download" in e.value.fix
    # the full pickle's name is enough to identify it
    full = tmp_path / "full-candidate-subsets.pkl"
    full.write_bytes(pickle.dumps({"dog(ball)": {"1"}}))
    with pytest.raises(ChecksumError, match="aad22310fe65"):
        load_candidate_pickle(full)
    # an unknown name is not checked
    own = tmp_path / "own.pkl"
    own.write_bytes(pickle.dumps({"dog(ball)": {"1"}}))
    assert verify_known(own) is None
