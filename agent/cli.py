"""`fleetcache-agent resolve | fetch | verify | prune` (DESIGN §4).

Every failure, including a bad flag, ends the same way: the exit code of its row in
fleetcache.exitcodes, a final progress record (phase Failed, reason, message with the
remedy) and the termination message. The token is read once from --token-file and
scrubbed from every log line; records and messages never include it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import click

from .errors import AgentError, Interrupted, from_os_error
from .fetch import fetch as run_fetch
from .hub import Bandwidth, HubClient, Retryable, RetryPolicy, read_timeout_from_env
from .layout import FETCH_LAYOUTS, Layout, fetch_layout
from .mirror import FAIL, ORIGIN, PUBLISHER, READER, MirrorConfig, MirrorSource, reader_listing
from .node_agent import FileLabels, NodeLabels
from .node_agent import label as run_label
from .node_agent import prepare as run_prepare
from .node_plan import valid_commit
from .node_warm import (PRUNE_ENV, STATUS_INTERVAL_ENV, KeyedSink, NodeRecorder, RecordPruner, StatusFileSink, Warm,
                        copy_ready)
from .node_warm import run as run_node_warm
from .plan import Listing, compared_record, parse_listing, resolved_record, select
from fleetcache.manifest import manifest_digest
from .progress import (FETCH_FIELDS, PRUNE_FIELDS, RESOLVE_FIELDS, VERIFY_FIELDS, ConfigMapSink, FileSink, Progress,
                       incluster_core_api, parse_configmap_ref, write_termination)
from .prune import prune as run_prune
from .s3 import S3Client, S3Location
from .sources import (HubSource, S3Source, manifest_commit, manifest_entries, parse_manifest, pinned_listing,
                      read_manifest_file, resolve_s3)
from .select import select as run_select
from .slots import DirSlots, LeaseSlots, NamedLease, incluster_coordination_api
from .usage import volume_usage
from .verify import read_volume_manifest, resolve_volume_manifest, verify_in_place
from .verify import verify as run_verify

log = logging.getLogger("fleetcache.agent")

DEFAULT_ENDPOINT = "https://huggingface.co"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
_COMMIT = re.compile(r"[0-9a-f]{40}")
_S3_COMMIT = re.compile(r"s3-[0-9a-f]{40}")  # an S3 source's commit id (design/sources.md)
_S3_REPO = re.compile(r"s3/[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](?:/[\w.=+-]+)*")
_REPO = re.compile(r"(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*")
_QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
_SUFFIX = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}

# Where a failure is reported; set as soon as the flags that name the sinks are parsed.
_context: dict = {"termination": Path(DEFAULT_TERMINATION_LOG), "progress": None, "token": None, "secrets": (),
                  "interrupted": None}


def _bad(flag: str, why: str) -> AgentError:
    return AgentError("InvalidConfiguration", f"{flag}: {why}")


def parse_quantity(value: str) -> float:
    """A Kubernetes quantity (`200Mi`, `1G`, `500k`) as bytes per second."""
    match = _QUANTITY.fullmatch(value.strip())
    if not match or float(match.group(1)) * _SUFFIX[match.group(2)] < 1:
        raise _bad("--bandwidth", f"{value!r} is not a positive Kubernetes quantity like 200Mi or 1G")
    return float(match.group(1)) * _SUFFIX[match.group(2)]


def check_repo(repo: str) -> str:
    """ORG/NAME on the Hub, or `s3/<bucket>/<prefix>`, the name an S3 source's files are kept under."""
    if not (_REPO.fullmatch(repo) or _S3_REPO.fullmatch(repo)) or ".." in repo:
        raise _bad("--repo", f"{repo!r} is not ORG/NAME")
    return repo


def check_revision(revision: str, flag: str = "--revision") -> str:
    parts = revision.split("/")
    if not revision or any(p in ("", ".", "..") for p in parts) or "\\" in revision or "\0" in revision \
            or any(c.isspace() for c in revision):
        raise _bad(flag, f"{revision!r} is not a branch, tag or commit")
    return revision


def check_dest(dest: str) -> Path:
    """The volume root must be a directory, or not exist yet below one (the agent creates it)."""
    path = Path(dest)
    for existing in (path, *path.parents):
        if existing.exists() or existing.is_symlink():
            if not existing.is_dir():
                raise _bad("--dest", f"{str(existing)!r} is not a directory: pass the cache volume's mount path")
            return path
    return path


def check_endpoint(endpoint: str) -> str:
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.query:
        raise _bad("--endpoint", "must be an http(s) URL without credentials or query")
    return endpoint


def read_token(path: str | None) -> str | None:
    """Read once. HF_TOKEN in the environment is deliberately ignored: env vars leak into pod specs."""
    if path is None:
        return None
    try:
        token = Path(path).read_text().strip()
    except OSError as err:
        raise _bad("--token-file", f"cannot read it ({type(err).__name__})") from None
    if not token or any(c.isspace() for c in token):
        raise _bad("--token-file", "is empty or not a single token")
    _context["token"] = token
    _setup_logging(token)
    return token


