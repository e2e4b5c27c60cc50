"""Where bytes live on the volume, and how they become visible: only ever by an atomic rename.

Two layouts share one discipline: bytes stream into a hidden partial file next to their
final name (plus a journal of written spans, so a crash resumes without refetching),
are fsynced and renamed into place only after their digest matched, and the manifest
and refs are written last.

- `hf-cache`: `models--ORG--NAME/{blobs/<digest>, snapshots/<commit>/<path> -> ../../blobs/<digest>,
  refs/<revision>}`, the layout huggingface_hub, vLLM and SGLang read offline.
- `flat`: files at `DEST/<path>`, for filesystems without symlinks (one repo per volume).

The agent's own state (lock, lease, manifests, refs) lives in `DEST/.fleetcache/`.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

from .errors import AgentError
from .plan import STATE_DIR, DiskState, Entry, Listing, Span, merge_spans

PART_SUFFIX = ".fleetcache-part"
JOURNAL_SUFFIX = ".fleetcache-journal"
TMP_MARK = ".fleetcache-tmp-"
SWEEP_AGE_SECONDS = 600


def repo_folder(repo: str) -> str:
    return "models--" + repo.replace("/", "--")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def tmp_name(final: Path) -> Path:
    return final.with_name(f".{final.name}{TMP_MARK}{os.getpid()}")


def write_atomic(final: Path, data: bytes, durable: bool = True) -> None:
    """Temp name in the same directory, rename; with `durable`, fsync the file and the directory.

    Records rewritten every few seconds (lease, progress) skip the fsyncs: a reader must
    never see them torn, but losing the latest one to a power cut costs nothing.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_name(final)
    with open(tmp, "wb") as f:
        f.write(data)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, final)
    if durable:
        fsync_dir(final.parent)


def read_journal(path: Path) -> list[Span]:
    """Spans a previous run wrote; a torn last line (crash mid-append) is ignored."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    spans = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and all(f.isdigit() for f in fields):
            spans.append((int(fields[0]), int(fields[1])))
    return merge_spans(spans)


def _inside(root: Path, path: Path) -> bool:
    """True when `path`'s directory, symlinks resolved, is `root` or below it (the name itself may be a link)."""
    root_real = os.path.realpath(root)
    parent_real = os.path.realpath(path.parent)
    return parent_real == root_real or parent_real.startswith(root_real + os.sep)


