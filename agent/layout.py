"""Where bytes live on the volume, and how they become visible: only ever by an atomic rename.

The layouts share one discipline, held here in `Layout`: bytes stream into a hidden partial
file next to their final name (plus a journal of written spans, so a crash resumes without
refetching), are fsynced and renamed into place only after their digest matched, and the
manifest and refs are written last. The concrete layouts say only where an entry's bytes and
final path are:

- `hf-cache` (hf_cache_layout.py): the Hugging Face cache layout, what huggingface_hub, vLLM
  and SGLang read offline;
- `flat` (what `fetch --layout flat` writes, manifest layout `flat-commits`) and files at
  `DEST/<path>` (manifest layout `flat`, an existing volume read in place): flat_layouts.py;
- layouts.py names each of them, for a manifest's "layout" and for `fetch --layout`.

The agent's own state (lock, lease, manifests, refs, the verification record) lives in
`DEST/.fleetcache/`, beside the HF cache and never inside it, so readers that scan the
cache (`huggingface_hub.scan_cache_dir`) see only repositories.

A file at its final path is trusted without re-hashing only while the verification record
(inode, size, mtime, ctime at publish or at the last re-hash) still matches its `stat`: any
write through the filesystem changes mtime and ctime, so a changed file is re-hashed and,
if corrupt, fetched again.
"""

from __future__ import annotations

import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from fleetcache import reasons
from fleetcache.agent.disk import TMP_MARK, fsync_dir, is_inside, write_atomic
from fleetcache.agent.errors import AgentError
from fleetcache.agent.plan import DiskState, Listing, Span, merge_spans, new_hasher
from fleetcache.manifest import Entry
from fleetcache.volume import STATE_DIR, repo_folder

log = logging.getLogger("fleetcache.agent")

PART_SUFFIX = ".fleetcache-part"
JOURNAL_SUFFIX = ".fleetcache-journal"
SWEEP_AGE_SECONDS = 600
READ_BLOCK = 8 << 20


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


def file_problem(path: Path, entry: Entry) -> str | None:
    """Re-hash a file on disk: None when it holds exactly the entry's bytes, else why not."""
    try:
        size = os.stat(path).st_size
        if size != entry.size:
            return f"{entry.path} (size {size}, want {entry.size})"
        hasher = new_hasher(entry)
        buffer = bytearray(READ_BLOCK)
        view = memoryview(buffer)
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buffer):
                hasher.update(view[:n])
    except OSError as err:
        return f"{entry.path} ({type(err).__name__})"
    return None if hasher.hexdigest() == entry.digest else f"{entry.path} (digest mismatch)"


def file_problems(items: list[tuple[Path, Entry]]) -> list[str | None]:
    """`file_problem` of each (path, entry), one thread per core (hashlib releases the GIL);
    an interrupt cancels the files not yet started instead of hashing the whole volume first."""
    pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1)
    try:
        return list(pool.map(lambda item: file_problem(*item), items))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def stat_mark(st: os.stat_result) -> str:
    """What the verification record keeps of a file: a write through the filesystem changes it."""
    return f"{st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}"


def ref_names(listing: Listing, refs: tuple[str, ...]) -> list[str]:
    """The names that should resolve to the fetched commit (a commit is never a ref of itself)."""
    return sorted({name for name in (listing.revision, *refs) if name is not None and name != listing.commit})


