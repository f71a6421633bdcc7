"""Hardening, hangs and memory: hostile pickles of about a kilobyte are refused in bounded time.

Each case is a pickle that made `build` hang, hash for ever or exhaust memory, or end in a
traceback; each must now give one `error:`/`fix:` line quickly (the child process is killed
otherwise). And a valid protocol-2 pickle (`__builtin__.set`) must load, not be refused.
"""

from __future__ import annotations

import collections
import pickle

import pytest
from hardening_inputs import run_cli_bounded, small_subsets

from metashift_hf.builders.pickles import load_candidate_pickle
from metashift_hf.core.errors import UnsafePickleError


PROTO2 = b"\x80\x02"


def _shared_tuple(levels: int) -> bytes:
    """The opcodes (no header, no STOP) of a tuple with 2**levels leaves in ``levels`` memo entries."""
    t: tuple = ("x",)
    for _ in range(levels):
        t = (t, t)
    return pickle.dumps(t, protocol=2)[2:-1]


def _shared_list(levels: int) -> bytes:
    node: list = ["x"]
    for _ in range(levels):
        node = [node, node]
    return pickle.dumps({"dog(ball)": node}, protocol=2)


def _deep_list(depth: int) -> bytes:
    # {"dog(ball)": [[[...]]]}: built without recursion, but any walk of it (repr, compare) recurses
    return PROTO2 + b"}" + b"X\x09\x00\x00\x00dog(ball)" + b"]" * depth + b"a" * (depth - 1) + b"s" + b"."


def _tuple_key() -> bytes:
    # {<2^60-leaf tuple>: []}: SETITEM hashes the key while unpickling
    return PROTO2 + b"}" + _shared_tuple(60) + b"]" + b"s" + b"."


def _tuple_in_set() -> bytes:
    # set([<2^60-leaf tuple>]): the allowed set(...) hashes its member
    return PROTO2 + b"cbuiltins\nset\n" + b"]" + _shared_tuple(60) + b"a" + b"\x85" + b"R" + b"."


HOSTILE = {
    "shared-list-2^40-in-error-message": _shared_list(40),
    "2^60-leaf-tuple-as-dict-key": _tuple_key(),
    "2^60-leaf-tuple-inside-set": _tuple_in_set(),
    "200000-deep-list": _deep_list(200_000),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_pickle_is_refused_quickly(tmp_path, name):
    path = tmp_path / "hostile.pkl"
    path.write_bytes(HOSTILE[name])
    assert path.stat().st_size < 700_000
    result = run_cli_bounded("build", "--candidate-subsets", path, "--out", tmp_path / "art", "--no-plots", timeout=30)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr and lines[-2].startswith("error: ") and lines[-1].startswith("  fix: ")
    assert len(result.stderr) < 2000  # no walk of the structure in the message


def test_hostile_pickle_in_process_names_the_reason(tmp_path):
    path = tmp_path / "h.pkl"
    path.write_bytes(_shared_list(6))
    with pytest.raises(UnsafePickleError, match="shared reference"):
        load_candidate_pickle(path)
    path.write_bytes(_deep_list(50))
    with pytest.raises(UnsafePickleError, match="nesting deeper"):
        load_candidate_pickle(path)


@pytest.mark.parametrize("protocol", [0, 1, 2])
def test_valid_old_protocol_pickle_loads(tmp_path, protocol):
    d = collections.defaultdict(set)
    for k, v in small_subsets().items():
        d[k] |= v
    path = tmp_path / f"p{protocol}.pkl"
    path.write_bytes(pickle.dumps(d, protocol=protocol))  # names __builtin__.set, as Python 2 wrote it
    assert b"__builtin__" in path.read_bytes()
    c = load_candidate_pickle(path)
    assert c.images("cat(ctx0)") == frozenset(d["cat(ctx0)"])


@pytest.mark.parametrize("image_id", ["", " 1", "../evil", "a\\b", "a\0"])
def test_unusable_image_id_in_a_pickle_is_refused(tmp_path, image_id):
    """Ids name files (<id>.jpg): an empty, padded or path-like id is refused, as in scene graphs."""
    from metashift_hf.core.errors import InputFormatError

    subsets = small_subsets()
    subsets["cat(ctx0)"].add(image_id)
    path = tmp_path / "ids.pkl"
    path.write_bytes(pickle.dumps(subsets, protocol=4))
    with pytest.raises(InputFormatError, match=r"cat\(ctx0\).*empty, padded with spaces or holds a path character"):
        load_candidate_pickle(path)