class _Redact(logging.Filter):
    def __init__(self, secret: str):
        super().__init__()
        self.secret = secret

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = record.getMessage().replace(self.secret, "[redacted]")
        record.args = None
        return True


def _hide(secrets: tuple[str, ...]) -> None:
    """Credentials read from files (S3 keys) are scrubbed from every log line and failure record."""
    _context["secrets"] = (*_context["secrets"], *secrets)
    for handler in log.handlers:
        for secret in secrets:
            handler.addFilter(_Redact(secret))


def _setup_logging(token: str | None) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    if token:
        handler.addFilter(_Redact(token))
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False


def _progress(fields, progress_file: str | None, configmap: str | None) -> Progress:
    """The file sink first, so even a bad --progress-configmap gets its Failed record written."""
    progress = Progress([FileSink(Path(progress_file))] if progress_file else [], fields)
    _context["progress"] = progress
    if configmap:
        namespace, name = parse_configmap_ref(configmap)
        progress.sinks.append(ConfigMapSink(namespace, name, api_factory=_context["configmap_api"]))
    return progress


def _flag(argv: list[str], name: str) -> str | None:
    """A flag's value read straight from argv, for reporting a usage error click raised before parsing."""
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg[len(name) + 1:]
    return None


def _usage_error(argv: list[str], err: click.UsageError) -> AgentError:
    termination = _flag(argv, "--termination-log")
    if termination:
        _context["termination"] = Path(termination)
    progress_file = _flag(argv, "--progress-file")
    if progress_file and _context["progress"] is None:
        _progress({"resolve": RESOLVE_FIELDS, "prune": PRUNE_FIELDS}.get(argv[0] if argv else "", FETCH_FIELDS),
                  progress_file, None)
    return AgentError("InvalidConfiguration", err.format_message())


def _need_repo(repo: str | None) -> str:
    if repo is None:
        raise _bad("--repo", "missing: give ORG/NAME (or --s3-bucket for an S3 source)")
    return repo


def _client(endpoint: str, token: str | None, progress: Progress, concurrency: int = 8) -> HubClient:
    policy = dataclasses.replace(RetryPolicy.from_env(), report=progress.note)
    return HubClient(check_endpoint(endpoint), token, policy, pool_size=concurrency,
                     timeout=read_timeout_from_env())


def _patterns(allow, ignore) -> str:
    shown = [f"--allow {p!r}" for p in allow] + [f"--ignore {p!r}" for p in ignore]
    return " ".join(shown) if shown else "no --allow/--ignore patterns"


def _listing(client: HubClient, repo: str, revision: str, allow, ignore):
    """The listing and the entries the patterns select; selecting nothing is refused (14): a
    cache with no files would be Ready and useless."""
    listing = parse_listing(repo, revision, client.listing(repo, revision))
    entries = select(listing.entries, list(allow) if allow else None, list(ignore) if ignore else None)
    if not entries:
        raise AgentError("InvalidSource", f"{_patterns(allow, ignore)} select none of the "
                                          f"{len(listing.entries)} files of {repo}@{listing.commit}")
    return listing, entries


_common = [
    click.option("--endpoint", default=DEFAULT_ENDPOINT, show_default=True),
    click.option("--repo", help="ORG/NAME on the Hub (not with --s3-bucket)"),
    click.option("--revision", default="main", show_default=True),
    click.option("--token-file"),
    click.option("--allow", multiple=True, help="glob, repeatable (huggingface_hub allow_patterns)"),
    click.option("--ignore", multiple=True, help="glob, repeatable (huggingface_hub ignore_patterns)"),
    click.option("--progress-file"),
    click.option("--progress-configmap", help="NAMESPACE/NAME"),
    click.option("--termination-log", default=DEFAULT_TERMINATION_LOG, show_default=True),
]