class Layout:
    """Common mechanics; subclasses say where an entry's bytes and final path are."""

    name = ""

    def __init__(self, dest: Path, repo: str, commit: str = ""):
        self.dest = dest
        self.repo = repo
        self.commit = commit  # what a layout with a directory per commit writes to
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

    def manifest_path(self, commit: str, digest: str) -> Path:
        """One manifest per commit and selection: fetching other patterns never rewrites another's."""
        return self.state / "manifests" / commit / f"{digest}.json"

    def verified_record(self) -> Path:
        return self.state / "verified"

    def ref_path(self, revision: str) -> Path:
        return self.state / "refs" / revision

    def scan_roots(self) -> list[Path]:
        """Directories that may hold this agent's temporary and partial files."""
        raise NotImplementedError

    # -- reading state ----------------------------------------------------------------------
    def is_linked(self, entry: Entry, commit: str) -> bool:
        raise NotImplementedError

    def scan(self, entries: tuple[Entry, ...], commit: str, report=None) -> DiskState:
        """What is on disk: `stat` for files the verification record vouches for, a re-hash (no
        network) for any other file of the right size; a corrupt one is planned to be fetched again.

        `report` is told when files are re-hashed, which on a large volume takes a while."""
        marks = self.read_verified()
        verified, partial, suspect = set(), {}, {}
        for entry in entries:
            key = self.key(entry)
            if key in verified or key in partial or key in suspect:
                continue
            blob = self.blob_path(entry)
            try:
                st = blob.stat()
                if st.st_size == entry.size:
                    mark = marks.get(key)
                    if mark == (stat_mark(st), entry.digest):
                        verified.add(key)
                        continue
                    if mark is None or mark[1] == entry.digest:  # unvouched, or changed since vouched
                        suspect[key] = (entry, st)
                        continue
            except FileNotFoundError:
                pass
            if self.part_path(entry).exists():
                partial[key] = read_journal(self.journal_path(entry))
        if suspect and report:
            report(f"re-hashing {len(suspect)} files ({sum(e.size for e, _ in suspect.values())} bytes) "
                   "already on the volume that the verification record does not vouch for")
        checked = zip(suspect.values(), file_problems([(self.blob_path(e), e) for e, _ in suspect.values()]),
                      strict=True)
        for (entry, before), problem in checked:
            if problem is None:  # vouch for the file as it was before hashing: a write since shows
                self.record_verified(entry, before)
                verified.add(self.key(entry))
            else:  # left in place for readers until the refetched bytes are renamed over it
                log.warning("on-disk corruption: %s; fetching it again", problem)
        linked = frozenset(e.path for e in entries if self.key(e) in verified and self.is_linked(e, commit))
        return DiskState(frozenset(verified), partial, linked)

    def read_verified(self) -> dict[str, tuple[str, str]]:
        """key -> (stat mark, digest) from the append-only record; a later line wins, `- key`
        forgets, a torn last line (crash mid-append) is ignored."""
        try:
            text = self.verified_record().read_text()
        except FileNotFoundError:
            return {}
        marks: dict[str, tuple[str, str]] = {}
        for line in text.splitlines():
            if line.startswith("- "):
                marks.pop(line[2:], None)
                continue
            fields = line.split(" ", 5)
            if len(fields) == 6 and all(f.isdigit() for f in fields[:4]):
                marks[fields[5]] = (" ".join(fields[:4]), fields[4])
        return marks

    def _append_verified(self, lines: list[str]) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.verified_record(), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, "".join(line + "\n" for line in lines).encode())
        finally:
            os.close(fd)

    def record_verified(self, entry: Entry, st: os.stat_result | None = None) -> None:
        """Vouch for the file whose bytes were just hashed, as `st` saw it (default: now)."""
        st = st or self.blob_path(entry).stat()
        self._append_verified([f"{stat_mark(st)} {entry.digest} {self.key(entry)}"])

    def forget_verified(self, entries: list[Entry]) -> None:
        """Withdraw the record for files found corrupt, so the next fetch re-hashes and repairs them."""
        self.forget_keys([self.key(e) for e in entries])

    def forget_keys(self, keys: list[str]) -> None:
        """Withdraw the record by storage key (a pruned blob's too: a file made later under its
        name must be hashed before it is trusted)."""
        if keys:
            self._append_verified([f"- {key}" for key in keys])

    def read_manifests(self, commit: str) -> list[dict]:
        """Every completed fetch of `commit`, one per selection, in digest order."""
        return [json.loads(path.read_text())
                for path in sorted((self.state / "manifests" / commit).glob("*.json"))]

    def manifest_commits(self) -> list[str]:
        root = self.state / "manifests"
        return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []

    def resolve_ref(self, revision: str) -> str | None:
        try:
            return self.ref_path(revision).read_text().strip()
        except FileNotFoundError:
            return None

    # -- writing ----------------------------------------------------------------------------
    def ensure_dirs(self) -> None:
        for root in self.scan_roots():
            root.mkdir(parents=True, exist_ok=True)
            if not is_inside(self.dest, root / "x"):
                raise AgentError(reasons.InvalidSource, f"{root} resolves outside --dest (symlink escape)")

    def publish_blob(self, entry: Entry, fd: int) -> None:
        """fsync the verified partial file and rename it to its final name."""
        os.fsync(fd)
        final = self.blob_path(entry)
        self._check_inside(final)
        os.replace(self.part_path(entry), final)
        fsync_dir(final.parent)
        self.record_verified(entry)
        self.journal_path(entry).unlink(missing_ok=True)

    def discard_partial(self, entry: Entry) -> None:
        self.part_path(entry).unlink(missing_ok=True)
        self.journal_path(entry).unlink(missing_ok=True)

    def link(self, entry: Entry, commit: str) -> None:
        raise NotImplementedError

    def finish(self, listing: Listing, entries: tuple[Entry, ...], digest: str, refs: tuple[str, ...] = ()) -> None:
        """Manifest, then refs: written last, so their presence means the snapshot is complete.

        The refs are the revision fetched (when it is a name) and `refs`, the names a reader
        may ask for (`--ref`); each is rewritten only when it names another commit."""
        manifest = {
            "repo": listing.repo,
            "revision": listing.revision,
            "commit": listing.commit,
            "layout": self.name,
            "manifestDigest": digest,
            "files": [asdict(e) for e in entries],
        }
        data = json.dumps(manifest, indent=1, sort_keys=True).encode()
        path = self.manifest_path(listing.commit, digest)
        if not path.exists() or path.read_bytes() != data:
            write_atomic(path, data)
        for name in ref_names(listing, refs):
            if self.resolve_ref(name) != listing.commit:
                write_atomic(self.ref_path(name), listing.commit.encode())

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
        if not is_inside(root, final):
            raise AgentError(reasons.InvalidSource, f"{final.relative_to(self.dest)} resolves outside {root.name} "
                                              "(symlink escape)")

    def snapshot_root_for(self, final: Path) -> Path:
        raise NotImplementedError

    def published_paths(self, manifest: dict) -> list[tuple[Path, Entry]]:
        """The on-disk file for each manifest entry, for `verify`."""
        raise NotImplementedError
