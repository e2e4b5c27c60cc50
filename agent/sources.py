"""Where an entry's bytes come from, for the one fetch engine: the Hub, an S3 bucket, or a fleet mirror.

The engine (agent/fetch.py) plans from the disk and streams ranged parts; a `Source` only says
how to open a range of one entry and how its failures classify (each raises an AgentError row
of the exit-code table or a hub.Retryable). Its protocol:

- `url(entry)`: a locator for the entry's first request (a URL, or a name the source understands);
- `open_range(url, start, end, size)`: a streaming response with `read1`, `release_conn`,
  `close` and `final_url` (the locator to reuse for the entry's later parts). `readinto(view)`
  is optional: the engine fills its buffer with it where the response has it (a urllib3
  response is read through the http.client one under it, straight from the socket), and
  copies what `read1` returns otherwise (fetch.body_reader);
- `mismatch(entry)`: the entry's bytes failed their digest (a mirror falls back to the origin);
- `complete(layout, entries, digest)`: after the snapshot is published and before Ready; returns
  extra fields for the final record (a mirror publishes here and reports where bytes came from).

Also here: the pinned manifest of non-Hub sources (contract §D), a JSON list sorted by path of
`{path, size, sha256, versionId?, etag?}`, its commit id and entries, and S3 resolve.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from pathlib import Path
from typing import Protocol

from fleetcache import reasons
from fleetcache.agent.errors import AgentError
from fleetcache.agent.hub import HubClient
from fleetcache.agent.plan import MAX_FILE_SIZE, Listing, check_path, directory_clash, select
from fleetcache.agent.s3 import S3Client, S3Listed
from fleetcache.manifest import SHA256, Entry, manifest_digest
from fleetcache.shapes import SHA256_HEX

log = logging.getLogger("fleetcache.agent")

MANIFEST_KEYS = frozenset({"path", "size", "sha256", "versionId", "etag"})


class Source(Protocol):
    """What the fetch engine needs of the place an entry's bytes come from (see the module docstring)."""

    def url(self, entry: Entry) -> str: ...

    def open_range(self, url: str, start: int, end: int, size: int): ...

    def mismatch(self, entry: Entry) -> None: ...

    def complete(self, layout, entries: tuple[Entry, ...], digest: str) -> dict: ...


class HubSource:
    """The Hub: resolve URLs of the commit, redirects to the CDN followed by the client."""

    def __init__(self, client: HubClient, repo: str, commit: str):
        self.client, self.repo, self.commit = client, repo, commit

    def url(self, entry: Entry) -> str:
        return self.client.file_url(self.repo, self.commit, entry.path)

    def open_range(self, url: str, start: int, end: int, size: int):
        return self.client.open_range(url, start, end, size)

    def mismatch(self, entry: Entry) -> None:
        """The engine retries the file from the Hub; nothing to switch."""

    def complete(self, layout, entries: tuple[Entry, ...], digest: str) -> dict:
        return {}


class S3Source:
    """An S3 prefix, each entry pinned by the manifest to its versionId or ETag; the locator is its path."""

    def __init__(self, client: S3Client, manifest: list[dict]):
        self.client = client
        self.pins = {item["path"]: (client.location.folder + item["path"], item.get("versionId"), item.get("etag"))
                     for item in manifest}

    def url(self, entry: Entry) -> str:
        return entry.path

    def open_range(self, url: str, start: int, end: int, size: int):
        key, version_id, etag = self.pins[url]
        resp = self.client.open_range(key, version_id, etag, start, end, size)
        resp.final_url = url
        return resp

    def mismatch(self, entry: Entry) -> None:
        """A pinned version whose bytes differ from the resolved sha256 changed underneath: the
        engine's retries then end in DigestMismatch, as for the Hub."""

    def complete(self, layout, entries: tuple[Entry, ...], digest: str) -> dict:
        return {}