_s3 = [
    click.option("--s3-bucket", help="the source is this S3 bucket instead of the Hub"),
    click.option("--s3-prefix", default="", help="the folder in the bucket (no leading /)"),
    click.option("--s3-region", default="us-east-1", show_default=True),
    click.option("--s3-endpoint", help="an S3-compatible endpoint URL"),
    click.option("--credentials-dir", help="a mounted Secret with files AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
]
_mirror = [
    click.option("--mirror-bucket", help="the fleet mirror's S3 bucket"),
    click.option("--mirror-prefix", default="fleetcache", show_default=True),
    click.option("--mirror-region", default="us-east-1", show_default=True),
    click.option("--mirror-endpoint"),
    click.option("--mirror-credentials-dir"),
    click.option("--mirror-role", help="publisher | reader"),
    click.option("--mirror-on-missing", default=ORIGIN, show_default=True, help="origin | fail"),
]


def _with(options):
    def apply(fn):
        for option in reversed(options):
            fn = option(fn)
        return fn
    return apply


@click.group()
def main_group() -> None:
    """Resolve, fetch, verify and prune Hugging Face model snapshots in a warm cache."""


MAX_COMPARE = 8


def _compared(client: HubClient, repo: str, commit: str, allow, ignore, entries) -> dict:
    """The same selection of a served commit; one the hub no longer knows is reported missing."""
    try:
        listing = parse_listing(repo, commit, client.listing(repo, commit))
    except AgentError as err:
        if err.reason != "SourceNotFound":
            raise
        return compared_record(commit, entries, None)
    other = select(listing.entries, list(allow) if allow else None, list(ignore) if ignore else None)
    return compared_record(commit, entries, other)


def _s3_client(location: S3Location, progress: Progress, concurrency: int = 8) -> S3Client:
    """The S3 wrapper for the source or the mirror; its credentials are hidden from logs from here on."""
    if location.endpoint:
        check_endpoint(location.endpoint)
    policy = dataclasses.replace(RetryPolicy.from_env(), report=progress.note)
    client = S3Client(location, policy, pool_size=concurrency, timeout=read_timeout_from_env())
    _hide(client.secrets)
    return client


def _no_hub_repo(repo: str | None) -> None:
    if repo is not None:
        raise _bad("--repo", "not with --s3-bucket: an S3 source is named by its bucket and prefix")


def _resolve_s3(progress: Progress, location: S3Location, allow, ignore, compare) -> dict:
    """List and pin the prefix (contract §C, §D): the record carries the manifest every cluster fetches."""
    progress.phase("Resolving", repo=location.repo)
    if len(compare) > MAX_COMPARE or not all(_S3_COMMIT.fullmatch(c) for c in compare):
        raise _bad("--compare", f"at most {MAX_COMPARE} S3 commits (s3- and 40 hex)")
    client = _s3_client(location, progress)
    manifest = resolve_s3(client, list(allow) if allow else None, list(ignore) if ignore else None, 8,
                          progress.note)
    if not manifest:
        raise AgentError("InvalidSource", f"{_patterns(allow, ignore)} select none of the objects under "
                                          f"{location.describe()}")
    entries = manifest_entries(manifest)
    listing = Listing(location.repo, None, manifest_commit(manifest), entries)
    # An S3 prefix has no history to compare with: a compared commit is reported missing.
    return {**resolved_record(listing, entries), "manifest": manifest,
            "compared": [compared_record(c, entries, None) for c in sorted(set(compare))]}


@main_group.command()
@_with(_common)
@click.option("--compare", "compare", multiple=True,
              help="a served commit (40 hex) to report what the resolved commit shares with, repeatable")
@_with(_s3)
@click.option("--manifest-file", "volume_manifest",
              help="an existing volume's manifest file (JSON list of {path, size, sha256}) to pin")
def resolve(endpoint, repo, revision, token_file, allow, ignore, progress_file, progress_configmap,
            termination_log, compare, s3_bucket, s3_prefix, s3_region, s3_endpoint, credentials_dir,
            volume_manifest) -> None:
    """List REPO at REVISION (or an S3 prefix, or a volume's manifest file) and print {repo, revision, commit,
    files, bytes, manifestDigest}."""
    _context["termination"] = Path(termination_log)
    progress = _progress(RESOLVE_FIELDS, progress_file, progress_configmap)
    if volume_manifest is not None:
        _no_hub_repo(repo)
        progress.phase("Resolving")
        record = resolve_volume_manifest(Path(volume_manifest), list(allow) or None, list(ignore) or None)
        progress.phase("Resolved", **record)
        click.echo(json.dumps(record, sort_keys=True))
        return
    if s3_bucket is not None:
        _no_hub_repo(repo)
        location = S3Location(s3_bucket, s3_prefix, s3_region, s3_endpoint, credentials_dir)
        record = _resolve_s3(progress, location, allow, ignore, compare)
        progress.phase("Resolved", **record)
        click.echo(json.dumps(record, sort_keys=True))
        return
    token = read_token(token_file)
    progress.phase("Resolving", repo=check_repo(_need_repo(repo)), revision=check_revision(revision))
    if len(compare) > MAX_COMPARE:
        raise _bad("--compare", f"given {len(compare)} times; at most {MAX_COMPARE}")
    for commit in compare:
        if not _COMMIT.fullmatch(commit):
            raise _bad("--compare", f"{commit!r} is not a 40-hex commit")
    client = _client(endpoint, token, progress)
    listing, entries = _listing(client, repo, revision, allow, ignore)
    record = {**resolved_record(listing, entries),
              "compared": [_compared(client, repo, c, allow, ignore, entries) for c in sorted(set(compare))]}
    progress.phase("Resolved", **record)
    click.echo(json.dumps(record, sort_keys=True))


@main_group.command()
@_with(_common)
@click.option("--dest", required=True)
@click.option("--concurrency", default=8, show_default=True, type=str)
@click.option("--bandwidth", help="total cap as a Kubernetes quantity, e.g. 200Mi")
@click.option("--layout", "layout_name", default="hf-cache", show_default=True,
              help="flat: plain files, each commit in DEST/commits/<commit>, DEST/current -> the latest")
@click.option("--wait", is_flag=True, help="wait for another writer instead of exiting 16")
@click.option("--ref", "refs", multiple=True,
              help="after success, name the commit fetched (hub/models--ORG--NAME/refs/REF), repeatable")
@_with(_s3)
@click.option("--commit", help="S3: the resolved commit (s3- and 40 hex)")
@click.option("--manifest-digest", "pinned_digest",
              help="the resolved manifest digest (S3: required; Hub: the listing must match it, and a mirror "
                   "reader of a --revision commit plans from the mirror's manifest without the Hub)")
@click.option("--manifest-file", help="S3: the resolved manifest (JSON list)")
@click.option("--manifest-configmap", help="S3: NAMESPACE/NAME of a ConfigMap with key manifest.json")
@_with(_mirror)
def fetch(endpoint, repo, revision, token_file, allow, ignore, progress_file, progress_configmap,
          termination_log, dest, concurrency, bandwidth, layout_name, wait, refs, s3_bucket, s3_prefix, s3_region,
          s3_endpoint, credentials_dir, commit, pinned_digest, manifest_file, manifest_configmap, mirror_bucket,
          mirror_prefix, mirror_region, mirror_endpoint, mirror_credentials_dir, mirror_role,
          mirror_on_missing) -> None:
    """Download REPO at REVISION (or an S3 source's pinned manifest) into DEST, verifying every byte while it
    streams; with --mirror-bucket, through the fleet mirror (publisher or reader)."""
    _context["termination"] = Path(termination_log)
    progress = _progress(FETCH_FIELDS, progress_file, progress_configmap)
    token = read_token(token_file)
    if s3_bucket is None:
        check_repo(_need_repo(repo))
        for flag, value in (("--commit", commit), ("--manifest-file", manifest_file),
                            ("--manifest-configmap", manifest_configmap)):
            if value is not None:
                raise _bad(flag, "only with --s3-bucket (a Hub fetch pins --revision)")
        if pinned_digest is not None and not _DIGEST64.fullmatch(pinned_digest):
            raise _bad("--manifest-digest", f"{pinned_digest!r} is not a 64-hex sha256")
    else:
        _no_hub_repo(repo)
    check_revision(revision)
    for ref in refs:
        if _COMMIT.fullmatch(check_revision(ref, "--ref")):
            raise _bad("--ref", f"{ref!r} is a commit; a ref is a branch or tag name that readers ask for")
    dest_path = check_dest(dest)
    progress.measure = lambda: volume_usage(dest_path)
    if not concurrency.isdigit() or not 1 <= int(concurrency) <= 64:
        raise _bad("--concurrency", f"{concurrency!r} is not a whole number from 1 to 64")
    if layout_name not in FETCH_LAYOUTS:
        raise _bad("--layout", f"{layout_name!r} is not one of {', '.join(sorted(FETCH_LAYOUTS))}")
    limit = Bandwidth(parse_quantity(bandwidth)) if bandwidth else None
    mirror = _mirror_config(mirror_bucket, mirror_prefix, mirror_region, mirror_endpoint, mirror_credentials_dir,
                            mirror_role, mirror_on_missing, progress, int(concurrency))
    progress.phase("Resolving")
    complete = None
    if s3_bucket is None:
        client = _client(endpoint, token, progress, int(concurrency))
        listing, entries, complete = _hub_listing(client, mirror, Layout(dest_path, repo), repo, revision,
                                                  pinned_digest, allow, ignore)
        source = HubSource(client, repo, listing.commit)
    else:
        location = S3Location(s3_bucket, s3_prefix, s3_region, s3_endpoint, credentials_dir)
        client = _s3_client(location, progress, int(concurrency))
        manifest = _pinned_manifest(commit, pinned_digest, manifest_file, manifest_configmap, client.policy)
        repo = location.repo
        listing, entries = pinned_listing(repo, manifest, commit, pinned_digest)
        source = S3Source(client, manifest)
    layout = fetch_layout(layout_name, dest_path, repo, listing.commit)
    if mirror is not None:
        source = MirrorSource(source, mirror, repo, listing.commit, manifest_digest(entries), entries,
                              int(concurrency), progress.note, complete)
    record = run_fetch(source, layout, listing, entries, progress, int(concurrency), limit,
                       client.policy, wait, tuple(refs))
    click.echo(json.dumps(record, sort_keys=True))


def _hub_listing(client: HubClient, mirror: MirrorConfig | None, layout, repo: str, revision: str,
                 digest: str | None, allow, ignore):
    """What a Hub fetch plans from, and whether the mirror is known complete (None: not asked). A mirror
    reader of a pinned commit and digest makes no Hub request when the volume or the mirror holds the
    manifest (contract §C); otherwise the Hub listing, which must give --manifest-digest when given (15:
    a Job built from another resolve)."""
    complete = None
    if mirror is not None and mirror.role == READER and digest and _COMMIT.fullmatch(revision):
        listing, complete = reader_listing(mirror, layout, repo, revision, digest)
        if listing is not None:
            return listing, listing.entries, complete
    listing, entries = _listing(client, repo, revision, allow, ignore)
    if digest is not None and manifest_digest(entries) != digest:
        raise _bad("--manifest-digest", f"{digest} is not the digest {manifest_digest(entries)} of the selected "
                                        f"files of {repo}@{listing.commit}: the Job was built from another resolve")
    return listing, entries, complete


def _pinned_manifest(commit, digest, manifest_file, manifest_configmap, policy: RetryPolicy) -> list[dict]:
    """The manifest resolve latched (contract §D), from the mounted file or the ConfigMap."""
    if commit is None or not _S3_COMMIT.fullmatch(commit):
        raise _bad("--commit", f"{commit!r} is not an S3 commit (s3- and 40 hex); pass the resolved commit")
    if digest is None or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise _bad("--manifest-digest", f"{digest!r} is not a 64-hex sha256")
    if (manifest_file is None) == (manifest_configmap is None):
        raise _bad("--manifest-file", "give exactly one of --manifest-file and --manifest-configmap")
    if manifest_file is not None:
        return read_manifest_file(manifest_file)
    namespace, name = parse_configmap_ref(manifest_configmap)

    def read():
        try:
            data = _context["configmap_api"]().read_namespaced_config_map(name, namespace).data or {}
        except Exception as err:  # noqa: BLE001 - the API server's failures are retried, a 404 is a wrong flag
            if getattr(err, "status", None) == 404:
                raise _bad("--manifest-configmap", f"{manifest_configmap} does not exist") from None
            raise Retryable(AgentError("SourceUnreachable", f"reading ConfigMap {manifest_configmap}: "
                                                            f"{type(err).__name__}")) from None
        if "manifest.json" not in data:
            raise _bad("--manifest-configmap", f"{manifest_configmap} has no key manifest.json")
        try:
            return parse_manifest(json.loads(data["manifest.json"]))
        except ValueError:
            raise _bad("--manifest-configmap", "manifest.json is not JSON") from None

    return policy.run(read, f"reading ConfigMap {manifest_configmap}")


def _mirror_config(bucket, prefix, region, endpoint, credentials_dir, role, on_missing, progress: Progress,
                   concurrency: int) -> MirrorConfig | None:
    if bucket is None:
        for flag, value in (("--mirror-role", role), ("--mirror-endpoint", endpoint),
                            ("--mirror-credentials-dir", credentials_dir)):
            if value is not None:
                raise _bad(flag, "only with --mirror-bucket")
        return None
    if role not in (PUBLISHER, READER):
        raise _bad("--mirror-role", f"{role!r} is not publisher or reader")
    if on_missing not in (ORIGIN, FAIL):
        raise _bad("--mirror-on-missing", f"{on_missing!r} is not origin or fail")
    client = _s3_client(S3Location(bucket, prefix, region, endpoint, credentials_dir), progress, concurrency)
    return MirrorConfig(client, prefix, role, on_missing)


@main_group.command()
@click.option("--dest", required=True)
@click.option("--repo")
@click.option("--revision")
@click.option("--termination-log", default=DEFAULT_TERMINATION_LOG, show_default=True)
@click.option("--layout", "layout_name", help="flat: an existing volume checked in place (spec.source.volume)")
@click.option("--manifest-file", help="flat: the pinned manifest to check against")
@click.option("--manifest-digest", "pinned_digest", help="flat: the manifest's resolved digest")
@click.option("--endpoint", default=DEFAULT_ENDPOINT, show_default=True)
@click.option("--token-file")
@click.option("--allow", multiple=True)
@click.option("--ignore", multiple=True)
@click.option("--progress-file")
@click.option("--progress-configmap", help="NAMESPACE/NAME")
def verify(dest, repo, revision, termination_log, layout_name, manifest_file, pinned_digest, endpoint, token_file,
           allow, ignore, progress_file, progress_configmap) -> None:
    """Re-hash every file of the snapshot against its manifests; exit 19 naming the bad files. With --layout
    flat, an existing volume against --manifest-file or the Hub listing of --repo at --revision: exit 21 naming
    up to 5 files."""
    _context["termination"] = Path(termination_log)
    progress = _progress(VERIFY_FIELDS, progress_file, progress_configmap)
    dest_path = check_dest(dest)
    progress.measure = lambda: volume_usage(dest_path)
    if layout_name is not None:
        if layout_name != "flat":
            raise _bad("--layout", f"{layout_name!r}: verify checks an existing volume in place, --layout flat")
        progress.phase("Verifying")
        if manifest_file is not None:
            _no_hub_repo(repo)
            entries = manifest_entries(read_volume_manifest(Path(manifest_file)))
        else:
            client = _client(endpoint, read_token(token_file), progress)
            _, entries = _listing(client, check_repo(_need_repo(repo)), check_revision(revision or "main"),
                                  allow, ignore)
        click.echo(json.dumps(verify_in_place(dest_path, entries, pinned_digest), sort_keys=True))
        return
    check_repo(_need_repo(repo))
    click.echo(json.dumps({**run_verify(dest_path, repo, revision), **volume_usage(dest_path)}, sort_keys=True))


@main_group.command()
@click.option("--dest", required=True)
@click.option("--repo", required=True)
@click.option("--keep", multiple=True, help="a commit (40 hex) to keep, repeatable; at least one")
@click.option("--wait", is_flag=True, help="wait for another writer instead of exiting 16")
@click.option("--progress-file")
@click.option("--progress-configmap", help="NAMESPACE/NAME")
@click.option("--termination-log", default=DEFAULT_TERMINATION_LOG, show_default=True)
def prune(dest, repo, keep, wait, progress_file, progress_configmap, termination_log) -> None:
    """Remove every commit of REPO under DEST but the kept ones: refs, snapshots, manifests, unshared blobs."""
    _context["termination"] = Path(termination_log)
    progress = _progress(PRUNE_FIELDS, progress_file, progress_configmap)
    check_repo(repo)
    if not keep:
        raise _bad("--keep", "not given: a prune must keep at least one commit (the one the volume serves)")
    for commit in keep:
        if not (_COMMIT.fullmatch(commit) or _S3_COMMIT.fullmatch(commit)):
            raise _bad("--keep", f"{commit!r} is not a 40-hex commit (or an S3 source's s3- commit)")
    dest_path = check_dest(dest)
    if not dest_path.is_dir():
        raise _bad("--dest", f"{dest!r} does not exist: pass the cache volume's mount path")
    progress.measure = lambda: volume_usage(dest_path)
    click.echo(json.dumps(run_prune(dest_path, repo, frozenset(keep), progress, wait), sort_keys=True))


# -- node tier (design/node-tier.md; agent/node_warm.py, node_agent.py, slots.py, select.py) ------------

_DIGEST64 = re.compile(r"[0-9a-f]{64}")
_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
PRUNE_LEASE_SECONDS = 900  # three pruning periods: a dead pruner is replaced within 15 minutes


def _node_commit(commit: str, flag: str = "--commit") -> str:
    if not valid_commit(commit):
        raise _bad(flag, f"{commit!r} is not a 40-hex commit (or s3- or vol- and 40 hex)")
    return commit


def _node_digest(digest: str | None, required: bool = True) -> str | None:
    if (digest is not None or required) and not _DIGEST64.fullmatch(digest or ""):
        raise _bad("--manifest-digest", f"{digest!r} is not a 64-hex sha256")
    return digest


def _seconds_flag(flag: str, value: str | None) -> float | None:
    try:
        seconds = None if value is None else float(value)
    except ValueError:
        seconds = -1.0
    if seconds is not None and seconds <= 0:
        raise _bad(flag, f"{value!r} is not a positive number of seconds")
    return seconds


def _loop_interval() -> float:
    try:
        return float(os.environ.get("FLEETCACHE_NODE_AGENT_INTERVAL", "30"))
    except ValueError:
        return 30.0


@main_group.command("node-warm")
@click.option("--source", required=True, help="the cluster volume's root (where fetch wrote hub/)")
@click.option("--dest", required=True, help="this node's copy: <nodeCache.path>/<ns>/<cache>")
@click.option("--repo", required=True)
@click.option("--commit", required=True)
@click.option("--manifest-digest", required=True)
@click.option("--node", required=True, help="the node's name: the key of its status record")
@click.option("--status-configmap", help="NAMESPACE/NAME: merge-patch the record into key <node>")
@click.option("--status-file", help='JSON {"<node>": record}, the simulation stand-in')
@click.option("--slots-namespace", help="take a warm slot from Leases node-warm-slot-* there")
@click.option("--slots-dir", help="take a warm slot by flock on slot-<i> files there")
@click.option("--holder", help="slot holder identity (default <node>:<dest>)")
@click.option("--prune-selector", help="label selector of the warmer pods: prune records of nodes without one")
@click.option("--pruner-lease", help="the Lease (in the status ConfigMap's namespace) electing one pruner")
@click.option("--keep", "keep", multiple=True,
              help="another commit to keep on the node, repeatable; given, the repo's other commits are pruned "
                   "once this one is Ready")
@click.option("--manifest-file", help="an existing volume's manifest (JSON list): its files are flat at --source")
@click.option("--ready-file", help="touched while the copy is Ready")
@click.option("--attempt-timeout", help="seconds one copy attempt may take")
@click.option("--retries", default="3", show_default=True)
@click.option("--once", is_flag=True, help="exit when Ready (0) or failed (its exit code)")
@click.option("--termination-log", default=DEFAULT_TERMINATION_LOG, show_default=True)
def node_warm(source, dest, repo, commit, manifest_digest, node, status_configmap, status_file, slots_namespace,
              slots_dir, holder, prune_selector, pruner_lease, keep, manifest_file, ready_file, attempt_timeout,
              retries, once, termination_log) -> None:
    """Copy REPO@COMMIT from the cluster volume to this node, every byte hashed; node-ready.json last."""
    _context["termination"] = Path(termination_log)
    sinks = []
    if status_file and status_configmap:
        raise _bad("--status-file", "give --status-configmap or --status-file, not both")
    if status_file:
        sinks.append(StatusFileSink(Path(status_file), node))
    recorder = NodeRecorder(sinks, commit, float(os.environ.get(STATUS_INTERVAL_ENV, "30")))
    _context["progress"] = recorder
    if status_configmap:
        namespace, name = parse_configmap_ref(status_configmap)
        sinks.append(KeyedSink(ConfigMapSink(namespace, name, api_factory=_context["configmap_api"]), node))
    check_repo(repo)
    _node_commit(commit)
    _node_digest(manifest_digest)
    if not _NODE_NAME.fullmatch(node):
        raise _bad("--node", f"{node!r} is not a node name")
    if slots_namespace and slots_dir:
        raise _bad("--slots-dir", "give --slots-namespace or --slots-dir, not both")
    if not retries.isdigit() or int(retries) > 100:
        raise _bad("--retries", f"{retries!r} is not a whole number from 0 to 100")
    if bool(prune_selector) != bool(pruner_lease) or (prune_selector and not status_configmap):
        raise _bad("--prune-selector", "record pruning needs --prune-selector, --pruner-lease and --status-configmap")
    for kept in keep:
        _node_commit(kept, "--keep")
    holder = holder or f"{node}:{dest}"
    if prune_selector and not once:
        namespace, name = parse_configmap_ref(status_configmap)
        lease = NamedLease(_context["coordination_api"](), namespace, pruner_lease, holder, PRUNE_LEASE_SECONDS)
        RecordPruner(_context["configmap_api"](), lease, namespace, name, prune_selector).start(
            float(os.environ.get(PRUNE_ENV, "300")))
    slots = DirSlots(Path(slots_dir), holder) if slots_dir else \
        LeaseSlots(_context["coordination_api"](), slots_namespace, holder) if slots_namespace else None
    warm = Warm(Path(source), check_dest(dest), repo, commit, manifest_digest, recorder, slots,
                Path(ready_file) if ready_file else None, _seconds_flag("--attempt-timeout", attempt_timeout),
                frozenset(keep) if keep else None, Path(manifest_file) if manifest_file else None)
    click.echo(json.dumps(run_node_warm(warm, once, int(retries)), sort_keys=True))


@main_group.command("node-ready")
@click.option("--dest", required=True)
@click.option("--commit", required=True)
@click.option("--manifest-digest")
def node_ready(dest, commit, manifest_digest) -> int:
    """Exit 0 iff the node copy of COMMIT (and digest) is published: the warmer's readiness probe."""
    ready = copy_ready(Path(dest), _node_commit(commit), _node_digest(manifest_digest, required=False))
    return 0 if ready else 1


@main_group.command("node-prepare")
@click.option("--root", required=True, help="nodeCache.path as mounted in the prepare container")
@click.option("--keep-file", required=True, help="keep.json from the fleetcache-node-dirs ConfigMap")
@click.option("--once", is_flag=True)
def node_prepare(root, keep_file, once) -> None:
    """Create placed caches' directories (uid 65532, node-check.json); delete expired ones. CHOWN only."""
    while True:
        click.echo(json.dumps(run_prepare(Path(root), Path(keep_file)), sort_keys=True))
        if once:
            return
        time.sleep(_loop_interval())


@main_group.command("node-label")
@click.option("--root", required=True)
@click.option("--node", required=True, help="this node's name (the only Node it patches)")
@click.option("--keep-file", required=True)
@click.option("--labels-file", help="a JSON {key: value} file instead of the Node (simulation)")
@click.option("--once", is_flag=True)
def node_label(root, node, keep_file, labels_file, once) -> None:
    """Label this node node-cache.fleetcache.dev/<k>=<commit> for each ready placed cache; remove the rest."""
    labels = FileLabels(Path(labels_file)) if labels_file else NodeLabels(_context["node_api"](), node)
    while True:
        try:
            click.echo(json.dumps(run_label(Path(root), Path(keep_file), labels), sort_keys=True))
        except Exception as err:  # noqa: BLE001 - an API outage: the next pass retries
            if once:
                raise
            log.warning("could not label node %s (%s %s); retrying", node, type(err).__name__,
                        getattr(err, "status", "") or "")
        if once:
            return
        time.sleep(_loop_interval())


@main_group.command("select")
@click.option("--node", "node_root", required=True, help="the node PVC's mount (read-only)")
@click.option("--volume", required=True, help="the cluster PVC's mount (read-only)")
@click.option("--repo", required=True)
@click.option("--commit", required=True)
@click.option("--manifest-digest", required=True)
@click.option("--link", required=True, help="the symlink to write, e.g. /var/run/fleetcache/cache")
@click.option("--termination-log", default=DEFAULT_TERMINATION_LOG, show_default=True)
def select_command(node_root, volume, repo, commit, manifest_digest, link, termination_log) -> None:
    """Point LINK at the node copy's hub/ if published for COMMIT and digest, else at the volume's."""
    _context["termination"] = Path(termination_log)
    record = run_select(Path(node_root), Path(volume), check_repo(repo), _node_commit(commit),
                        _node_digest(manifest_digest), Path(link))
    log.info("delivery %s (%s)", record["delivery"], record["reason"])
    write_termination(Path(termination_log), record)
    click.echo(json.dumps(record, sort_keys=True))


def _report(reason: str, message: str, code: int) -> int:
    """The end of every failure: a final Failed record to every sink and the termination message.

    The message is scrubbed of the token too, in case a server ever echoed it back."""
    for secret in (_context["token"], *_context["secrets"]):
        if secret:
            message = message.replace(secret, "[redacted]")
    progress: Progress | None = _context["progress"]
    record = progress.fail(reason, message) if progress else {"phase": "Failed", "reason": reason,
                                                               "message": message}
    write_termination(_context["termination"], record)
    return code


def _report_error(err: AgentError) -> int:
    log.error("%s (exit %d): %s", err.reason, err.code, err.message)
    return _report(err.reason, err.message, err.code)


def _report_unexpected(err: Exception) -> int:
    """A bug is not a row of the table: exit 1 with an empty reason, which composers treat as transient."""
    log.exception("unexpected failure")
    return _report("", f"unexpected {type(err).__name__}; see the agent's log", 1)


def _report_interrupted(sig: Interrupted) -> int:
    """One line, a final record with reason Interrupted, and 128+signal: the next run resumes."""
    name = signal.Signals(sig.signum).name
    progress: Progress | None = _context["progress"]
    done = progress.record.get("bytesDone") if progress else None
    total = progress.record.get("bytesTotal") if progress else None
    kept = f" with {done} of {total} bytes on the volume" if done is not None and total else ""
    message = f"interrupted by {name}{kept}; the next run resumes from what is on the volume"
    log.warning("%s (exit %d)", message, sig.code)
    record = progress.fail(Interrupted.REASON, message) if progress else {
        "phase": "Failed", "reason": Interrupted.REASON, "message": message}
    write_termination(_context["termination"], record)
    return sig.code


def _on_signal(signum: int, frame) -> None:
    """The first SIGINT/SIGTERM interrupts the main thread; later ones wait for that cleanup."""
    if _context["interrupted"] is None:
        _context["interrupted"] = signum
        raise Interrupted(signum)


def main(argv: list[str] | None = None, configmap_api=None, coordination_api=None,
         node_api=None) -> int:
    """Entry point; tests inject stand-ins: `configmap_api` and `node_api` (CoreV1Api factories),
    `coordination_api` (a CoordinationV1Api factory, for the warm slots)."""
    _context.update(termination=Path(DEFAULT_TERMINATION_LOG), progress=None, token=None, secrets=(), interrupted=None,
                    configmap_api=configmap_api or incluster_core_api,
                    coordination_api=coordination_api or incluster_coordination_api,
                    node_api=node_api or incluster_core_api)
    _setup_logging(None)
    code = 0
    args = sys.argv[1:] if argv is None else argv
    # Signal handlers can only be set from the main thread (the console script's; a test may differ).
    on_main = threading.current_thread() is threading.main_thread()
    previous = {signum: signal.signal(signum, _on_signal) for signum in (signal.SIGINT, signal.SIGTERM)} \
        if on_main else {}
    try:
        try:
            result = main_group.main(args=args, prog_name="fleetcache-agent", standalone_mode=False)
            code = result if isinstance(result, int) else 0  # node-ready answers with its exit code
        finally:  # from here on a signal no longer interrupts: the failure being reported wins
            _context["interrupted"] = _context["interrupted"] or signal.SIGTERM
    except Interrupted as sig:
        code = _report_interrupted(sig)
    except click.UsageError as err:
        code = _report_error(_usage_error(args, err))
    except AgentError as err:
        code = _report_error(err)
    except OSError as err:
        mapped = from_os_error(err, "under --dest")
        code = _report_error(mapped) if mapped else _report_unexpected(err)
    except Exception as err:  # noqa: BLE001 - a bug still ends with a Failed record
        code = _report_unexpected(err)
    finally:
        if _context["progress"] is not None:
            _context["progress"].close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if argv is None:
        sys.exit(code)
    return code
