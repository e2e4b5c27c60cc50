"""The fleet mirror: one cluster publishes verified blobs to an S3 bucket (or, as a ModelPack
artifact, to an OCI registry: agent/oci_mirror.py), the others read them from there. What the
mirror is made of is a store's (`S3Store` here, `OciStore` there); who reads what from where,
falling back to the origin per file, is `MirrorSource`'s, the same for both.

S3 keys (content-addressed, so any number of caches and commits share a bucket safely):

    <prefix>/blobs/sha256/<hex>           an LFS or S3 file, by its sha256
    <prefix>/blobs/sha1/<hex>             a Hub git file, by its git blob sha1
    <prefix>/manifests/<manifestDigest>.json   written LAST by the publisher: present = complete

Nothing in the mirror is trusted: every byte a reader takes is verified by the engine against the
manifest digest latched at resolve, exactly as bytes from the origin are. So the mirror needs no
integrity of its own; the manifest object only says "the publisher finished", so that readers do
not start on a half-published mirror.

- Publisher: fetches from the origin (the engine), then uploads each verified blob the mirror
  lacks (a single PUT carries ChecksumSHA256, so S3 itself rejects bytes that differ), then the
  manifest. Killed before the manifest, it leaves blobs no reader starts from.
- Reader: plans without the origin when it can (`reader_listing`, contract §C): a Hub reader
  given --manifest-digest and a commit takes the entries from the volume's own manifest of that
  commit and digest (a warm rerun asks nobody), else from the publisher's manifest, accepted only
  when its files hash to the digest with the listing's own function (manifest.manifest_digest). Then
  no Hub request is made at all. An S3 origin's reader has
  its pinned manifest already and asks for the publisher's only when some file needs bytes. With
  no valid manifest, `onMissing: fail` exits MirrorIncomplete (20) before any transfer and
  `origin` lists and fetches everything from the origin (publishing nothing: that is the
  publisher's job). With the manifest, each file comes from the mirror; a blob missing (404) or
  corrupt (digest mismatch) falls back to the origin for that file and, once verified, is
  re-published (best effort: a reader that may not write the mirror stays Ready); with
  `fail` it exits MirrorIncomplete naming the file.

The record gains `bytesFrom` (Mirror when a reader did not find the mirror incomplete and took at
least as many bytes from it as from the origin, so a warm rerun stays Mirror; else Origin),
`originBytes` and `mirrorBytes` (bytes received this run), and for an OCI mirror `artifact`
(host/repository@sha256:…, the artifact pushed or read).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from typing import Protocol

from fleetcache import reasons
from fleetcache.agent.errors import AgentError
from fleetcache.agent.fetch import body_reader
from fleetcache.agent.plan import Listing, written_entry
from fleetcache.agent.s3 import S3Client
from fleetcache.agent.sources import parallel
from fleetcache.manifest import SHA256, Entry, manifest_digest

log = logging.getLogger("fleetcache.agent")

PUBLISHER, READER = "publisher", "reader"
ORIGIN, FAIL = "origin", "fail"
MIRROR_LOCATOR = "fleetcache-mirror:"


def blob_key(prefix: str, entry: Entry) -> str:
    kind = "sha256" if entry.algo == SHA256 else "sha1"
    return "/".join(p for p in (prefix.strip("/"), "blobs", kind, entry.digest) if p)


def manifest_key(prefix: str, digest: str) -> str:
    return "/".join(p for p in (prefix.strip("/"), "manifests", f"{digest}.json") if p)


def manifest_body(repo: str, commit: str, digest: str, entries: tuple[Entry, ...]) -> bytes:
    files = [{"path": e.path, "size": e.size, "digest": e.digest, "algo": e.algo} for e in entries]
    return json.dumps({"repo": repo, "commit": commit, "manifestDigest": digest, "files": files},
                      sort_keys=True, separators=(",", ":")).encode()


def checked_manifest(body: bytes | None, digest: str) -> tuple[tuple[Entry, ...], str]:
    """The entries of a written manifest (the publisher's, or the volume's own), accepted only when
    they hash to `digest` with the listing's own function; otherwise no entries and why. The digest
    is the whole trust (the object is not a signature), and all a reader takes from it: the repo and
    commit come from its flags, since another commit or repo with the same selected files has the
    same digest, hence the same key, and its publisher may have written its own names there."""
    if body is None:
        return (), "no published manifest (the publisher has not finished)"
    try:
        # each file checked as the volume's own manifest is (paths pass the listing's own check: a
        # path with a newline could forge the digest's lines)
        entries = tuple(sorted((written_entry(f) for f in json.loads(body)["files"]), key=lambda e: e.path))
    except (ValueError, TypeError, KeyError, AgentError):
        return (), "a manifest that is not {repo, commit, manifestDigest, files}"
    if manifest_digest(entries) != digest:
        return (), f"a manifest whose files hash to {manifest_digest(entries)}, not {digest} (altered since)"
    return entries, ""


class S3Store:
    """The mirror in an S3 bucket: content-addressed blobs, and the manifest written last."""

    def __init__(self, client: S3Client, prefix: str, concurrency: int, report=None):
        self.client, self.prefix, self.concurrency, self.report = client, prefix, concurrency, report

    def describe(self, entry: Entry | None = None) -> str:
        return self.client.location.describe() + (blob_key(self.prefix, entry) if entry else "")

    def published(self, digest: str) -> tuple[tuple[Entry, ...], str]:
        key = manifest_key(self.prefix, digest)
        entries, why = checked_manifest(self.client.get_small(key), digest)
        return entries, f"{self.client.location.describe()}{key}: {why}" if why else ""

    def open_range(self, entry: Entry, start: int, end: int, size: int):
        return self.client.open_range(blob_key(self.prefix, entry), None, None, start, end, size)

    def publish(self, layout, entries: tuple[Entry, ...], digest: str, repo: str, commit: str) -> dict:
        self._upload(layout, entries, check_present=True)
        self.client.put_bytes(manifest_key(self.prefix, digest), manifest_body(repo, commit, digest, entries))
        log.info("published %s to the mirror", manifest_key(self.prefix, digest))
        return {}

    def republish(self, layout, entries: tuple[Entry, ...]) -> None:
        self._upload(layout, entries, check_present=False)

    def record(self) -> dict:
        return {}

    def _upload(self, layout, entries: tuple[Entry, ...], check_present: bool) -> None:
        """Upload verified blobs from the volume, once per content key; a publisher skips the ones
        the mirror already holds at the right size (a rerun after a crash, another cache's blob)."""
        unique = list({blob_key(self.prefix, e): e for e in entries}.items())
        if self.report:
            self.report(f"publishing {len(unique)} blobs ({sum(e.size for _, e in unique)} bytes) to the mirror "
                        f"{self.client.location.describe()}")

        def put(item: tuple[str, Entry]) -> None:
            key, entry = item
            if check_present and self.client.head_size(key) == entry.size:
                return
            sha256 = entry.digest if entry.algo == SHA256 else None
            self.client.put_file(key, layout.blob_path(entry), sha256)

        parallel(put, unique, self.concurrency)


class Store(Protocol):
    """What a mirror is made of (S3Store, oci_mirror.OciStore): MirrorSource's only way to it."""

    def describe(self, entry: Entry | None = None) -> str: ...

    def published(self, digest: str) -> tuple[tuple[Entry, ...], str]: ...

    def open_range(self, entry: Entry, start: int, end: int, size: int): ...

    def publish(self, layout, entries: tuple[Entry, ...], digest: str, repo: str, commit: str) -> dict: ...

    def republish(self, layout, entries: tuple[Entry, ...]) -> None: ...

    def record(self) -> dict: ...


@dataclass(frozen=True)
class MirrorConfig:
    store: Store
    role: str  # publisher | reader
    on_missing: str  # origin | fail


def published_entries(config: MirrorConfig, digest: str, otherwise: str) -> tuple[Entry, ...]:
    """The publisher's manifest of `digest`, checked: its entries, or none (logged with what happens
    `otherwise`); with `fail` a missing or invalid one is MirrorIncomplete (20)."""
    entries, why = config.store.published(digest)  # why names where it looked
    if entries:
        log.info("mirror %s is complete; reading from it", config.store.describe())
    elif config.on_missing == FAIL:
        raise AgentError(reasons.MirrorIncomplete, why)
    else:
        log.warning("%s; %s", why, otherwise)
    return entries


def reader_listing(config: MirrorConfig, layout, repo: str, commit: str,
                   digest: str) -> tuple[Listing | None, bool | None]:
    """A Hub reader's listing without the Hub (contract §C): the volume's own manifest of this commit
    and digest (a warm rerun asks nobody; the plan checks each file on disk as always), else the
    publisher's. Returns the listing (None: list the origin) and whether the mirror is complete (None:
    not asked yet; MirrorSource asks when some file needs bytes).
    A missing or invalid manifest is MirrorIncomplete (20) with `fail`, before any transfer."""
    kept = layout.manifest_path(commit, digest)
    entries, _ = checked_manifest(kept.read_bytes() if kept.is_file() else None, digest)
    if entries:
        return Listing(repo, commit, commit, entries), None
    entries = published_entries(config, digest, "listing and fetching from the origin")
    return (Listing(repo, commit, commit, entries), True) if entries else (None, False)


class _Counter:
    def __init__(self):
        self.value = 0
        self.lock = threading.Lock()

    def add(self, n: int) -> None:
        with self.lock:
            self.value += n


class _Counted:
    """A response whose received bytes are added to one counter (origin or mirror); it reads the
    way the engine reads any response (straight from the socket into its buffer)."""

    def __init__(self, resp, counter: _Counter):
        self.resp, self.counter = resp, counter
        self.final_url = resp.final_url
        self._readinto = body_reader(resp)

    def readinto(self, view: memoryview) -> int:
        n = self._readinto(view)
        self.counter.add(n)
        return n

    def release_conn(self) -> None:
        self.resp.release_conn()

    def close(self) -> None:
        self.resp.close()


class MirrorSource:
    """A Source that reads from the mirror (reader) or the origin (publisher, fallback), and publishes."""

    def __init__(self, origin, config: MirrorConfig, repo: str, commit: str, digest: str,
                 entries: tuple[Entry, ...], complete: bool | None = None):
        self.origin, self.config = origin, config
        self.repo, self.commit, self.digest = repo, commit, digest
        self.by_path = {e.path: e for e in entries}
        self.origin_bytes, self.mirror_bytes = _Counter(), _Counter()
        self.fallen: set[str] = set()  # paths a reader takes from the origin instead
        self.fallen_lock = threading.Lock()
        self._complete = complete  # known from reader_listing, else asked once when the first file needs bytes
        self._complete_lock = threading.Lock()

    def reads_mirror(self) -> bool:
        """A reader's first question, asked only when some file needs bytes (a warm volume never
        asks, so a mirror expired since cannot fail a cluster that needs nothing from it)."""
        if self.config.role != READER:
            return False
        with self._complete_lock:
            if self._complete is None:  # has a publisher finished this digest? If not, `fail` ends the run here
                self._complete = bool(published_entries(self.config, self.digest, "fetching from the origin"))
            return self._complete

    def _fall_back(self, entry: Entry, why: str) -> None:
        where = self.config.store.describe(entry)
        if self.config.on_missing == FAIL:
            raise AgentError(reasons.MirrorIncomplete, f"{entry.path}: {why} ({where})")
        with self.fallen_lock:
            if entry.path in self.fallen:
                return
            self.fallen.add(entry.path)
        log.warning("%s: %s (%s); fetching it from the origin and re-publishing it", entry.path, why, where)

    # -- Source ---------------------------------------------------------------------------------
    def url(self, entry: Entry) -> str:
        if self.reads_mirror() and entry.path not in self.fallen:
            return MIRROR_LOCATOR + entry.path
        return self.origin.url(entry)

    def open_range(self, url: str, start: int, end: int, size: int):
        if not url.startswith(MIRROR_LOCATOR):
            return _Counted(self.origin.open_range(url, start, end, size), self.origin_bytes)
        entry = self.by_path[url[len(MIRROR_LOCATOR):]]
        if entry.path not in self.fallen:
            try:
                resp = self.config.store.open_range(entry, start, end, size)
                resp.final_url = url
                return _Counted(resp, self.mirror_bytes)
            except AgentError as err:
                if err.reason not in (reasons.SourceNotFound, reasons.DigestMismatch):
                    raise
                self._fall_back(entry, "missing in the mirror" if err.reason == reasons.SourceNotFound
                                else "a different size in the mirror")
        return _Counted(self.origin.open_range(self.origin.url(entry), start, end, size), self.origin_bytes)

    def mismatch(self, entry: Entry) -> None:
        """Bytes from the mirror failed the digest: the mirror's blob is corrupt, so the origin
        serves that file (re-published after); origin bytes that fail are the engine's retries."""
        if self.reads_mirror() and entry.path not in self.fallen:
            self._fall_back(entry, "corrupt in the mirror (digest mismatch)")
        self.origin.mismatch(entry)

    def complete(self, layout, entries: tuple[Entry, ...], digest: str) -> dict:
        if self.config.role == PUBLISHER:
            self.config.store.publish(layout, entries, digest, self.repo, self.commit)
        elif self._complete and self.fallen:
            self._republish(layout, tuple(e for e in entries if e.path in self.fallen))
        origin, mirror = self.origin_bytes.value, self.mirror_bytes.value
        from_mirror = self.config.role == READER and self._complete is not False and mirror >= origin
        return {"bytesFrom": "Mirror" if from_mirror else "Origin", "originBytes": origin, "mirrorBytes": mirror,
                **self.config.store.record()}

    def _republish(self, layout, entries: tuple[Entry, ...]) -> None:
        """A reader's repair of the mirror is a courtesy: its own copy is verified and complete, so a
        mirror it may not write (read-only credentials) or cannot reach costs a warning, not its Ready."""
        try:
            self.config.store.republish(layout, entries)
        except AgentError as err:
            log.warning("could not re-publish %d files to the mirror (%s: %s); the next reader falls back "
                        "for them too", len(entries), err.reason, err.what)