class Layout:
    """Common mechanics; subclasses say where an entry's bytes and final path are."""

    name = ""

    def __init__(self, dest: Path, repo: str):
        self.dest = dest
        self.repo = repo
        self.state = dest / STATE_DIR / repo_folder(repo)

    # -- where things are --------------------------------------------------------------------
    def key(self, entry: Entry) -> str:
        raise NotImplementedError

    def blob_path(self, entry: Entry) -> Path:
        """Where the verified bytes of `entry` live once published."""
        raise NotImplementedError

    def part_path(self, entry: Entry) -> Path:
        blob = self.blob_path(entry)
        return blob.with_name(f".{blob.name}{PART_SUFFIX}")

    def journal_path(self, entry: Entry) -> Path:
        blob = self.blob_path(entry)
        return blob.with_name(f".{blob.name}{JOURNAL_SUFFIX}")

    def manifest_path(self, commit: str) -> Path:
        return self.state / "manifests" / f"{commit}.json"

    def ref_path(self, revision: str) -> Path:
        return self.state / "refs" / revision

    def scan_roots(self) -> list[Path]:
        """Directories that may hold this agent's temporary and partial files."""
        raise NotImplementedError

    # -- reading state ----------------------------------------------------------------------
    def is_linked(self, entry: Entry, commit: str) -> bool:
        raise NotImplementedError

    def scan(self, entries: tuple[Entry, ...], commit: str) -> DiskState:
        """Stat-only look at the volume: no hashing, so a warm rerun stays well under a second."""
        verified, partial = set(), {}
        for entry in entries:
            key = self.key(entry)
            if key in verified or key in partial:
                continue
            try:
                if self.blob_path(entry).stat().st_size == entry.size and self.is_verified(entry):
                    verified.add(key)
                    continue
            except FileNotFoundError:
                pass
            if self.part_path(entry).exists():
                partial[key] = read_journal(self.journal_path(entry))
        linked = frozenset(e.path for e in entries if self.key(e) in verified and self.is_linked(e, commit))
        return DiskState(frozenset(verified), partial, linked)

    def is_verified(self, entry: Entry) -> bool:
        """A digest-named blob of the right size is trusted: only verified bytes are renamed to it."""
        return True

    def read_manifest(self, commit: str) -> dict | None:
        try:
            return json.loads(self.manifest_path(commit).read_text())
        except FileNotFoundError:
            return None

    def resolve_ref(self, revision: str) -> str | None:
        try:
            return self.ref_path(revision).read_text().strip()
        except FileNotFoundError:
            return None

    # -- writing ----------------------------------------------------------------------------
    def ensure_dirs(self) -> None:
        for root in self.scan_roots():
            root.mkdir(parents=True, exist_ok=True)
            if not _inside(self.dest, root / "x"):
                raise AgentError("InvalidSource", f"{root} resolves outside --dest (symlink escape)")

    def publish_blob(self, entry: Entry, fd: int) -> None:
        """fsync the verified partial file and rename it to its final name."""
        os.fsync(fd)
        final = self.blob_path(entry)
        self._check_inside(final)
        os.replace(self.part_path(entry), final)
        fsync_dir(final.parent)
        self.journal_path(entry).unlink(missing_ok=True)

    def discard_partial(self, entry: Entry) -> None:
        self.part_path(entry).unlink(missing_ok=True)
        self.journal_path(entry).unlink(missing_ok=True)

    def link(self, entry: Entry, commit: str) -> None:
        raise NotImplementedError

    def finish(self, listing: Listing, entries: tuple[Entry, ...], digest: str) -> None:
        """Manifest, then refs: written last, so their presence means the snapshot is complete."""
        manifest = {
            "repo": listing.repo,
            "revision": listing.revision,
            "commit": listing.commit,
            "layout": self.name,
            "manifestDigest": digest,
            "files": [asdict(e) for e in entries],
        }
        data = json.dumps(manifest, indent=1, sort_keys=True).encode()
        path = self.manifest_path(listing.commit)
        if not path.exists() or path.read_bytes() != data:
            write_atomic(path, data)
        if listing.revision != listing.commit and self.resolve_ref(listing.revision) != listing.commit:
            write_atomic(self.ref_path(listing.revision), listing.commit.encode())

    def sweep(self, keep: set[Path], now: float | None = None) -> int:
        """Remove this agent's temporary and partial files older than 10 minutes, except `keep`."""
        now = time.time() if now is None else now
        removed = 0
        for root in self.scan_roots():
            for dirpath, _, names in os.walk(root):
                for name in names:
                    if not (TMP_MARK in name or name.endswith((PART_SUFFIX, JOURNAL_SUFFIX))):
                        continue
                    path = Path(dirpath) / name
                    try:
                        if path not in keep and now - path.lstat().st_mtime > SWEEP_AGE_SECONDS:
                            path.unlink()
                            removed += 1
                    except FileNotFoundError:
                        pass
        return removed

    def _check_inside(self, final: Path) -> None:
        root = self.snapshot_root_for(final)
        final.parent.mkdir(parents=True, exist_ok=True)
        if not _inside(root, final):
            raise AgentError("InvalidSource", f"{final.relative_to(self.dest)} resolves outside {root.name} "
                                              "(symlink escape)")

    def snapshot_root_for(self, final: Path) -> Path:
        raise NotImplementedError

    def published_paths(self, manifest: dict) -> list[tuple[Path, Entry]]:
        """The on-disk file for each manifest entry, for `verify`."""
        raise NotImplementedError


