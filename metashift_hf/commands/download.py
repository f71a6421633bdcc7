"""`metashift-hf download`: fetch, register and list the real inputs."""

from __future__ import annotations

import argparse
import logging
import urllib.parse
from pathlib import Path

from ..core.errors import MetashiftError, UnknownNameError
from ..core.fsutil import human_size
from ..core.options import non_negative_int, positive_float
from ..core.sources import DEFAULT_ORDER, KNOWN_FILES, known_file
from ..sources.download import default_cache_dir, part_path
from ..sources.manifest import DataManifest, download, env_var
from ..sources.manifest import register as register_input
from . import HELP


logger = logging.getLogger(__name__)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "download",
        help=HELP["download"],
        description=(
            "Download the real inputs into the cache (or --dir), verify their sha256 and record them in "
            "the data manifest so `build`, `export` and `evaluate` find them. With --register, record "
            "files you already have instead. Known files: "
            + "; ".join(f"{k} = {f.file_name} ({human_size(f.size)})" for k, f in KNOWN_FILES.items())
        ),
    )
    p.add_argument(
        "--what",
        default=",".join(DEFAULT_ORDER),
        help=f"comma-separated files to fetch (default: all = {','.join(DEFAULT_ORDER)}; "
        f"images is {human_size(KNOWN_FILES['images'].size)}; COCO only when named: "
        "coco-annotations,coco-images,coco-val-images)",
    )
    p.add_argument(
        "--dir", default=None, help="download folder (default: $METASHIFT_HF_CACHE or the user cache folder)"
    )
    p.add_argument(
        "--mirror",
        default=None,
        metavar="BASE_URL",
        help="try BASE_URL/<file name> before the published hosts (default: $METASHIFT_HF_MIRROR)",
    )
    p.add_argument(
        "--register",
        nargs=2,
        action="append",
        metavar=("ROLE", "PATH"),
        default=None,
        help="record a file/folder you already have as ROLE (repeatable); known files are sha256-checked",
    )
    p.add_argument("--status", action="store_true", help="list where each input is and exit")
    p.add_argument(
        "--manifest",
        default=None,
        help="data manifest file (default: $METASHIFT_HF_MANIFEST or <cache>/manifest.json)",
    )
    p.add_argument("--timeout", type=float, default=60.0, help="seconds without data before a retry (default 60)")
    p.add_argument(
        "--retries",
        type=int,
        default=3,
        help="retries per mirror after a connection breaks without progress (default 3)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    man = DataManifest.load(args.manifest, for_writing=not args.status)  # a path save() may not write: refused now
    if args.status:
        return _status(man)
    if args.register:
        for role, path in args.register:
            e = register_input(role, path, manifest=man, progress=args.progress)
            state = "sha256 verified" if e.get("known") else "not a known file, shape-checked only"
            print(f"{role}: {e['path']} ({state}) -> {man.path}")
        return 0
    _check_options(args)
    keys = [k.strip() for k in args.what.split(",") if k.strip()]
    if not keys:
        raise UnknownNameError("--what is empty", f"name one or more of: {', '.join(DEFAULT_ORDER)}")
    knowns = [known_file(k) for k in keys]
    total = sum(k.size for k in knowns)
    logger.info(f"fetching {', '.join(k.file_name for k in knowns)} ({human_size(total)} in all)")
    try:
        paths = download(
            keys,
            args.dir,
            mirror=args.mirror,
            progress=args.progress,
            manifest=man,
            timeout=args.timeout,
            retries=args.retries,
        )
    except KeyboardInterrupt:
        folder = Path(args.dir) if args.dir else default_cache_dir()
        parts = [str(part_path(folder / k.file_name)) for k in knowns if part_path(folder / k.file_name).exists()]
        if parts:
            logger.warning(f"partial download kept in {', '.join(parts)}; run the same command to resume")
        raise
    for key, path in paths.items():
        print(f"{key}: {path}")
    print(f"recorded in {man.path}")
    return 0


def _check_options(args: argparse.Namespace) -> None:
    """Values that would otherwise fail late, retry for nothing or blame the network."""
    args.timeout = positive_float(args.timeout, "--timeout")  # seconds: NaN and inf refused too
    args.retries = non_negative_int(args.retries, "--retries")
    if args.mirror is not None:
        parsed = urllib.parse.urlparse(args.mirror)
        if parsed.scheme not in ("http", "https", "file") or (parsed.scheme != "file" and not parsed.netloc):
            raise MetashiftError(
                f"--mirror {args.mirror!r} is not a URL",
                "give a base URL such as https://example.org/gqa (the file is fetched as BASE_URL/<file name>)",
            )
    if args.dir is not None and Path(args.dir).exists() and not Path(args.dir).is_dir():
        raise MetashiftError(f"--dir {args.dir} is a file, not a folder", "name a folder to download into")


def _status(man) -> int:

    print(f"data manifest: {man.path}{'' if man.path.exists() else ' (not written yet)'}")
    for role in DEFAULT_ORDER:
        try:
            found = man.locate(role)
        except MetashiftError as exc:  # a broken entry is shown, not fatal, in a listing
            print(f"  {role:14s} BROKEN  {exc.what}")
            continue
        if found is None:
            print(f"  {role:14s} missing (metashift-hf download --what {role}, or set {env_var(role)})")
            continue
        path, where = found
        e = man.entry(role) or {}
        verified = "sha256 verified" if e.get("known") and e.get("path") == str(path) else "unverified"
        print(f"  {role:14s} {path}  [{where}; {e.get('origin', 'environment')}; {verified}]")
    return 0
