"""Planning, without network or disk: listing → validated entries → filtered set → what to fetch.

Everything here is a pure function of its inputs so that the refusal rules (DESIGN §5),
the glob semantics and the resume arithmetic are tested without a hub or a volume.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from fleetcache import reasons
from fleetcache.agent.errors import AgentError
from fleetcache.manifest import GIT_SHA1, SHA256, Entry, manifest_digest
from fleetcache.shapes import GIT_COMMIT, SHA256_HEX
from fleetcache.volume import STATE_DIR

MAX_FILE_SIZE = 1 << 44  # 16 TiB: larger than any real weight file, so a bigger size is a broken listing
MAX_FILES = 1_000_000
DIGEST_SHAPES = {SHA256: SHA256_HEX, GIT_SHA1: GIT_COMMIT}  # an entry's digest, by its algo


@dataclass(frozen=True)
class Listing:
    repo: str
    revision: str | None  # None for a pinned manifest (an S3 source, a volume): nothing was resolved by name
    commit: str
    entries: tuple[Entry, ...]


def _refuse(what: str) -> AgentError:
    return AgentError(reasons.InvalidSource, what)


def check_path(path: object) -> str:
    """A repo path is safe only as a plain relative path that stays inside the snapshot."""
    if not isinstance(path, str) or not path:
        raise _refuse(f"listing has an empty or non-string path {path!r}")
    if "\\" in path or "\0" in path:
        raise _refuse(f"listing path {path!r} contains a backslash or NUL")
    if any(ord(c) < 0x20 or c == "\x7f" for c in path):
        raise _refuse(f"listing path {path!r} contains a control character")
    if path.startswith("/"):
        raise _refuse(f"listing path {path!r} is absolute")
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise _refuse(f"listing path {path!r} has an empty, '.' or '..' segment")
    if parts[0] == STATE_DIR:
        raise _refuse(f"listing path {path!r} collides with the agent's state directory")
    return path


def _entry(sibling: object) -> Entry:
    if not isinstance(sibling, dict):
        raise _refuse("listing sibling is not an object")
    path = check_path(sibling.get("rfilename"))
    size = sibling.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0 or size > MAX_FILE_SIZE:
        raise _refuse(f"listing gives {path!r} a negative, absurd or missing size {size!r}")
    lfs = sibling.get("lfs")
    if lfs is not None:
        digest = lfs.get("sha256") if isinstance(lfs, dict) else None
        if not isinstance(digest, str) or not SHA256_HEX.fullmatch(digest):
            raise _refuse(f"listing gives {path!r} a malformed LFS sha256")
        if lfs.get("size", size) != size:
            raise _refuse(f"listing gives {path!r} two different sizes")
        return Entry(path, size, digest, SHA256)
    digest = sibling.get("blobId")
    if not isinstance(digest, str) or not GIT_COMMIT.fullmatch(digest):
        raise _refuse(f"listing gives {path!r} a malformed blobId")
    return Entry(path, size, digest, GIT_SHA1)


def directory_clash(paths, files: set[str]) -> str | None:
    """The first file of `files` that one of `paths` (in their order) has as a folder: a file
    cannot also be a directory of another file."""
    for path in paths:
        parts = path.split("/")
        for depth in range(1, len(parts)):
            if "/".join(parts[:depth]) in files:
                return "/".join(parts[:depth])
    return None


def written_entry(item: object) -> Entry:
    """One file of a manifest the agent wrote (`{path, size, digest, algo}`: the volume's, or the
    fleet mirror's), refused (not sanitized) when malformed: read back, it is input."""
    if not isinstance(item, dict):
        raise AgentError(reasons.InvalidSource, "the volume's manifest has a file that is not an object")
    path = check_path(item.get("path"))
    size, digest, algo = item.get("size"), item.get("digest"), item.get("algo")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise AgentError(reasons.InvalidSource, f"the volume's manifest gives {path!r} a bad size {size!r}")
    if algo not in DIGEST_SHAPES or not isinstance(digest, str) or not DIGEST_SHAPES[algo].fullmatch(digest):
        raise AgentError(reasons.InvalidSource, f"the volume's manifest gives {path!r} a malformed digest")
    return Entry(path, size, digest, algo)


def parse_listing(repo: str, revision: str, info: object) -> Listing:
    """Validate a `/api/models/{repo}/revision/{rev}?blobs=true` answer; refuse, never sanitize."""
    if not isinstance(info, dict):
        raise _refuse("listing is not a JSON object")
    commit = info.get("sha")
    if not isinstance(commit, str) or not GIT_COMMIT.fullmatch(commit):
        raise _refuse("listing has no valid commit sha")
    siblings = info.get("siblings")
    if not isinstance(siblings, list) or len(siblings) > MAX_FILES:
        raise _refuse("listing has no siblings list, or an absurdly long one")
    entries = [_entry(s) for s in siblings]
    seen: set[str] = set()
    for entry in entries:
        if entry.path in seen:
            raise _refuse(f"listing has the path {entry.path!r} twice")
        seen.add(entry.path)
    clash = directory_clash((entry.path for entry in entries), seen)
    if clash is not None:
        raise _refuse(f"listing has {clash!r} both as a file and a directory")
    return Listing(repo, revision, commit, tuple(sorted(entries, key=lambda e: e.path)))


def _pattern(glob: str) -> str:
    glob = glob.replace("\\", "/")
    return glob + "*" if glob.endswith("/") else glob


def select(entries: tuple[Entry, ...], allow: list[str] | None, ignore: list[str] | None) -> tuple[Entry, ...]:
    """huggingface_hub's filter_repo_objects semantics: fnmatchcase, '*' crosses '/', 'dir/' = the folder."""
    allowed = None if allow is None else [_pattern(p) for p in allow]
    ignored = None if ignore is None else [_pattern(p) for p in ignore]
    return tuple(
        e for e in entries
        if (allowed is None or any(fnmatchcase(e.path, p) for p in allowed))
        and (ignored is None or not any(fnmatchcase(e.path, p) for p in ignored))
    )


def new_hasher(entry: Entry):
    """The hash the entry's digest is of: sha256 for LFS files, git's blob sha1 for the rest."""
    if entry.algo == GIT_SHA1:
        return hashlib.sha1(b"blob %d\0" % entry.size)
    return hashlib.sha256()


def resolved_record(listing: Listing, entries: tuple[Entry, ...]) -> dict:
    return {
        "repo": listing.repo,
        "revision": listing.revision,
        "commit": listing.commit,
        "files": len(entries),
        "bytes": sum(e.size for e in entries),
        "manifestDigest": manifest_digest(entries),
    }


# -- fetch planning -------------------------------------------------------------------------

Span = tuple[int, int]  # [start, end)


def merge_spans(spans: list[Span]) -> list[Span]:
    merged: list[Span] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def missing_spans(size: int, done: list[Span]) -> list[Span]:
    missing, cursor = [], 0
    for start, end in merge_spans([(max(0, s), min(size, e)) for s, e in done]):
        if start > cursor:
            missing.append((cursor, start))
        cursor = max(cursor, end)
    if cursor < size:
        missing.append((cursor, size))
    return missing


def split_spans(spans: list[Span], part_size: int) -> list[Span]:
    return [(s, min(end, s + part_size)) for start, end in spans for s in range(start, end, part_size)]


@dataclass(frozen=True)
class DiskState:
    """What a layout found on disk, by storage key: verified blobs, partial spans, correct links."""

    verified: frozenset[str] = frozenset()
    partial: dict[str, list[Span]] = field(default_factory=dict)
    linked: frozenset[str] = frozenset()  # entry paths already published for this commit


@dataclass(frozen=True)
class FileTask:
    """One blob to download: the entries that share its bytes, and the ranges still missing."""

    key: str
    entries: tuple[Entry, ...]
    parts: tuple[Span, ...]  # still to download
    done: tuple[Span, ...]  # already written by an earlier run, to be hashed from disk

    @property
    def entry(self) -> Entry:
        return self.entries[0]


@dataclass(frozen=True)
class FetchPlan:
    tasks: tuple[FileTask, ...]
    to_link: tuple[Entry, ...]  # verified bytes present, only the final path is missing
    bytes_total: int
    bytes_present: int
    files_total: int
    files_present: int

    @property
    def bytes_missing(self) -> int:
        return sum(e - s for t in self.tasks for s, e in t.parts)


def plan_fetch(entries: tuple[Entry, ...], key_of, disk: DiskState, part_size: int) -> FetchPlan:
    """Split what is not yet verified into ranged parts, keeping bytes already written."""
    groups: dict[str, list[Entry]] = {}
    for entry in entries:
        groups.setdefault(key_of(entry), []).append(entry)
    tasks, to_link = [], []
    bytes_present = files_present = 0
    for key, group in groups.items():
        size = group[0].size
        if key in disk.verified:
            pending = [e for e in group if e.path not in disk.linked]
            to_link += pending
            files_present += len(group) - len(pending)
            bytes_present += size * len(group)
            continue
        done = merge_spans([(max(0, s), min(size, e)) for s, e in disk.partial.get(key, [])])
        bytes_present += sum(e - s for s, e in done) * len(group)
        parts = split_spans(missing_spans(size, done), part_size)
        tasks.append(FileTask(key, tuple(group), tuple(parts), tuple(done)))
    return FetchPlan(
        tasks=tuple(tasks),
        to_link=tuple(to_link),
        bytes_total=sum(e.size for e in entries),
        bytes_present=bytes_present,
        files_total=len(entries),
        files_present=files_present,
    )


# -- what a new commit shares with a served one ----------------------------------------------

def compared_record(commit: str, entries: tuple[Entry, ...], other: tuple[Entry, ...] | None) -> dict:
    """What `entries` (the resolved selection) shares with `other` (the same selection of a
    served commit): the bytes of files whose content key appears in both, so a volume that
    holds both commits needs `bytes` of the new one minus `sharedBytes`. `other` None is a
    commit the hub does not know (force-pushed away): reported, not a failure."""
    if other is None:
        return {"commit": commit, "bytes": 0, "files": 0, "sharedBytes": 0, "missing": True}
    keys = {e.digest for e in other}
    return {"commit": commit, "bytes": sum(e.size for e in other), "files": len(other),
            "sharedBytes": sum(e.size for e in entries if e.digest in keys)}


# -- prune planning ---------------------------------------------------------------------------

BlobKey = tuple[str, str]  # (layout name, the layout's storage key): a digest, or a flat file's path


@dataclass(frozen=True)
class VolumeState:
    """What a repo has on the volume, as the pruner reads it.

    `commits`: every commit with a snapshot directory or a manifest, and the blobs its
    manifests list or its snapshot links point to. `refs`: each ref file (by its path) and
    the commit it names. `blobs`: the blobs that could be removed, with their sizes."""

    commits: dict[str, frozenset[BlobKey]]
    refs: dict[str, str]
    blobs: dict[BlobKey, int]


@dataclass(frozen=True)
class PrunePlan:
    commits: tuple[str, ...]  # snapshots and manifests to remove
    refs: tuple[str, ...]  # ref files to unlink
    blobs: tuple[BlobKey, ...]  # blobs no kept commit references
    freed_bytes: int


def plan_prune(volume: VolumeState, keep: frozenset[str]) -> PrunePlan:
    """Everything not needed by a kept commit: its refs, snapshots, manifests and blobs.

    A blob is kept when any kept commit references it, by manifest or by snapshot link (a
    kept commit still hydrating has links before its manifest), so a kept commit's bytes
    are never touched."""
    needed = frozenset().union(*(keys for commit, keys in volume.commits.items() if commit in keep))
    blobs = tuple(sorted(key for key in volume.blobs if key not in needed))
    return PrunePlan(
        commits=tuple(sorted(c for c in volume.commits if c not in keep)),
        refs=tuple(sorted(path for path, commit in volume.refs.items() if commit not in keep)),
        blobs=blobs,
        freed_bytes=sum(volume.blobs[key] for key in blobs),
    )
