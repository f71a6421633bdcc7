"""A stdlib loopback server speaking the subset of the Hugging Face Hub HTTP API that
``huggingface_hub`` (create_repo, create_commit with LFS, tree, paths-info, collections,
validate-yaml, whoami) and ``datasets.load_dataset`` (repo info, tree, resolve with ranges)
use. Tests run the real clients against it, in a subprocess whose ``HF_ENDPOINT`` points here,
because both libraries read the endpoint once at import time.

State is in memory: repos hold a linear list of commits (each a full snapshot path -> entry);
LFS objects live in one content-addressed store, so re-uploads of known objects are skipped
exactly as the real Hub does. ``fail`` lets a test make the next N calls of a route fail (500)
to simulate a run that dies halfway: "commit", "commit:<repo_id>" or "lfs-upload".
"""
from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import yaml

# Same rules the Hub applies to repo names (huggingface_hub.utils.validate_repo_id + Hub limits).
_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?$")
_SPLIT_RE = re.compile(r"^\w+(\.\w+)*$")
_LICENSES = {"cc-by-4.0", "mit", "apache-2.0", "cc0-1.0", "other"}
_LFS_SUFFIXES = (".parquet", ".png", ".jpg", ".jpeg", ".arrow", ".bin", ".zip")
_GITATTRIBUTES = b"*.parquet filter=lfs diff=lfs merge=lfs -text\n*.png filter=lfs diff=lfs merge=lfs -text\n"


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _lfs_pointer(oid: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n".encode()


@dataclass
class Entry:
    size: int
    blob: str  # git blob sha1 (of the pointer for LFS files)
    lfs_oid: str | None = None  # sha256 when stored in LFS
    content: bytes | None = None  # regular files only


@dataclass
class Commit:
    oid: str
    title: str
    files: dict[str, Entry]
    date: str


@dataclass
class Repo:
    repo_type: str
    repo_id: str
    private: bool
    commits: list[Commit] = field(default_factory=list)

    @property
    def head(self) -> Commit:
        return self.commits[-1]


@dataclass
class HubState:
    tokens: dict[str, tuple[str, str]]  # token -> (user, "write"|"read")
    orgs: dict[str, set[str]] = field(default_factory=dict)  # org -> member users
    repos: dict[tuple[str, str], Repo] = field(default_factory=dict)
    lfs: dict[str, bytes] = field(default_factory=dict)
    collections: dict[str, dict] = field(default_factory=dict)
    requests: list[tuple[str, str, int]] = field(default_factory=list)
    fail: dict[str, int] = field(default_factory=dict)  # route name -> remaining forced failures
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, method: str, fragment: str) -> int:
        return sum(1 for m, p, _ in self.requests if m == method and fragment in p)


class _Reply(Exception):
    def __init__(self, status: int, body: object = None, headers: dict | None = None) -> None:
        self.status, self.body, self.headers = status, body, headers or {}


def _error(status: int, message: str, code: str | None = None) -> _Reply:
    headers = {"X-Error-Message": " ".join(message.split())}  # header values are one line
    if code:
        headers["X-Error-Code"] = code
    return _Reply(status, {"error": message}, headers)