class HfCacheLayout(Layout):
    name = "hf-cache"

    def __init__(self, dest: Path, repo: str):
        super().__init__(dest, repo)
        self.root = dest / repo_folder(repo)

    def key(self, entry: Entry) -> str:
        return entry.digest

    def blob_path(self, entry: Entry) -> Path:
        return self.root / "blobs" / entry.digest

    def snapshot_path(self, entry: Entry, commit: str) -> Path:
        return self.root / "snapshots" / commit / entry.path

    def link_target(self, entry: Entry) -> str:
        return "../" * (entry.path.count("/") + 2) + "blobs/" + entry.digest

    def scan_roots(self) -> list[Path]:
        return [self.root / "blobs", self.root / "snapshots", self.root / "refs", self.state]

    def is_linked(self, entry: Entry, commit: str) -> bool:
        try:
            return os.readlink(self.snapshot_path(entry, commit)) == self.link_target(entry)
        except OSError:
            return False

    def link(self, entry: Entry, commit: str) -> None:
        """A relative symlink, created under a temp name and renamed: readers see no link or the right one."""
        final = self.snapshot_path(entry, commit)
        self._check_inside(final)
        tmp = tmp_name(final)
        tmp.unlink(missing_ok=True)
        os.symlink(self.link_target(entry), tmp)
        os.replace(tmp, final)

    def finish(self, listing: Listing, entries: tuple[Entry, ...], digest: str) -> None:
        for directory in {self.snapshot_path(e, listing.commit).parent for e in entries}:
            fsync_dir(directory)
        super().finish(listing, entries, digest)
        hf_ref = self.root / "refs" / listing.revision
        if listing.revision != listing.commit and not (hf_ref.exists() and hf_ref.read_text() == listing.commit):
            write_atomic(hf_ref, listing.commit.encode())  # huggingface_hub reads it without a newline

    def snapshot_root_for(self, final: Path) -> Path:
        return self.root / ("blobs" if final.parent.name == "blobs" and final.parent.parent == self.root
                            else "snapshots")

    def published_paths(self, manifest: dict) -> list[tuple[Path, Entry]]:
        entries = [Entry(**f) for f in manifest["files"]]
        return [(self.snapshot_path(e, manifest["commit"]), e) for e in entries]


class FlatLayout(Layout):
    """Files at their repo path; a published-record journal stands in for digest-named blobs."""

    name = "flat"

    def key(self, entry: Entry) -> str:
        return entry.path

    def blob_path(self, entry: Entry) -> Path:
        return self.dest / entry.path

    def published_record(self) -> Path:
        return self.state / "published"

    def scan_roots(self) -> list[Path]:
        return [self.dest]

    def _published(self) -> set[str]:
        try:
            return set(self.published_record().read_text().splitlines())
        except FileNotFoundError:
            return set()

    def scan(self, entries: tuple[Entry, ...], commit: str) -> DiskState:
        self._published_cache = self._published()
        return super().scan(entries, commit)

    def is_verified(self, entry: Entry) -> bool:
        """Same size is not enough in place of a digest-named blob: the file must be recorded as published."""
        return f"{entry.digest} {entry.path}" in self._published_cache

    def is_linked(self, entry: Entry, commit: str) -> bool:
        return True

    def link(self, entry: Entry, commit: str) -> None:
        """Record the verified publish, so a resumed run trusts this file without re-hashing it."""
        self.state.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.published_record(), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, f"{entry.digest} {entry.path}\n".encode())
        finally:
            os.close(fd)

    def snapshot_root_for(self, final: Path) -> Path:
        return self.dest

    def published_paths(self, manifest: dict) -> list[tuple[Path, Entry]]:
        return [(self.blob_path(Entry(**f)), Entry(**f)) for f in manifest["files"]]


LAYOUTS = {"hf-cache": HfCacheLayout, "flat": FlatLayout}


def open_layout(name: str, dest: Path, repo: str) -> Layout:
    return LAYOUTS[name](dest, repo)
