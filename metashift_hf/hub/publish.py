"""Push exported repos to the Hugging Face Hub: one commit per repo, idempotent, plus a collection.

Idempotence does not rely on the server: before committing we list the remote tree and compare
each local file's sha256 (LFS files) or git blob sha1 (regular files) with it, and commit only
when something differs. A run that died halfway is simply run again: LFS objects already uploaded
are skipped by the Hub's batch API, and each repo's commit is atomic, so nothing is duplicated.

The token comes from ``HF_TOKEN`` or the standard ``hf auth login`` store (``huggingface_hub.get_token``)
and is never printed, logged or put in an error message. ``HF_ENDPOINT`` is honoured by
``huggingface_hub`` itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator, NoReturn

from ..cards.render import add_index_rows
from ..core import __version__
from ..core import options as opt
from ..core.errors import InputFormatError, MetashiftError
from ..core.fsutil import human_size, sha256_file
from ..core.provenance import is_synthetic
from .export import CARD_TARGET_FILE, card_target, export_tasks, read_note
from .repo_files import configs_of, read_spec_file
from .shards import (
    INDEX_REPO,
    REPO_PREFIX,
    SPEC_FILE,
    ExportedRepo,
    repo_files,
    validate_config_name,
    validate_repo_name,
    validate_split_name,
)
from .task_open import TaskOrigin


logger = logging.getLogger(__name__)

COLLECTION_TITLE = "MetaShift"
COLLECTION_DESCRIPTION = (
    "MetaShift (Liang & Zou, ICLR 2022) tasks as parquet datasets: contextual distribution shifts."
)
_FIX_TOKEN = (
    "create a token with write access at https://huggingface.co/settings/tokens, then set HF_TOKEN "
    "or run `hf auth login`"
)
# Remote paths we own: stale files there (e.g. an old shard count) would be read by the
# `<config>/<split>-*` data_files globs, so they are deleted. Anything else a maintainer added stays.
_MANAGED_DIRS = ("images/",)


@dataclass
class FilePlan:
    path: str
    size: int
    action: str  # "upload" | "unchanged" | "delete"


@dataclass
class RepoPlan:
    repo_id: str
    local_dir: Path
    exists: bool | None  # None: remote not checked (dry run without token)
    files: list[FilePlan] = field(default_factory=list)
    note: str = ""
    repo_type: str = "dataset"  # "space" for the MetaShift Space (metashift_hf.space.repo)

    @property
    def changed(self) -> bool:
        return any(f.action != "unchanged" for f in self.files)

    def upload_bytes(self) -> int:
        return sum(f.size for f in self.files if f.action == "upload")


@dataclass
class PublishResult:
    plans: list[RepoPlan]
    commits: dict[str, str | None]  # repo_id -> new commit oid, None when nothing changed
    collection: str | None  # collection slug
    dry_run: bool


def git_blob_sha1(path: Path | bytes) -> str:
    data = path if isinstance(path, bytes) else Path(path).read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Connection-level error classes of the HTTP client huggingface_hub uses (httpx2 or httpx)."""
    import importlib

    found: list[type[BaseException]] = [OSError]
    for name in ("httpx2", "httpx"):
        try:
            found.append(importlib.import_module(name).TransportError)
        except (ImportError, AttributeError):
            continue
    return tuple(found)


DEFAULT_TIMEOUT = 60.0  # seconds without progress on one Hub request (connect, read or write)
TIMEOUT_MAX = 3600.0  # an hour without progress is a dead connection; more overflows the HTTP client's clock


def timeout_seconds(value, name: str | None = "--timeout") -> float:
    """A Hub request timeout: a finite number of seconds in (0, :data:`TIMEOUT_MAX`] (argparse ``type=`` too)."""
    seconds = opt.positive_float(value, name)  # NaN and inf refused too
    if seconds > TIMEOUT_MAX:
        raise opt.OptionError(
            f"{name} {seconds:g} is out of range: at most {TIMEOUT_MAX:g} seconds",
            f"pass --timeout SECONDS with 0 < SECONDS <= {TIMEOUT_MAX:g}",
        )
    return seconds


_TOKEN_PIECE = re.compile(r"[A-Za-z0-9_\-]{6,}")


