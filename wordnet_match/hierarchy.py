"""ImageNet-1k hierarchies, chosen by name: ``wordnet`` (hypernym closure), ``tree:PATH``, ``paper``.

Every hierarchy is a rooted DAG over wnids. The root (``fall11`` in the published tree, ``entity.n.01``
for WordNet) is where walks start and is not itself a matchable node, exactly like the published
walker that drops its root. Leaves are nodes without children; ImageNet-1k classes are leaves.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from metashift_hf.core.errors import InputFormatError, MetashiftError, UnknownNameError
from metashift_hf.core.fsutil import sha256_file
from metashift_hf.core.registry import Registry

from .imagenet import imagenet_classes, imagenet_synsets
from .wordnet import synset_of_wnid, wnid_of


HIERARCHY_CHOICES = "wordnet | paper | tree:PATH"
_WNID = re.compile(r"^n\d{8}$")


@dataclass
class Hierarchy:
    name: str  # "wordnet", "paper" or "tree:PATH"
    root: str
    children: dict[str, tuple[str, ...]]  # every node reachable from root -> ordered children
    provenance: dict = field(default_factory=dict)  # file path/sha256 or WordNet version
    hidden: dict[str, str] = field(default_factory=dict)  # node -> key that hides a subtree (quirks)
    hidden_ids: dict[str, str] = field(default_factory=dict)  # id seen only in a hidden subtree -> its node

    def __post_init__(self) -> None:
        # Kahn's algorithm: a repeated id below itself would make every walk endless.
        indegree = {n: 0 for n in self.children}
        for kids in self.children.values():
            for k in kids:
                indegree[k] += 1
        ready = [n for n, d in indegree.items() if d == 0]
        done = 0
        while ready:
            node = ready.pop()
            done += 1
            for k in self.children[node]:
                indegree[k] -= 1
                if indegree[k] == 0:
                    ready.append(k)
        if done != len(self.children) or ready or indegree.get(self.root, 1) != 0:
            looped = sorted(n for n, d in indegree.items() if d > 0)[:5]
            raise InputFormatError(
                f"hierarchy {self.name}: a node appears below itself (cycle through {looped})",
                "a hierarchy must be a tree or DAG rooted at its top node; fix the file",
            )

    @cached_property
    def nodes(self) -> frozenset[str]:
        """Matchable nodes: everything reached from the root through ``children``, minus the root."""
        return frozenset(self.children) - {self.root}

    @cached_property
    def depth(self) -> dict[str, int]:
        """Level of each node = shortest number of edges from the root (root = 0)."""
        depth = {self.root: 0}
        frontier = [self.root]
        while frontier:
            nxt = []
            for node in frontier:
                for child in self.children[node]:
                    if child not in depth:
                        depth[child] = depth[node] + 1
                        nxt.append(child)
            frontier = nxt
        return depth

    @cached_property
    def parents(self) -> dict[str, tuple[str, ...]]:
        parents: dict[str, list[str]] = {n: [] for n in self.children}
        for node in sorted(self.children):
            for child in self.children[node]:
                parents[child].append(node)
        return {n: tuple(sorted(set(p))) for n, p in parents.items()}

    @cached_property
    def _leaves_memo(self) -> dict[str, frozenset[str]]:
        memo: dict[str, frozenset[str]] = {}
        # children before parents: decreasing longest-path order via iterative post-order
        for start in sorted(self.children):
            stack = [(start, False)]
            while stack:
                node, expanded = stack.pop()
                if node in memo:
                    continue
                kids = self.children[node]
                if not kids:
                    memo[node] = frozenset([node])
                elif expanded:
                    memo[node] = frozenset().union(*(memo[k] for k in kids))
                else:
                    stack.append((node, True))
                    stack.extend((k, False) for k in kids if k not in memo)
        return memo

    def leaves_under(self, node: str) -> frozenset[str]:
        """Leaf nodes at or below ``node`` (a leaf is a node with no children, as the walker sees it)."""
        return self._leaves_memo[node]

    def ancestors(self, node: str) -> frozenset[str]:
        """``node`` and every node above it, root included (memoised: hierarchies are small)."""
        memo = self._ancestors_memo
        if node not in memo:
            seen = {node}
            stack = [node]
            while stack:
                for p in self.parents[stack.pop()]:
                    if p not in seen:
                        seen.add(p)
                        stack.append(p)
            memo[node] = frozenset(seen)
        return memo[node]

    @cached_property
    def _ancestors_memo(self) -> dict[str, frozenset[str]]:
        return {}

    def topmost(self, wanted: set[str]) -> list[str]:
        """Nodes in ``wanted`` that the walker from the root reaches before any other node in ``wanted``
        (it counts such a node's subtree and does not descend): those with no proper ancestor in ``wanted``."""
        return sorted(n for n in wanted if len(self.ancestors(n) & wanted) == 1)

    @cached_property
    def imagenet_index(self) -> dict[str, int]:
        """wnid -> ImageNet-1k class index for the leaves that are ImageNet-1k classes."""
        by_wnid = {c.wnid: c.index for c in imagenet_classes()}
        return {n: by_wnid[n] for n in self.nodes if n in by_wnid and not self.children[n]}


# ---------------------------------------------------------------- WordNet hypernym closure


def wordnet_hierarchy(wn) -> Hierarchy:
    """All hypernyms (every path, instance hypernyms included) of the 1,000 classes; root entity.n.01."""
    children: dict[str, set[str]] = {}
    stack = list(imagenet_synsets(wn))
    seen = set()
    while stack:
        synset = stack.pop()
        if synset in seen:
            continue
        seen.add(synset)
        children.setdefault(wnid_of(synset), set())
        for parent in synset.hypernyms() + synset.instance_hypernyms():
            children.setdefault(wnid_of(parent), set()).add(wnid_of(synset))
            stack.append(parent)
    roots = sorted(n for n in children if not any(n in kids for kids in children.values()))
    if len(roots) != 1:
        raise InputFormatError(
            f"the WordNet hypernym closure of ImageNet-1k has roots {roots}, expected one (entity.n.01)",
            "use WordNet 3.0",
        )
    return Hierarchy(
        name="wordnet",
        root=roots[0],
        children={n: tuple(sorted(k)) for n, k in sorted(children.items())},
        provenance={"wordnet_version": wn.get_version()},
    )


# ---------------------------------------------------------------- published tree format


def _tree_error(path, where: str, problem: str) -> InputFormatError:
    return InputFormatError(
        f"{path}: {where} {problem}",
        'give a tree in the published format: nested objects {"id": wnid, "name": ..., "children": [...]} '
        "with the root's id not a wnid (e.g. 'fall11'), like imagenet1k_node_names.json",
    )


def parse_tree(data, path: str = "tree"):
    """Read a published-format tree as the published walker does: only the key ``children`` is followed.

    Returns (root id, children per wnid with repeats merged in first-seen order, {node: key hiding a
    subtree}, {id only found in a hidden subtree: the node hiding it}).
    """
    if not isinstance(data, dict) or not isinstance(data.get("id"), str):
        raise _tree_error(path, "the top level", "must be an object with a string 'id'")
    children: dict[str, list[str]] = {}
    hidden: dict[str, str] = {}
    hidden_ids: dict[str, str] = {}
    stack = [(data, "root")]
    while stack:
        node, where = stack.pop()
        if not isinstance(node, dict) or not isinstance(node.get("id"), str):
            raise _tree_error(path, where, "is not an object with a string 'id'")
        nid = node["id"]
        if node is not data and not _WNID.match(nid):
            raise _tree_error(path, where, f"has id {nid!r}, which is not a wnid like n02084071")
        kids = node.get("children", [])
        if not isinstance(kids, list):
            raise _tree_error(path, f"{where} ({nid})", "has 'children' that is not a list")
        for key, value in node.items():
            if key != "children" and "child" in key.replace(" ", "") and isinstance(value, list):
                hidden[nid] = key  # e.g. the published "child  ren": not walked, as published
                for hidden_id in _all_ids(value):
                    hidden_ids.setdefault(hidden_id, nid)
        merged = children.setdefault(nid, [])
        for i, kid in enumerate(kids):
            if not isinstance(kid, dict) or not isinstance(kid.get("id"), str):
                raise _tree_error(path, f"{where} ({nid}) child {i}", "is not an object with a string 'id'")
            if kid["id"] not in merged:
                merged.append(kid["id"])
            stack.append((kid, f"{where}/{i}"))
    reachable_hidden = {h: p for h, p in hidden_ids.items() if h not in children}
    return data["id"], {n: tuple(k) for n, k in children.items()}, hidden, reachable_hidden


def _all_ids(value) -> list[str]:
    """Every string 'id' inside a JSON value (used only to explain what a quirk hides)."""
    found, stack = [], [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("id"), str):
                found.append(item["id"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def tree_hierarchy(path: str | os.PathLike, wn=None, name: str | None = None) -> Hierarchy:
    """A hierarchy from a tree file in the published format; with ``wn``, every node must be a WN 3.0 noun."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputFormatError(f"tree file {path} does not exist", "check the path after tree:") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputFormatError(f"tree file {path} is not JSON: {exc}", "give the published JSON tree") from exc
    except RecursionError:
        raise InputFormatError(
            f"tree file {path} is nested too deeply to read", "give the published JSON tree"
        ) from None
    root, children, hidden, hidden_ids = parse_tree(data, str(path))
    if wn is not None:
        for nid in sorted(set(children) - {root}):
            synset_of_wnid(wn, nid, f"tree file {path}, node")
    if root in {k for kids in children.values() for k in kids}:
        raise _tree_error(path, "the root", f"{root!r} appears again below itself")
    return Hierarchy(
        name=name or f"tree:{path}",
        root=root,
        children=children,
        provenance={"path": str(path), "sha256": sha256_file(path)},
        hidden=hidden,
        hidden_ids=hidden_ids,
    )


@dataclass(frozen=True)
class HierarchyRequest:
    """What a hierarchy entry reads: the text after ``name:`` (``tree:PATH``), WordNet, and the local
    copy of the published tree (``paper``; this package fetches nothing, so its caller finds it)."""

    argument: str
    wn: object
    paper_tree: str | os.PathLike | None = None


HIERARCHIES: Registry[type] = Registry("hierarchy", f"choose one of: {HIERARCHY_CHOICES}")


@HIERARCHIES.register
class WordNetHierarchy:
    name, takes_argument = "wordnet", False

    @staticmethod
    def load(req: HierarchyRequest) -> Hierarchy:
        return wordnet_hierarchy(req.wn)


@HIERARCHIES.register
class PaperHierarchy:
    name, takes_argument = "paper", False

    @staticmethod
    def load(req: HierarchyRequest) -> Hierarchy:
        if req.paper_tree is None:
            raise MetashiftError(
                "the 'paper' hierarchy needs the published ImageNet tree file, and none was given",
                "run `metashift-hf download --what imagenet-tree` (or `download --register imagenet-tree PATH`), "
                "or use --hierarchy tree:PATH or --hierarchy wordnet",
            )
        return tree_hierarchy(req.paper_tree, req.wn, name="paper")


@HIERARCHIES.register
class TreeHierarchy:
    name, takes_argument = "tree", True

    @staticmethod
    def load(req: HierarchyRequest) -> Hierarchy:
        return tree_hierarchy(req.argument, req.wn)


def load_hierarchy(spec: str, wn, *, paper_tree: str | os.PathLike | None = None) -> Hierarchy:
    """``wordnet`` | ``paper`` | ``tree:PATH`` -> :class:`Hierarchy` (an entry of :data:`HIERARCHIES`).

    ``paper`` is the published tree; this package fetches nothing, so its caller passes the local file
    as ``paper_tree`` (the command line finds it through the data manifest).
    """
    name, sep, argument = str(spec).partition(":")
    entry = HIERARCHIES.get(name) if name in HIERARCHIES else None
    if entry is None or entry.takes_argument != bool(sep and argument) or (sep and not entry.takes_argument):
        raise UnknownNameError(f"unknown hierarchy {spec!r}", HIERARCHIES.fix)
    return entry.load(HierarchyRequest(argument, wn, paper_tree))