class _Handler(BaseHTTPRequestHandler):
    server: "_HubHTTPServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    # -- plumbing -------------------------------------------------------------------------
    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _send(self, status: int, body: object, headers: dict | None = None, head_only: bool = False) -> None:
        if isinstance(body, (bytes, bytearray)):
            data, ctype = bytes(body), "application/octet-stream"
        else:
            data, ctype = json.dumps(body).encode(), "application/json"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if not head_only:
            self.wfile.write(data)

    def _dispatch(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        query = urllib.parse.parse_qs(url.query)
        body = self._body() if method in ("POST", "PUT", "PATCH") else b""
        state = self.server.state
        try:
            status, payload, headers = self.server.route(method, path, query, body, self.headers)
        except _Reply as r:
            status, payload, headers = r.status, r.body, r.headers
        with state.lock:
            state.requests.append((method, path, status))
        self._send(status, payload if payload is not None else {}, headers, head_only=method == "HEAD")

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")


class _HubHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: HubState) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state
        self.endpoint = f"http://127.0.0.1:{self.server_address[1]}"

    # -- auth -----------------------------------------------------------------------------
    def _user(self, headers, required: bool) -> tuple[str, str] | None:
        auth = headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            if required:
                raise _error(401, "Invalid credentials in Authorization header")
            return None
        found = self.state.tokens.get(auth[len("Bearer ") :])
        if found is None:
            raise _error(401, "Invalid credentials in Authorization header")
        return found

    def _can_write(self, headers, namespace: str) -> None:
        user, role = self._user(headers, required=True)
        if role != "write":
            raise _error(403, "You don't have the rights to write with this token (read-only token)")
        if namespace != user and user not in self.state.orgs.get(namespace, set()):
            raise _error(403, f"You don't have the rights to create or write to repos under namespace {namespace!r}")

    def _repo(self, repo_type: str, repo_id: str, headers) -> Repo:
        repo = self.state.repos.get((repo_type, repo_id))
        user = self._user(headers, required=False)
        visible = repo is not None and (
            not repo.private or (user and (repo_id.split("/")[0] in (user[0], *self._orgs_of(user[0]))))
        )
        if not visible:
            raise _error(404, f"Repository Not Found for {repo_type}s/{repo_id}", "RepoNotFound")
        return repo

    def _orgs_of(self, user: str) -> list[str]:
        return [org for org, members in self.state.orgs.items() if user in members]

    def _fail_if_asked(self, route: str) -> None:
        with self.state.lock:
            if self.state.fail.get(route, 0) > 0:
                self.state.fail[route] -= 1
                raise _error(500, f"injected failure on {route}")

    # -- routing --------------------------------------------------------------------------
    def route(self, method: str, path: str, query: dict, body: bytes, headers) -> tuple[int, object, dict]:
        m = re.fullmatch(r"/api/(models|datasets|spaces)/([^/]+/[^/]+)(/.*)?", path)
        if path == "/api/whoami-v2" and method == "GET":
            return self._whoami(headers)
        if path == "/api/repos/create" and method == "POST":
            return self._create_repo(json.loads(body or b"{}"), headers)
        if path == "/api/validate-yaml" and method == "POST":
            return self._validate_yaml(json.loads(body or b"{}"))
        if path.startswith("/api/collections"):
            return self._collections(method, path[len("/api/collections") :], query, body, headers)
        if path.startswith("/lfs-upload/") and method == "PUT":
            return self._lfs_put(path[len("/lfs-upload/") :], body)
        if path == "/lfs-verify" and method == "POST":
            oid = json.loads(body)["oid"]
            return (200, {}, {}) if oid in self.state.lfs else (404, {"error": "object missing"}, {})
        lfs = re.fullmatch(r"/(datasets/|spaces/)?([^/]+/[^/]+)\.git/info/lfs/objects/batch", path)
        if lfs and method == "POST":
            return self._lfs_batch(lfs.group(1), lfs.group(2), json.loads(body), headers)
        res = re.fullmatch(r"/(datasets/|spaces/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if res and method in ("GET", "HEAD"):
            return self._resolve(res.group(1), res.group(2), res.group(3), res.group(4), headers)
        if m:
            repo_type, repo_id, rest = m.group(1)[:-1], m.group(2), m.group(3) or ""
            return self._repo_api(method, repo_type, repo_id, rest, query, body, headers)
        raise _error(404, f"loopback hub: no route for {method} {path}")

    def _whoami(self, headers):
        user, role = self._user(headers, required=True)
        orgs = [{"name": o, "type": "org"} for o in sorted(self._orgs_of(user))]
        return 200, {"type": "user", "name": user, "orgs": orgs,
                     "auth": {"type": "access_token", "accessToken": {"displayName": "test", "role": role}}}, {}

    def _create_repo(self, payload: dict, headers):
        repo_type = payload.get("type") or "model"
        name = payload.get("name", "")
        user = self._user(headers, required=True)[0]
        namespace = payload.get("organization") or user
        if not _NAME_RE.fullmatch(name) or "--" in name or ".." in name or name.endswith(".git"):
            raise _error(400, f"Invalid repo name {name!r}: use letters, digits, '-', '_', '.'; max 96 characters")
        self._can_write(headers, namespace)
        repo_id = f"{namespace}/{name}"
        prefix = "" if repo_type == "model" else f"{repo_type}s/"
        url = f"{self.endpoint}/{prefix}{repo_id}"
        with self.state.lock:
            if (repo_type, repo_id) in self.state.repos:
                return 409, {"error": "You already created this repo", "url": url}, {"X-Error-Message": "You already created this repo"}
            # huggingface_hub >= 1 sends "visibility"; older clients send "private".
            repo = Repo(repo_type, repo_id, bool(payload.get("private")) or payload.get("visibility") == "private")
            files = {".gitattributes": Entry(len(_GITATTRIBUTES), git_blob_sha1(_GITATTRIBUTES), None, _GITATTRIBUTES)}
            repo.commits.append(self._make_commit(None, "initial commit", files))
            self.state.repos[(repo_type, repo_id)] = repo
        return 200, {"url": url, "name": repo_id}, {}

    @staticmethod
    def _make_commit(parent: Commit | None, title: str, files: dict[str, Entry]) -> Commit:
        h = hashlib.sha1((parent.oid if parent else "").encode() + title.encode())
        for p in sorted(files):
            h.update(f"{p}\0{files[p].blob}\0".encode())
        h.update(str(time.time_ns()).encode())
        return Commit(h.hexdigest(), title, files, time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()))

    def _validate_yaml(self, payload: dict):
        content = payload.get("content") or ""
        # The client sends the whole README; the metadata is its leading '---' block.
        front = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", content, re.S)
        try:
            meta = yaml.safe_load(front.group(1) if front else content)
        except yaml.YAMLError as exc:
            raise _error(400, f"YAML does not parse: {exc}")
        if not isinstance(meta, dict):
            raise _error(400, "YAML metadata must be a mapping")
        lic = meta.get("license")
        if lic is not None and lic not in _LICENSES:
            raise _error(400, f'"license" must be one of the Hub licence ids, got {lic!r}')
        configs = meta.get("configs", [])
        if not isinstance(configs, list):
            raise _error(400, '"configs" must be a list')
        for c in configs:
            if not isinstance(c, dict) or "config_name" not in c:
                raise _error(400, '"configs" items need a "config_name"')
            for df in c.get("data_files", []) if isinstance(c.get("data_files"), list) else []:
                if isinstance(df, dict) and not _SPLIT_RE.fullmatch(str(df.get("split", ""))):
                    raise _error(400, f"split name {df.get('split')!r} must match {_SPLIT_RE.pattern}")
        if sum(1 for c in configs if c.get("default")) > 1:
            raise _error(400, 'only one config may have "default: true"')
        return 200, {"errors": [], "warnings": []}, {}

    # -- LFS --------------------------------------------------------------------------------
    def _lfs_batch(self, prefix: str | None, repo_id: str, payload: dict, headers):
        repo_type = (prefix or "models/")[:-2]
        self._repo(repo_type, repo_id, headers)
        self._can_write(headers, repo_id.split("/")[0])
        objects = []
        for obj in payload.get("objects", []):
            item = {"oid": obj["oid"], "size": obj["size"]}
            if obj["oid"] not in self.state.lfs:  # already stored objects need no upload
                item["actions"] = {
                    "upload": {"href": f"{self.endpoint}/lfs-upload/{obj['oid']}", "header": {}},
                    "verify": {"href": f"{self.endpoint}/lfs-verify", "header": {}},
                }
            objects.append(item)
        return 200, {"transfer": "basic", "objects": objects}, {}

    def _lfs_put(self, oid: str, body: bytes):
        self._fail_if_asked("lfs-upload")
        if hashlib.sha256(body).hexdigest() != oid:
            raise _error(400, "uploaded content does not match its sha256 oid")
        with self.state.lock:
            self.state.lfs[oid] = body
        return 200, {}, {}

    # -- repo API -----------------------------------------------------------------------------
    def _commit_at(self, repo: Repo, revision: str) -> Commit:
        if revision in ("main", "refs/heads/main"):
            return repo.head
        for c in repo.commits:
            if c.oid == revision:
                return c
        raise _error(404, f"Invalid rev id: {revision}", "RevisionNotFound")

    def _info(self, repo: Repo, commit: Commit) -> dict:
        card = {}
        readme = commit.files.get("README.md")
        if readme is not None and readme.content and readme.content.startswith(b"---"):
            with contextlib.suppress(Exception):
                card = yaml.safe_load(readme.content.decode().split("---", 2)[1]) or {}
        return {
            "_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "author": repo.repo_id.split("/")[0],
            "sha": commit.oid,
            "private": repo.private,
            "gated": False,
            "disabled": False,
            "lastModified": commit.date,
            "createdAt": repo.commits[0].date,
            "tags": [],
            "cardData": card,
            "siblings": [
                {"rfilename": p, "size": e.size, "blobId": e.blob,
                 **({"lfs": {"sha256": e.lfs_oid, "size": e.size, "pointerSize": len(_lfs_pointer(e.lfs_oid, e.size))}} if e.lfs_oid else {})}
                for p, e in sorted(commit.files.items())
            ],
        }

    @staticmethod
    def _tree_item(path: str, e: Entry) -> dict:
        item = {"type": "file", "oid": e.blob, "size": e.size, "path": path}
        if e.lfs_oid:
            item["lfs"] = {"oid": e.lfs_oid, "size": e.size, "pointerSize": len(_lfs_pointer(e.lfs_oid, e.size))}
        return item

    @staticmethod
    def _dirs(files: dict[str, Entry]) -> set[str]:
        out = set()
        for p in files:
            parts = p.split("/")[:-1]
            out.update("/".join(parts[: i + 1]) for i in range(len(parts)))
        return out

    def _listing(self, commit: Commit, base: str, recursive: bool) -> list[dict]:
        base = base.strip("/")
        dirs = self._dirs(commit.files)
        if base and base not in dirs:
            raise _error(404, f"{base} does not exist on main", "EntryNotFound")
        prefix = f"{base}/" if base else ""
        out = []
        for d in sorted(dirs):
            if d.startswith(prefix) and (recursive or "/" not in d[len(prefix):]):
                out.append({"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d})
        for p, e in sorted(commit.files.items()):
            if p.startswith(prefix) and (recursive or "/" not in p[len(prefix):]):
                out.append(self._tree_item(p, e))
        return out

    def _repo_api(self, method, repo_type, repo_id, rest, query, body, headers):
        if rest == "/settings" or rest.startswith("/discussions"):
            raise _error(404, f"loopback hub: {rest} not supported")
        repo = self._repo(repo_type, repo_id, headers)
        if method == "GET" and rest in ("", "/"):
            return 200, self._info(repo, repo.head), {}
        if method == "GET" and rest.startswith("/revision/"):
            return 200, self._info(repo, self._commit_at(repo, rest[len("/revision/"):])), {}
        if method == "GET" and rest.startswith("/tree/"):
            revision, _, sub = rest[len("/tree/"):].partition("/")
            recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
            return 200, self._listing(self._commit_at(repo, revision), sub, recursive), {}
        if method == "POST" and rest.startswith("/paths-info/"):
            commit = self._commit_at(repo, rest[len("/paths-info/"):])
            form = urllib.parse.parse_qs(body.decode()) if body and not body.startswith(b"{") else json.loads(body or b"{}")
            paths = form.get("paths", [])
            paths = [paths] if isinstance(paths, str) else paths
            dirs = self._dirs(commit.files)
            out = []
            for p in paths:
                p = p.strip("/")
                if p in commit.files:
                    out.append(self._tree_item(p, commit.files[p]))
                elif p in dirs:
                    out.append({"type": "directory", "oid": hashlib.sha1(p.encode()).hexdigest(), "size": 0, "path": p})
            return 200, out, {}
        if method == "GET" and rest.startswith("/commits/"):
            self._commit_at(repo, rest[len("/commits/"):])
            commits = [{"id": c.oid, "title": c.title, "message": "", "authors": [], "date": c.date} for c in reversed(repo.commits)]
            return 200, commits, {}
        if method == "GET" and rest == "/refs":
            return 200, {"branches": [{"name": "main", "ref": "refs/heads/main", "targetCommit": repo.head.oid}], "tags": [], "converts": []}, {}
        if method == "POST" and rest.startswith("/preupload/"):
            self._can_write(headers, repo_id.split("/")[0])
            commit = self._commit_at(repo, rest[len("/preupload/"):])
            files = []
            for f in json.loads(body)["files"]:
                sample = base64.b64decode(f["sample"])
                lfs = f["path"].endswith(_LFS_SUFFIXES) or b"\0" in sample or f["size"] > 10_000_000
                old = commit.files.get(f["path"])
                oid = None if old is None else (old.lfs_oid if lfs else old.blob)
                files.append({"path": f["path"], "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid})
            return 200, {"files": files, "commitOid": commit.oid}, {}
        if method == "POST" and rest.startswith("/commit/"):
            return self._commit(repo, rest[len("/commit/"):], body, headers)
        raise _error(404, f"loopback hub: no route for {method} {repo_type}s/{repo_id}{rest}")

    def _commit(self, repo: Repo, revision: str, body: bytes, headers):
        self._can_write(headers, repo.repo_id.split("/")[0])
        self._fail_if_asked("commit")
        self._fail_if_asked(f"commit:{repo.repo_id}")
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        with self.state.lock:
            parent = self._commit_at(repo, revision)
            files = dict(parent.files)
            title = ""
            for line in lines:
                key, value = line["key"], line["value"]
                if key == "header":
                    title = value.get("summary", "")
                    if value.get("parentCommit") and value["parentCommit"] != repo.head.oid:
                        raise _error(412, "A commit has happened since the parent commit")
                elif key == "file":
                    data = base64.b64decode(value["content"])
                    files[value["path"]] = Entry(len(data), git_blob_sha1(data), None, data)
                elif key == "lfsFile":
                    stored = self.state.lfs.get(value["oid"])
                    if stored is None or len(stored) != value["size"]:
                        raise _error(422, f"LFS object {value['oid']} for {value['path']} was never uploaded")
                    pointer = _lfs_pointer(value["oid"], value["size"])
                    files[value["path"]] = Entry(value["size"], git_blob_sha1(pointer), value["oid"])
                elif key == "deletedFile":
                    if files.pop(value["path"], None) is None:
                        raise _error(404, "A file with this name doesn't exist", "EntryNotFound")
                elif key == "deletedFolder":
                    prefix = value["path"].rstrip("/") + "/"
                    files = {p: e for p, e in files.items() if not p.startswith(prefix)}
                else:
                    raise _error(400, f"unknown commit line key {key!r}")
            commit = self._make_commit(parent, title, files)
            repo.commits.append(commit)
        prefix = "" if repo.repo_type == "model" else f"{repo.repo_type}s/"
        return 200, {"success": True, "commitOid": commit.oid,
                     "commitUrl": f"{self.endpoint}/{prefix}{repo.repo_id}/commit/{commit.oid}"}, {}

    def _resolve(self, prefix, repo_id, revision, path, headers):
        repo_type = (prefix or "models/")[:-2]
        repo = self._repo(repo_type, repo_id, headers)
        commit = self._commit_at(repo, revision)
        entry = commit.files.get(path)
        if entry is None:
            raise _error(404, f"Entry not found: {path}", "EntryNotFound")
        data = entry.content if entry.lfs_oid is None else self.state.lfs[entry.lfs_oid]
        out = {"X-Repo-Commit": commit.oid, "ETag": f'"{entry.lfs_oid or entry.blob}"', "Accept-Ranges": "bytes"}
        rng = headers.get("Range")
        if rng:
            m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
            if m:
                start = int(m.group(1)) if m.group(1) else max(0, len(data) - int(m.group(2)))
                end = int(m.group(2)) if m.group(1) and m.group(2) else len(data) - 1
                end = min(end, len(data) - 1)
                if start >= len(data):
                    raise _Reply(416, {"error": "range not satisfiable"}, {"Content-Range": f"bytes */{len(data)}"})
                out["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
                return 206, data[start : end + 1], out
        return 200, data, out

    # -- collections --------------------------------------------------------------------------
    def _collection_json(self, c: dict) -> dict:
        return {**c, "items": [dict(i) for i in c["items"]]}

    def _collections(self, method, rest, query, body, headers):
        if rest in ("", "/") and method == "POST":
            payload = json.loads(body)
            namespace = payload["namespace"]
            self._can_write(headers, namespace)
            title = payload["title"]
            base = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
            slug = f"{namespace}/{base}-{hashlib.sha1(f'{namespace}/{title}/{len(self.state.collections)}'.encode()).hexdigest()[:24]}"
            c = {"slug": slug, "title": title, "owner": {"name": namespace, "type": "user"}, "items": [],
                 "lastUpdated": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()), "position": len(self.state.collections),
                 "private": bool(payload.get("private")), "theme": "green", "upvotes": 0,
                 "description": payload.get("description")}
            with self.state.lock:
                self.state.collections[slug] = c
            return 200, self._collection_json(c), {}
        if rest in ("", "/") and method == "GET":
            owner = query.get("owner", [None])[0]
            # The list view has no "position" (the client numbers the results itself).
            found = [{k: v for k, v in self._collection_json(c).items() if k != "position"}
                     for c in self.state.collections.values() if owner in (None, c["owner"]["name"])]
            return 200, found, {}
        item = re.fullmatch(r"/([^/]+/[^/]+?)/items/([0-9a-f]+)", rest)
        if item and method == "PATCH" and item.group(1) in self.state.collections:
            c = self.state.collections[item.group(1)]
            self._can_write(headers, c["owner"]["name"])
            payload = json.loads(body or b"{}")
            found = [i for i in c["items"] if i["_id"] == item.group(2)]
            if not found:
                raise _error(404, f"Item {item.group(2)} not in collection")
            if "note" in payload:
                found[0]["note"] = {"text": payload["note"], "html": payload["note"]}
            return 200, {}, {}
        m = re.fullmatch(r"/([^/]+/[^/]+?)(/items)?", rest)
        if not m or m.group(1) not in self.state.collections:
            raise _error(404, f"Collection not found: {rest}", "RepoNotFound")
        c = self.state.collections[m.group(1)]
        if method == "GET" and not m.group(2):
            return 200, self._collection_json(c), {}
        self._can_write(headers, c["owner"]["name"])
        payload = json.loads(body or b"{}")
        if method == "PATCH" and not m.group(2):
            for key in ("title", "description", "private", "theme", "position"):
                if key in payload:
                    c[key] = payload[key]
            return 200, {"data": self._collection_json(c)}, {}
        if method == "POST" and m.group(2):
            item = payload["item"]
            with self.state.lock:
                if any(i["id"] == item["id"] and i["type"] == item["type"] for i in c["items"]):
                    raise _error(409, "Item already in collection")
                c["items"].append({"_id": hashlib.sha1(f"{c['slug']}/{item['id']}".encode()).hexdigest()[:24],
                                   "id": item["id"], "type": item["type"], "position": len(c["items"]),
                                   **({"note": {"text": payload["note"], "html": payload["note"]}} if payload.get("note") else {})})
            return 200, self._collection_json(c), {}
        raise _error(404, f"loopback hub: no route for {method} collections{rest}")


@contextlib.contextmanager
def running_hub(tokens: dict[str, tuple[str, str]] | None = None, orgs: dict[str, set[str]] | None = None) -> Iterator[tuple[str, HubState]]:
    """Run the loopback Hub in a background thread; yields ``(endpoint, state)``."""
    state = HubState(tokens=dict(tokens or {"hf_test_write_token_123": ("tester", "write")}), orgs=dict(orgs or {}))
    server = _HubHTTPServer(state)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.endpoint, state
    finally:
        server.shutdown()
        server.server_close()


def client_env(endpoint: str, home: str, token: str | None) -> dict[str, str]:
    """Environment for a subprocess that runs the real clients against the loopback Hub."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_") and k != "HUGGING_FACE_HUB_TOKEN"}
    env.update(
        HF_ENDPOINT=endpoint,
        HF_HOME=home,
        HF_HUB_DISABLE_XET="1",
        HF_UPDATE_DOWNLOAD_COUNTS="0",
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_OFFLINE="0",
        HF_DATASETS_OFFLINE="0",
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
    )
    if token is not None:
        env["HF_TOKEN"] = token
    return env


# -- task fixtures shared by test_export / test_cards / test_publish -------------------------------

def tiny_world() -> dict[str, list[str]]:
    """Candidate subsets for a small real artifact: cat/dog with 'sofa' and 'grass' context clusters."""
    import numpy as np

    rng = np.random.default_rng(3)
    d: dict[str, list[str]] = {}
    for subject in ("cat", "dog"):
        pools = {"in": [f"{subject}-in-{i}" for i in range(120)], "out": [f"{subject}-out-{i}" for i in range(120)]}
        for k in range(4):
            d[f"{subject}(sofa{k})"] = sorted(rng.choice(pools["in"], 60, replace=False).tolist())
            d[f"{subject}(grass{k})"] = sorted(rng.choice(pools["out"], 60, replace=False).tolist())
        d[f"{subject}(bridge)"] = pools["in"][:30] + pools["out"][:30]
    return d


def build_tiny_artifact(out) -> object:
    from metashift_hf.builders.build import BuildOptions, build_artifact
    from metashift_hf.builders.subsets import CandidateSubsets

    return build_artifact(CandidateSubsets.from_dict(tiny_world()), out, BuildOptions(), source="custom", plots=False)


TASK_FEATURES = None


def task_features():
    import datasets

    return datasets.Features({
        "image": datasets.Image(), "image_id": datasets.Value("string"),
        "label": datasets.ClassLabel(names=["cat", "dog"]), "context": datasets.Value("string"),
        "contexts": datasets.List(datasets.Value("string")), "group": datasets.Value("string"),
        "community": datasets.Value("int64"),
    })


def make_prepared(task_id: str, image_paths: list, *, shift_type: str = "marginal", test_split: str = "test"):
    """A PreparedTask-shaped object over real JPEG files (rows alternate cat/dog; first 2/3 train)."""
    import datasets

    from metashift_hf.api import PreparedTask

    paths = [str(p) for p in image_paths]
    cut = (2 * len(paths)) // 3

    def rows(ps, ctx):
        labels = [i % 2 for i in range(len(ps))]
        return {"image": [{"bytes": None, "path": p} for p in ps],
                "image_id": [p.rsplit("/", 1)[-1].rsplit(".", 1)[0] for p in ps], "label": labels,
                "context": [f"{ctx}0"] * len(ps), "contexts": [[f"{ctx}0"]] * len(ps),
                "group": [f"{['cat', 'dog'][y]}({ctx})" for y in labels], "community": [0] * len(ps)}

    dd = datasets.DatasetDict({
        "train": datasets.Dataset.from_dict(rows(paths[:cut], "sofa"), features=task_features()),
        test_split: datasets.Dataset.from_dict(rows(paths[cut:], "grass"), features=task_features()),
    })
    groups = lambda ctx, n: [{"group": f"{c}({ctx})", "class": c, "contexts": [f"{ctx}0", f"{ctx}1"], "n": n} for c in ("cat", "dog")]
    spec = {
        "task_id": task_id, "shift_type": shift_type, "classes": ["cat", "dog"],
        "train_groups": groups("sofa", cut // 2), "test_groups": groups("grass", (len(paths) - cut) // 2),
        "distance": {"value": 0.5, "rule": "code", "note": "between the sofa and grass groups"},
        "minority_fraction": {"target": 0.12, "achieved": 0.125} if shift_type == "conditional" else None,
        "split_sizes": {"train": cut, test_split: len(paths) - cut}, "seed": 0,
        "removed": {"ambiguous": 0, "leakage": 1}, "rules": {"min_images_per_subset": 25, "min_subsets_per_class": 5},
    }
    return PreparedTask(task_id=task_id, dataset=dd, spec=spec)


def copy_reference_images(shared_ref, dest) -> list:
    """Copy the real GQA/VG JPEGs to ``dest`` (so a test may delete them after export)."""
    import shutil
    from pathlib import Path

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    # A fixed 15 of them: the shared folder may grow, and split sizes below are counted on these.
    for src in sorted((Path(shared_ref) / "images").glob("*/*.jpg"))[:15]:
        shutil.copyfile(src, dest / src.name)
        out.append(dest / src.name)
    return out


def build_demo(root) -> tuple:
    """The embedded demo world built into a real artifact (with meta-graph plots): (world, artifact)."""
    from pathlib import Path

    from metashift_hf.builders.build import build_from_inputs
    from metashift_hf.demo_world import generate_demo_world

    world = generate_demo_world(Path(root) / "world", seed=0)
    return world, build_from_inputs(Path(root) / "artifact", scene_graphs=world.scene_graphs, source="demo")