def scrub_token(text: str, token: str | None) -> str:
    """``text`` with the token masked: in any letter case, and any piece of it 6+ characters long."""
    if not token:
        return text
    text = re.sub(re.escape(token), "***", text, flags=re.IGNORECASE)
    low = token.lower()
    return _TOKEN_PIECE.sub(lambda m: "***" if m.group(0).lower() in low else m.group(0), text)


def _use_timeout(seconds: float) -> None:
    """Every request huggingface_hub makes from now on gives up after ``seconds`` without progress."""
    from huggingface_hub import set_client_factory
    from huggingface_hub.utils import _http

    seconds = timeout_seconds(seconds)

    def factory():
        client = _http.default_client_factory()  # keeps the Hub's request hooks; it only has no timeout
        client.timeout = seconds
        return client

    set_client_factory(factory)


class _Hub:
    """Calls to huggingface_hub with Hub errors turned into MetashiftError (token scrubbed)."""

    def __init__(self, token: str | None, endpoint: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> None:
        from huggingface_hub import HfApi, constants

        self.token = token
        self.endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
        _use_timeout(timeout)
        self.timeout = timeout
        self.api = HfApi(endpoint=self.endpoint, token=token if token else False)

    def _scrub(self, text: str) -> str:
        return scrub_token(text, self.token)

    def validate_card(self, readme: Path, content: str, repo_id: str, repo_type: str = "dataset") -> None:
        """Ask the Hub's validate-yaml endpoint (the one DatasetCard.validate uses) at *our* endpoint."""
        from huggingface_hub.utils import get_session, hf_raise_for_status

        def post():
            response = get_session().post(
                f"{self.endpoint}/api/validate-yaml",
                headers={"Accept": "text/plain"},
                json={"repoType": repo_type, "content": content},
            )
            if response.status_code == 400:
                raise MetashiftError(
                    f"the Hub refuses the README metadata of {readme.parent}: {self._scrub(response.text)}",
                    "the README was edited after metashift-hf wrote it, or its YAML is at fault: write it again "
                    "(`metashift-hf export` for a task, `metashift-hf space` for the Space) and push that; if the Hub "
                    "refuses a fresh one, report it with this message",
                )
            hf_raise_for_status(response)

        self.call(f"validating the README metadata of {repo_id}", post)

    def call(self, what: str, fn: Callable, *args, **kwargs):
        from huggingface_hub.errors import HfHubHTTPError

        known = (HfHubHTTPError, *_transport_errors(), ValueError)
        try:
            return fn(*args, **kwargs)
        except known as exc:
            self._fail(what, exc)
        except RuntimeError as exc:
            # huggingface_hub wraps a failed LFS upload: RuntimeError("Error while uploading 'x' ...") from the real error
            if not isinstance(exc.__cause__, known):
                raise
            self._fail(f"{what} ({str(exc).splitlines()[0].rstrip('.')})", exc.__cause__)

    def _fail(self, what: str, exc: BaseException) -> NoReturn:
        """One MetashiftError for a failed request: what the Hub said, or that it could not be reached."""
        from huggingface_hub.errors import HfHubHTTPError

        if isinstance(exc, HfHubHTTPError):
            status = exc.response.status_code if exc.response is not None else None
            server = self._scrub(getattr(exc, "server_message", "") or str(exc).splitlines()[0])
            if status == 401:
                raise MetashiftError(
                    f"the Hub at {self.endpoint} rejected the token (401) while {what}", _FIX_TOKEN
                ) from None
            if status == 403:
                raise MetashiftError(
                    f"the Hub at {self.endpoint} refused {what} (403: {server})",
                    "use a token with write access to this namespace (org tokens need the org's write role), "
                    "or publish under your own --namespace",
                ) from None
            raise MetashiftError(
                f"the Hub at {self.endpoint} failed while {what} ({status}: {server})",
                "run the same command again: publishing resumes where it stopped",
            ) from None
        if isinstance(exc, ValueError):  # a 200 answer that is not the Hub's JSON (an HTML page, a proxy's login form)
            raise MetashiftError(
                f"the server at {self.endpoint} did not answer like the Hub API while {what} ({type(exc).__name__})",
                "check HF_ENDPOINT: it must be the Hub's address, not a web page or proxy",
            ) from None
        detail = self._scrub(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        raise MetashiftError(
            f"cannot reach the Hub at {self.endpoint} while {self._scrub(what)} "
            f"(no answer within {self.timeout:g} s, or the connection dropped: {detail})",
            "check the network or HF_ENDPOINT (or raise --timeout), then run the same command "
            "again: publishing resumes where it stopped",
        ) from None


def _as_repo(item: ExportedRepo | str | Path) -> ExportedRepo:
    if isinstance(item, ExportedRepo):
        return item

    path = Path(item)
    if not path.is_dir():
        raise InputFormatError(f"{path} is not a folder", "pass the repo folders written by `metashift-hf export`")
    return ExportedRepo(path.name, path, (), repo_files(path), note=read_note(path))


def check_card_target(repo: ExportedRepo, namespace: str) -> None:
    """Refuse a repo folder whose cards were rendered for another target: its load lines would name a
    local folder or somebody else's repos on the Hub. Cards are rendered once, at export, never rewritten."""
    target = card_target(repo.path)
    if target is None:
        logger.warning(
            f"{repo.path}: no record of the namespace its card names (an older export?); "
            f"check that its load lines name {namespace}/{repo.name}"
        )
        return
    if target.namespace != namespace:
        was = (
            f"namespace {target.namespace!r}" if target.namespace else "no --namespace (its cards load local folders)"
        )
        raise InputFormatError(
            f"exported repo {repo.path} was exported with {was}, not for namespace {namespace!r}",
            f"export again with `metashift-hf export ... --namespace {namespace}` (or publish the tasks directly: "
            f"`metashift-hf publish TASK --artifact ARTIFACT --images IMAGES --namespace {namespace}`)",
        )


def _check_collection_lists(items: list[ExportedRepo], configs: dict[str, list[str]]) -> None:
    """A collection card (the ``metashift`` repo of the repo-per-task layout) pushed with task repos must list each
    of them: the Hub would show a collection that omits repos it holds (an export folder added to by hand)."""
    index = next((r for r in items if r.name == INDEX_REPO), None)
    if index is None or configs[index.name]:  # no collection card, or the one-repo layout (it holds the tasks)
        return
    card = (index.path / "README.md").read_text(encoding="utf-8", errors="replace")
    missing = [r.name for r in items if r is not index and f'/{r.name}"' not in card]  # load_dataset("…/<repo>", …)
    if missing:
        raise InputFormatError(
            f"the collection card {index.path / 'README.md'} does not list {', '.join(missing)}, which would be "
            "pushed beside it",
            "export the tasks into one --out (each export adds its tasks to the card), or push the task repos "
            "without that card",
        )


def _refuse_synthetic(what: str) -> None:
    raise MetashiftError(
        f"{what} holds synthetic data (the demo world or another generated world), not MetaShift / Visual Genome",
        "publish it only on purpose, with --allow-synthetic (allow_synthetic=True); its cards say it is synthetic",
    )


_FIX_LICENSE = (
    "rebuild the artifact with the data's licence: `metashift-hf build ... --license ID` (its Hub licence id, "
    "e.g. cc-by-4.0; --source-name and --homepage say where it comes from), then export or publish again"
)


def _refuse_unlicensed(what: str) -> None:
    raise MetashiftError(
        f"{what} states no licence (user data, source custom, built without --license), so the Hub "
        "would show it unlicensed",
        _FIX_LICENSE,
    )


def has_license(repo_dir: Path) -> bool:
    """Whether an exported folder's card states a licence (cards.render leaves it out only for user
    data built without ``--license``)."""
    from huggingface_hub import DatasetCard

    return bool(getattr(DatasetCard.load(Path(repo_dir) / "README.md").data, "license", None))


def is_synthetic_repo(repo_dir: Path) -> bool:
    """Whether an exported folder's card declares synthetic data (the `synthetic` tag cards.render sets)."""
    from huggingface_hub import DatasetCard

    return "synthetic" in (getattr(DatasetCard.load(Path(repo_dir) / "README.md").data, "tags", None) or [])


def check_repo_dir(repo: ExportedRepo) -> list[str]:
    """Validate an exported folder locally, before any request: README YAML, configs, splits, files."""
    from huggingface_hub import DatasetCard

    readme = repo.path / "README.md"
    if not readme.is_file():
        raise InputFormatError(
            f"{repo.path} has no README.md, so it is not an exported repo",
            "export it with `metashift-hf export` (publish pushes exactly what export writes)",
        )
    try:
        card = DatasetCard.load(readme)
    except Exception as exc:  # the card parser raises several types; all mean a bad README
        raise InputFormatError(
            f"{readme}: the YAML metadata does not parse ({exc})", "export the repo again"
        ) from None
    configs = card.data.to_dict().get("configs") or []
    names = []
    for c in configs:
        name = validate_config_name(str(c.get("config_name", "")))
        for df in c.get("data_files") or []:
            split = validate_split_name(str(df.get("split", "")), name)
            prefix = str(df.get("path", "")).rstrip("*")
            if not any(f.startswith(prefix) for f in repo_files(repo.path)):
                raise InputFormatError(
                    f"{readme}: config {name!r} split {split!r} points at {df.get('path')!r}, which matches no file",
                    "export the repo again; the README and the shards are out of step",
                )
        names.append(name)
    if configs and sum(1 for c in configs if c.get("default")) != 1:
        raise InputFormatError(f"{readme}: exactly one config must have `default: true`", "export the repo again")
    return names


def remote_tree(hub: _Hub, repo_id: str, repo_type: str = "dataset") -> dict[str, tuple[str, int, bool]]:
    """path -> (oid to compare, size, is_lfs) for every file on main."""
    from huggingface_hub.hf_api import RepoFile

    entries = hub.call(
        f"listing {repo_id}", lambda: list(hub.api.list_repo_tree(repo_id, repo_type=repo_type, recursive=True))
    )
    out = {}
    for e in entries:
        if isinstance(e, RepoFile):
            out[e.path] = (e.lfs.sha256, e.size, True) if e.lfs else (e.blob_id, e.size, False)
    return out


def plan_repo(
    repo: ExportedRepo, repo_id: str, remote: dict[str, tuple[str, int, bool]] | None, configs: list[str]
) -> RepoPlan:
    """What to upload, keep and delete (the files as exported: the card already names ``repo_id``)."""
    plan = RepoPlan(repo_id, repo.path, None if remote is None else bool(remote), note=repo.note)
    local = repo_files(repo.path)
    for rel in local:
        path = repo.path / rel
        old = (remote or {}).get(rel)
        same = old is not None and old[0] == (sha256_file(path) if old[2] else git_blob_sha1(path))
        plan.files.append(FilePlan(rel, path.stat().st_size, "unchanged" if same else "upload"))
    managed = tuple(f"{c}/" for c in configs) + _MANAGED_DIRS
    for rel, (_, size, _) in sorted((remote or {}).items()):
        if rel not in local and rel.startswith(managed):
            plan.files.append(FilePlan(rel, size, "delete"))
    return plan


def plan_lines(plans: Iterable[RepoPlan]) -> list[str]:
    """The plan as a reader sees it: per repo, what is uploaded, kept and deleted, with sizes."""
    lines = []
    for p in plans:
        state = "remote not checked" if p.exists is None else ("exists" if p.exists else "new repo")
        counts = {a: sum(1 for f in p.files if f.action == a) for a in ("upload", "unchanged", "delete")}
        lines.append(
            f"{p.repo_id} ({state}): upload {counts['upload']} files ({human_size(p.upload_bytes())}), "
            f"unchanged {counts['unchanged']}, delete {counts['delete']}"
        )
        lines += [f"  {f.action:9s} {f.path}  {human_size(f.size)}" for f in p.files]
    return lines


def push_repos(
    repos: list[ExportedRepo | str | Path],
    namespace: str,
    *,
    private: bool = False,
    dry_run: bool = False,
    token: str | None = None,
    collection_title: str = COLLECTION_TITLE,
    endpoint: str | None = None,
    allow_synthetic: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
) -> PublishResult:
    """Publish exported repo folders under ``namespace`` (see module docstring).

    ``endpoint`` defaults to ``HF_ENDPOINT`` (huggingface_hub's setting), normally https://huggingface.co.
    """
    validate_repo_name(namespace, "namespace")
    items = [_as_repo(r) for r in repos]
    if not items:
        raise MetashiftError("nothing to publish", "name at least one task")
    configs = {}
    for r in items:
        validate_repo_name(r.name, "repo name")
        configs[r.name] = check_repo_dir(r)
        if not allow_synthetic and is_synthetic_repo(r.path):
            _refuse_synthetic(f"exported repo {r.path}")
        if not has_license(r.path):
            _refuse_unlicensed(f"exported repo {r.path}")
    hub = writable_hub(token, namespace, dry_run=dry_run, endpoint=endpoint, timeout=timeout)
    token = hub.token
    for r in items:  # after the token check: a namespace the token cannot write is the first thing to fix
        check_card_target(r, namespace)
    _check_collection_lists(items, configs)
    with _with_published_tasks(hub, namespace, items, configs) as pushed:
        result = _push_planned(hub, namespace, pushed, configs, private, dry_run, collection_title)
    for plan, r in zip(result.plans, items):  # the folders as exported (a merged card's copy is gone)
        plan.local_dir = r.path
    return result


def _push_planned(
    hub: _Hub,
    namespace: str,
    items: list[ExportedRepo],
    configs: dict,
    private: bool,
    dry_run: bool,
    collection_title: str,
) -> PublishResult:
    """Plan each repo against its remote tree, commit what changed (one commit per repo), update the collection."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    token = hub.token
    plans = []
    for r in items:
        repo_id = f"{namespace}/{r.name}"
        remote = None
        if token:
            exists = hub.call(f"looking up {repo_id}", hub.api.repo_exists, repo_id, repo_type="dataset")
            remote = remote_tree(hub, repo_id) if exists else {}
        plans.append(plan_repo(r, repo_id, remote, configs[r.name]))
    if dry_run:  # the caller shows plan_lines(result.plans)
        return PublishResult(plans, {}, None, True)
    # Real runs list every file too: only regular files of the repo layout are ever planned (shards.repo_files).
    logger.info("\n".join(["Plan:", *plan_lines(plans)]))

    commits: dict[str, str | None] = {}
    for i, (r, plan) in enumerate(zip(items, plans)):
        hub.call(
            f"creating {plan.repo_id}",
            hub.api.create_repo,
            plan.repo_id,
            repo_type="dataset",
            private=private,
            exist_ok=True,
        )
        if plan.exists is False:
            # create_repo made a first commit (.gitattributes): plan against the real tree.
            plan = plans[i] = plan_repo(r, plan.repo_id, remote_tree(hub, plan.repo_id), configs[r.name])
        if not plan.changed:
            logger.info(f"{plan.repo_id}: up to date, no commit")
            commits[plan.repo_id] = None
            continue
        if any(f.path == "README.md" and f.action == "upload" for f in plan.files):
            readme = plan.local_dir / "README.md"
            hub.validate_card(readme, readme.read_text(encoding="utf-8"), plan.repo_id)
        ops = [
            CommitOperationAdd(path_in_repo=f.path, path_or_fileobj=str(plan.local_dir / f.path))
            for f in plan.files
            if f.action == "upload"
        ]
        ops += [CommitOperationDelete(path_in_repo=f.path) for f in plan.files if f.action == "delete"]
        info = hub.call(
            f"committing to {plan.repo_id}",
            hub.api.create_commit,
            plan.repo_id,
            ops,
            repo_type="dataset",
            commit_message=f"Publish with metashift-hf {__version__}",
            commit_description="\n".join(f"{f.action} {f.path}" for f in plan.files if f.action != "unchanged"),
        )
        commits[plan.repo_id] = info.oid
        logger.info(
            f"{plan.repo_id}: committed {sum(1 for f in plan.files if f.action != 'unchanged')} file change(s) "
            f"({human_size(plan.upload_bytes())}) as {info.oid[:12]}"
        )
    slug = update_collection(hub, namespace, collection_title, plans, private=private)
    logger.info(f"collection: {hub.endpoint}/collections/{slug}")
    return PublishResult(plans, commits, slug, False)


@contextlib.contextmanager
def _with_published_tasks(
    hub: _Hub, namespace: str, items: list[ExportedRepo], configs: dict
) -> Iterator[list[ExportedRepo]]:
    """``items`` with the collection card (repo-per-task layout) listing the task repos published in ``namespace``
    before, too: an export folder's card lists its own tasks only, and pushing it as it is rewrote the namespace's
    card with those alone. The merged card is written to a temporary copy of the card's folder (the export folder
    stays as exported); the tasks are found by listing the namespace's dataset repos (not by trusting its old card)."""
    index = next((r for r in items if r.name == INDEX_REPO), None)
    if index is None or configs[index.name] or not hub.token:  # no card, the one-repo layout, or no Hub to ask
        yield items
        return
    extra = _published_tasks(hub, namespace, items, configs)
    if not extra:
        yield items
        return
    with tempfile.TemporaryDirectory(prefix="metashift-card-") as tmp:
        folder = Path(tmp) / INDEX_REPO
        folder.mkdir()
        for rel in repo_files(index.path):  # the card's folder: the card and what export wrote beside it
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(index.path / rel, folder / rel)
        if (index.path / CARD_TARGET_FILE).is_file():
            shutil.copy2(index.path / CARD_TARGET_FILE, folder / CARD_TARGET_FILE)
        card = (index.path / "README.md").read_text(encoding="utf-8")
        (folder / "README.md").write_text(add_index_rows(card, extra), encoding="utf-8")
        logger.info(
            f"{namespace}/{INDEX_REPO}: the collection card also lists the task repos published there before: "
            + ", ".join(repo for _, repo, _ in extra)
        )
        yield [replace(index, path=folder, files=repo_files(folder)) if r is index else r for r in items]


def _published_tasks(hub: _Hub, namespace: str, items: list[ExportedRepo], configs: dict) -> list:
    """(task id, repo id, spec) of each task repo already in ``namespace`` and not pushed now, made from the same
    build as the tasks pushed now (one card names one build: another build's repo is left out, with a warning)."""
    from huggingface_hub import hf_hub_download

    pushed = {r.name for r in items}
    builds = {
        read_spec_file(r.path / c / SPEC_FILE).artifact_hash
        for r in items
        if r.name != INDEX_REPO
        for c in configs[r.name]
    }
    names = hub.call(
        f"listing the dataset repos of {namespace}",
        lambda: sorted(d.id for d in hub.api.list_datasets(author=namespace)),
    )
    found = []
    for repo_id in names:
        name = repo_id.split("/", 1)[1]
        if not name.startswith(REPO_PREFIX) or name in pushed:
            continue
        files = hub.call(f"listing {repo_id}", hub.api.list_repo_files, repo_id, repo_type="dataset")
        for config in configs_of(files):
            local = hub.call(
                f"reading {config}/{SPEC_FILE} of {repo_id}",
                hf_hub_download,
                repo_id,
                f"{config}/{SPEC_FILE}",
                repo_type="dataset",
                endpoint=hub.endpoint,  # the Hub pushed to (also when not HF_ENDPOINT)
                token=hub.token,
            )
            spec = read_spec_file(local)
            if builds and spec.artifact_hash not in builds:
                logger.warning(
                    f"{repo_id}: made from another build (artifact {str(spec.artifact_hash)[:12]}), so the collection "
                    f"card of {namespace} (one build) does not list it"
                )
                continue
            found.append((config, repo_id, spec))
    return found


def update_collection(hub: _Hub, namespace: str, title: str, plans: list[RepoPlan], *, private: bool = False) -> str:
    """Find the namespace's collection called ``title`` (or create it) and add every repo once."""
    found = hub.call(
        "listing collections",
        lambda: [c for c in hub.api.list_collections(owner=namespace, limit=100) if c.title == title],
    )
    if found:
        slug = found[0].slug
    else:
        slug = hub.call(
            "creating the collection",
            hub.api.create_collection,
            title,
            namespace=namespace,
            description=COLLECTION_DESCRIPTION,
            private=private,
            exists_ok=True,
        ).slug
    present = {i.item_id: i for i in hub.call("reading the collection", hub.api.get_collection, slug).items}
    # The index repo first: it is the overview the collection should open with.
    for plan in sorted(plans, key=lambda p: (not p.repo_id.endswith("/metashift"), p.repo_id)):
        item = present.get(plan.repo_id)
        if item is None:
            hub.call(
                f"adding {plan.repo_id} to the collection",
                hub.api.add_collection_item,
                slug,
                plan.repo_id,
                plan.repo_type,
                note=plan.note or None,
                exists_ok=True,
            )
        elif plan.note and item.note != plan.note:  # the task's shift spec changed since the last run
            hub.call(
                f"updating the note of {plan.repo_id}",
                hub.api.update_collection_item,
                slug,
                item.item_object_id,
                note=plan.note,
            )
    return slug


def writable_hub(
    token: str | None,
    namespace: str,
    *,
    dry_run: bool = False,
    endpoint: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    flag: str = "--namespace",
) -> _Hub:
    """A Hub client whose token may write under ``namespace``, checked before any long work: a token exists
    (unless ``dry_run``), the Hub accepts it, it is not read-only, and its user or one of its orgs is
    ``namespace`` (``flag`` names the option to change in the fix)."""
    token = resolve_token(token, dry_run)
    hub = _Hub(token, endpoint, timeout)
    if token:
        me = hub.call("checking the token (whoami)", hub.api.whoami)
        if not isinstance(me, dict):
            raise MetashiftError(
                f"the server at {hub.endpoint} did not answer like the Hub API while checking the token",
                "check HF_ENDPOINT: it must be the Hub's address",
            )
        role = ((me.get("auth") or {}).get("accessToken") or {}).get("role")
        if role == "read":
            raise MetashiftError(f"the Hugging Face token of user {me.get('name')!r} is read-only", _FIX_TOKEN)
        allowed = {me.get("name")} | {o.get("name") for o in me.get("orgs") or []}
        if namespace not in allowed:
            raise MetashiftError(
                f"the token's user {me.get('name')!r} cannot write under namespace {namespace!r}",
                f"use {flag} with one of: {', '.join(sorted(n for n in allowed if n))}",
            )
    return hub


def resolve_token(token: str | None, dry_run: bool) -> str | None:
    """The explicit token, else HF_TOKEN / the standard login; a real push without one is an error."""
    from huggingface_hub import get_token

    token = token or get_token()
    if not token and not dry_run:
        raise MetashiftError(
            "no Hugging Face token found (HF_TOKEN is unset and there is no `hf auth login` token)", _FIX_TOKEN
        )
    return token


@dataclass(frozen=True)
class PushOptions:
    """How ``publish_tasks`` pushes what it exported (the keywords of :func:`push_repos`, checked when made)."""

    private: bool = False  # create the repos private
    dry_run: bool = False  # plan only: nothing is pushed (no token needed)
    token: str | None = None  # None: HF_TOKEN or the `hf auth login` token
    collection_title: str = COLLECTION_TITLE  # the namespace's collection the repos are added to
    allow_synthetic: bool = False  # push a synthetic artifact's tasks (demo world, generated worlds) too
    timeout: float = DEFAULT_TIMEOUT  # seconds without progress on one Hub request

    def __post_init__(self) -> None:
        object.__setattr__(self, "timeout", timeout_seconds(self.timeout))

    def push(self, repos: list[ExportedRepo | str | Path], namespace: str) -> PublishResult:
        """:func:`push_repos` with these options."""
        return push_repos(repos, namespace, **asdict(self))


def publish_tasks(
    tasks: list[str],
    origin: TaskOrigin,
    namespace: str,
    out_dir: str | Path,
    *,
    push: PushOptions | None = None,
    layout: str = "repo-per-task",
    force: bool = False,
    on_missing: str = "error",
) -> PublishResult:
    """Export ``tasks`` from ``origin``'s build (cards name ``namespace/<repo>`` in their load lines) and push
    them (``push``: how; default ``PushOptions()``).

    A synthetic artifact (core.provenance: demo world, generated worlds) is refused before
    anything is exported unless ``push.allow_synthetic``.
    """

    push = push if push is not None else PushOptions()
    validate_repo_name(namespace, "namespace")
    art = origin.build("publish")
    if not push.allow_synthetic and is_synthetic(art.provenance):
        _refuse_synthetic(f"artifact {art.root} (source: {art.provenance})")
    if art.provenance == "custom" and not (art.manifest.source_info and art.manifest.source_info.license):
        _refuse_unlicensed(f"artifact {art.root}")  # before the (long) export
    push = replace(push, token=resolve_token(push.token, push.dry_run))  # before the (long) export, not after it
    repos = export_tasks(
        tasks,
        replace(origin, artifact=art),
        out_dir,
        layout=layout,
        namespace=namespace,
        force=force,
        on_missing=on_missing,
    )
    return push.push(repos, namespace)