def parallel(fn, items: list, workers: int) -> list:
    """`fn` of each item on up to `workers` daemon threads, results in order; the first failure
    stops the others from starting more and is raised. Daemon threads, unlike an executor's, never
    hold the process after a signal ended the run (a request being retried would otherwise keep
    it alive until the kubelet's SIGKILL)."""
    results: list = [None] * len(items)
    failures: list[BaseException] = []
    queue = iter(enumerate(items))
    lock = threading.Lock()

    def work() -> None:
        while not failures:
            with lock:
                taken = next(queue, None)
            if taken is None:
                return
            try:
                results[taken[0]] = fn(taken[1])
            except BaseException as err:  # noqa: BLE001 - re-raised by the caller's thread
                failures.append(err)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(min(workers, len(items)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return results


# -- the pinned manifest of non-Hub sources ---------------------------------------------------

def _refuse(what: str) -> AgentError:
    return AgentError(reasons.InvalidSource, f"manifest: {what}")


def parse_manifest(data: object) -> list[dict]:
    """Validate a manifest (refuse, never sanitize): paths safe and unique, sizes sane, sha256 hex."""
    if not isinstance(data, list):
        raise _refuse("not a JSON list")
    seen: set[str] = set()
    items = []
    for item in data:
        if not isinstance(item, dict) or not {"path", "size", "sha256"} <= set(item) or set(item) - MANIFEST_KEYS:
            raise _refuse(f"entry {item!r:.80} is not {{path, size, sha256, versionId?, etag?}}")
        path = check_path(item["path"])
        size = item["size"]
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_FILE_SIZE:
            raise _refuse(f"{path!r} has a bad size {size!r}")
        if not isinstance(item["sha256"], str) or not SHA256_HEX.fullmatch(item["sha256"]):
            raise _refuse(f"{path!r} has a malformed sha256")
        if any(not isinstance(item.get(k, ""), str) for k in ("versionId", "etag")):
            raise _refuse(f"{path!r} has a non-string versionId or etag")
        if path in seen:
            raise _refuse(f"{path!r} is listed twice")
        seen.add(path)
        items.append(dict(item))
    clash = directory_clash(seen, seen)
    if clash is not None:
        raise _refuse(f"{clash!r} is both a file and a directory")
    return sorted(items, key=lambda i: i["path"])


def read_manifest_file(path: str) -> list[dict]:
    try:
        return parse_manifest(json.loads(Path(path).read_text()))
    except OSError as err:
        raise AgentError(reasons.InvalidConfiguration,
                         f"--manifest-file: cannot read it ({type(err).__name__})") from None
    except ValueError:
        raise AgentError(reasons.InvalidConfiguration, "--manifest-file: not JSON") from None


def manifest_entries(manifest: list[dict]) -> tuple[Entry, ...]:
    return tuple(Entry(i["path"], i["size"], i["sha256"], SHA256) for i in manifest)


def manifest_commit(manifest: list[dict], kind: str = "s3") -> str:
    """`s3-` (or `vol-`, an existing volume's) + the first 40 hex of the sha256 of the canonical
    listing: the pins change it too."""
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
    return f"{kind}-" + hashlib.sha256(canonical.encode()).hexdigest()[:40]


def pinned_listing(repo: str, manifest: list[dict], commit: str, digest: str) -> tuple[Listing, tuple[Entry, ...]]:
    """The listing the engine fetches, after checking the flags name exactly this manifest."""
    entries = manifest_entries(manifest)
    if manifest_digest(entries) != digest:
        raise AgentError(reasons.InvalidConfiguration, f"--manifest-digest {digest} is not the manifest's digest "
                                                 f"{manifest_digest(entries)}")
    if manifest_commit(manifest) != commit:
        raise AgentError(reasons.InvalidConfiguration, f"--commit {commit} is not the manifest's commit "
                                                 f"{manifest_commit(manifest)}")
    return Listing(repo, commit, commit, entries), entries


# -- S3 resolve --------------------------------------------------------------------------------

def resolve_s3(client: S3Client, allow: list[str] | None, ignore: list[str] | None, concurrency: int,
               report=None) -> list[dict]:
    """List the prefix, pin each selected object, take its sha256 from S3's full-object
    ChecksumSHA256 where present, else stream it once; the manifest sorted by path."""
    listed = client.list_objects()
    for obj in listed:
        check_path(obj.path)
    candidates = {o.path: o for o in listed}
    chosen = select(tuple(Entry(o.path, o.size, "", SHA256) for o in listed), allow, ignore)
    objects = [candidates[e.path] for e in chosen]
    if not objects:
        return []

    def checksum(obj: S3Listed) -> str | None:
        """Asked of S3 when the listing reports a SHA-256 checksum, or reports no algorithm at all
        (ListObjectVersions and some S3-compatible stores leave it out)."""
        return client.checksum_sha256(obj) if "SHA256" in obj.checksums or not obj.checksums else None

    known = parallel(checksum, objects, concurrency)
    to_hash = [o for o, sha in zip(objects, known, strict=True) if sha is None]
    if to_hash and report:
        report(f"hashing {len(to_hash)} objects ({sum(o.size for o in to_hash)} bytes) that have no S3 "
               "SHA-256 checksum")
    streamed = dict(zip((o.path for o in to_hash), parallel(client.stream_sha256, to_hash, concurrency),
                        strict=True))
    digests = [sha or streamed[o.path] for o, sha in zip(objects, known, strict=True)]
    manifest = []
    for obj, sha in zip(objects, digests, strict=True):
        item = {"path": obj.path, "size": obj.size, "sha256": sha}
        if obj.version_id:
            item["versionId"] = obj.version_id
        elif obj.etag:
            item["etag"] = obj.etag
        manifest.append(item)
    return parse_manifest(manifest)
