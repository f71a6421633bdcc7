"""Hierarchies: WordNet hypernym closure, the published tree as published, the pinned `paper` fetch."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pytest

import metashift_hf.sources.download
import metashift_hf.sources.manifest
from metashift_hf.core.errors import ChecksumError, InputFormatError, MetashiftError, UnknownNameError
from metashift_hf.sources.manifest import paper_tree_path
from metashift_hf.wordnet_match.hierarchy import load_hierarchy, tree_hierarchy


PAPER_SHA = "403e1dc7d82efb3651d672b6a1cf4318922c9776e92c288c3845e6a92e28f98c"


@pytest.fixture(scope="module")
def tree_file(shared_ref) -> Path:
    return shared_ref / "metashift" / "imagenet1k_node_names.json"


def test_wordnet_hierarchy_is_the_1859_node_closure(wn):
    h = load_hierarchy("wordnet", wn)
    assert len(h.nodes) == 1859  # 1,860 synsets minus the root entity.n.01, as the tree walker drops its root
    assert h.root == "n00001740" and h.root not in h.nodes
    assert len(h.imagenet_index) == 1000  # every class is a leaf
    assert h.depth["n02084071"] == 8  # dog.n.01
    cat_leaves = {h.imagenet_index[x] for x in h.leaves_under("n02121620")}  # cat.n.01
    assert {281, 282, 283, 284, 285} <= cat_leaves and 291 not in cat_leaves  # domestic cats, not lion


def test_published_tree_read_as_published(wn, tree_file):
    h = tree_hierarchy(tree_file, wn)
    assert h.root == "fall11"
    assert len(h.nodes) == 1776  # 1,777 unique wnids minus airliner, hidden under "child  ren"
    assert h.hidden == {"n02691156": "child  ren"}  # airplane
    assert h.hidden_ids == {"n02690373": "n02691156"}  # airliner
    assert h.children["n02691156"] == ()  # airplane looks like a leaf to the walker
    assert "n02690373" not in h.nodes
    assert len(h.imagenet_index) == 999 and 404 not in h.imagenet_index.values()
    assert h.provenance["sha256"] == PAPER_SHA


@pytest.mark.parametrize(
    "data, message",
    [
        ([{"id": "fall11"}], "top level"),
        ({"name": "no id"}, "top level"),
        ({"id": "fall11", "children": {"id": "n02084071"}}, "not a list"),
        ({"id": "fall11", "children": [{"name": "dog"}]}, "child 0"),
        ({"id": "fall11", "children": ["n02084071"]}, "child 0"),
        ({"id": "fall11", "children": [{"id": "dog"}]}, "not a wnid"),
        ({"id": "fall11", "children": [{"id": "n02084071", "children": [{"id": "n02084071"}]}]}, "below itself"),
    ],
)
def test_tree_of_the_wrong_shape_is_a_clear_error(tmp_path, data, message):
    path = tmp_path / "tree.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputFormatError, match=message) as err:
        tree_hierarchy(path)
    assert str(path) in err.value.what and err.value.fix


def test_tree_file_problems(tmp_path, wn):
    with pytest.raises(InputFormatError, match="does not exist"):
        tree_hierarchy(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputFormatError, match="not JSON"):
        tree_hierarchy(bad)
    stray = tmp_path / "stray.json"
    stray.write_text(json.dumps({"id": "fall11", "children": [{"id": "n99999999"}]}))
    with pytest.raises(UnknownNameError, match="n99999999 is not a WordNet 3.0 noun"):
        tree_hierarchy(stray, wn)
    with pytest.raises(UnknownNameError, match="unknown hierarchy"):
        load_hierarchy("imagenet", wn)


class _Server:
    """A loopback HTTP server answering every GET with ``body`` (or the asked ``bytes=N-`` range)."""

    def __init__(self, body: bytes):
        payload = body

        class Handler(http.server.BaseHTTPRequestHandler):
            hits = 0
            ranges: list = []

            def do_GET(self):  # noqa: N802 (stdlib name)
                Handler.hits += 1
                start = 0
                if self.headers.get("Range"):
                    Handler.ranges.append(self.headers["Range"])
                    start = int(self.headers["Range"].split("=")[1].rstrip("-"))
                self.send_response(206 if start else 200)
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(payload) - 1}/{len(payload)}")
                self.send_header("Content-Length", str(len(payload) - start))
                self.end_headers()
                self.wfile.write(payload[start:])

            def log_message(self, *args):
                pass

        self.handler = Handler
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/imagenet1k_node_names.json"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_paper_hierarchy_fetched_once_with_pinned_sha(tmp_path, wn, tree_file, monkeypatch):
    server = _Server(tree_file.read_bytes())
    try:
        monkeypatch.setenv("METASHIFT_HF_PAPER_TREE_URL", server.url)
        h = load_hierarchy("paper", wn, paper_tree=paper_tree_path(cache_dir=tmp_path))
        assert h.name == "paper" and len(h.nodes) == 1776
        cached = tmp_path / "hierarchies" / "imagenet1k_node_names.json"
        assert cached.read_bytes() == tree_file.read_bytes()
        assert server.handler.hits == 1
    finally:
        server.close()
    # cached: no network needed any more
    monkeypatch.setenv("METASHIFT_HF_PAPER_TREE_URL", "http://127.0.0.1:9/unreachable")
    assert paper_tree_path(cache_dir=tmp_path) == cached


def test_paper_fetch_with_wrong_checksum_keeps_nothing(tmp_path, tree_file):
    server = _Server(tree_file.read_bytes().replace(b"airplane", b"aeroplan", 1))
    try:
        with pytest.raises(ChecksumError) as err:
            paper_tree_path(url=server.url, cache_dir=tmp_path)
    finally:
        server.close()
    assert PAPER_SHA in err.value.what and server.url in err.value.what and "tree:PATH" in err.value.fix
    folder = tmp_path / "hierarchies"
    assert not folder.exists() or list(folder.iterdir()) == []


def test_paper_fetch_unreachable_says_what_to_do(tmp_path):
    with pytest.raises(MetashiftError) as err:
        paper_tree_path(url="http://127.0.0.1:9/imagenet1k_node_names.json", cache_dir=tmp_path, timeout=5)
    assert "could not fetch" in err.value.what and "tree:PATH" in err.value.fix
    assert "--tree-url" in err.value.fix and "metashift-hf download --register imagenet-tree PATH" in err.value.fix
    assert not (tmp_path / "hierarchies" / "imagenet1k_node_names.json").exists()


def test_paper_tree_goes_through_the_one_downloader(tmp_path, tree_file, monkeypatch):
    """The tree is fetched by download.download_file (resumable, sha256 before the final name):
    a partial file from an interrupted run is continued with a Range request."""
    body = tree_file.read_bytes()
    folder = tmp_path / "hierarchies"
    folder.mkdir()
    (folder / "imagenet1k_node_names.json.part").write_bytes(body[:1000])
    seen = []
    real = metashift_hf.sources.download.download_file
    monkeypatch.setattr(
        metashift_hf.sources.manifest, "download_file", lambda *a, **k: seen.append(k) or real(*a, **k)
    )
    server = _Server(body)
    try:
        path = paper_tree_path(url=server.url, cache_dir=tmp_path)
    finally:
        server.close()
    assert path.read_bytes() == body and seen and seen[0]["urls"] == [server.url]
    assert server.handler.ranges == ["bytes=1000-"]
