"""Where bytes live on the volume, and how they become visible: only ever by an atomic rename.

The layouts share one discipline: bytes stream into a hidden partial file next to their
final name (plus a journal of written spans, so a crash resumes without refetching),
are fsynced and renamed into place only after their digest matched, and the manifest
and refs are written last.

- `hf-cache`: `DEST/hub/models--ORG--NAME/{blobs/<digest>, snapshots/<commit>/<path> ->
  ../../blobs/<digest>, refs/<revision>}`, the layout huggingface_hub, vLLM and SGLang read
  offline with `HF_HUB_CACHE=DEST/hub`.
- `flat` (what `fetch --layout flat` writes, manifest layout `flat-commits`): each commit's
  plain files in their own directory, `DEST/commits/<commit>/<path>`, for filesystems without
  symlinks (one repo per volume). A commit's files are staged in
  `DEST/.fleetcache/models--ORG--NAME/staging/<commit>/` and the directory is renamed into
  `commits/` in one step once every file is verified; a published commit directory is never
  changed (a file found corrupt is replaced by its verified bytes), so a replica pinned to
  one commit never sees another's files. A file whose sha256 another published commit holds
  is hard-linked from it instead of fetched (one copy on the volume, as blobs are shared).
  `DEST/current` is a relative symlink to the directory of the latest commit fetched to
  Ready, replaced atomically, for pods that mount the volume themselves (left out, with a
  warning, where the filesystem has no symlinks).
- files at `DEST/<path>` (manifest layout `flat`): an existing volume someone else filled,
  read in place (`FlatLayout`; what the first flat fetches wrote, still read and pruned).

The agent's own state (lock, lease, manifests, refs, the verification record) lives in
`DEST/.fleetcache/`, beside the HF cache and never inside it, so readers that scan the
cache (`huggingface_hub.scan_cache_dir`) see only repositories.

A file at its final path is trusted without re-hashing only while the verification record
(inode, size, mtime, ctime at publish or at the last re-hash) still matches its `stat`: any
write through the filesystem changes mtime and ctime, so a changed file is re-hashed and,
if corrupt, fetched again.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from .errors import AgentError
from fleetcache.manifest import Entry
from fleetcache.volume import COMMITS_DIR, CURRENT_LINK, HUB_DIR, STATE_DIR, flat_commit_path, repo_folder

from .plan import DiskState, Listing, Span, merge_spans, new_hasher

log = logging.getLogger("fleetcache.agent")

PART_SUFFIX = ".fleetcache-part"
JOURNAL_SUFFIX = ".fleetcache-journal"
TMP_MARK = ".fleetcache-tmp-"
SWEEP_AGE_SECONDS = 600
STAGING_DIR = "staging"  # a flat commit being fetched, under the repo's state directory
READ_BLOCK = 8 << 20


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
    return sorted({name for name in (listing.revision, *refs) if name != listing.commit})


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
        checked = zip(suspect.values(), file_problems([(self.blob_path(e), e) for e, _ in suspect.values()]))
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
            if not _inside(self.dest, root / "x"):
                raise AgentError("InvalidSource", f"{root} resolves outside --dest (symlink escape)")

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

    def __init__(self, dest: Path, repo: str, commit: str = ""):
        super().__init__(dest, repo, commit)
        self.root = dest / HUB_DIR / repo_folder(repo)

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

    def finish(self, listing: Listing, entries: tuple[Entry, ...], digest: str, refs: tuple[str, ...] = ()) -> None:
        for directory in {self.snapshot_path(e, listing.commit).parent for e in entries}:
            fsync_dir(directory)
        super().finish(listing, entries, digest, refs)
        for name in ref_names(listing, refs):
            hf_ref = self.root / "refs" / name
            if not (hf_ref.exists() and hf_ref.read_text() == listing.commit):
                write_atomic(hf_ref, listing.commit.encode())  # huggingface_hub reads it without a newline

    def snapshot_root_for(self, final: Path) -> Path:
        return self.root / ("blobs" if final.parent.name == "blobs" and final.parent.parent == self.root
                            else "snapshots")

    def published_paths(self, manifest: dict) -> list[tuple[Path, Entry]]:
        entries = [Entry(**f) for f in manifest["files"]]
        return [(self.snapshot_path(e, manifest["commit"]), e) for e in entries]


class FlatLayout(Layout):
    """Files at their repo path under DEST, keyed by path: an existing volume read in place
    (node-warm of spec.source.volume), and what the first flat fetches wrote (still verified
    and pruned). A fetch never writes it: a new commit would replace files under readers."""

    name = "flat"

    def key(self, entry: Entry) -> str:
        return entry.path

    def blob_path(self, entry: Entry) -> Path:
        return self.dest / entry.path

    def scan_roots(self) -> list[Path]:
        return [self.dest]

    def is_linked(self, entry: Entry, commit: str) -> bool:
        return True

    def link(self, entry: Entry, commit: str) -> None:
        """The file is published where it was renamed to; nothing more to link."""

    def snapshot_root_for(self, final: Path) -> Path:
        return self.dest

    def published_paths(self, manifest: dict) -> list[tuple[Path, Entry]]:
        return [(self.blob_path(Entry(**f)), Entry(**f)) for f in manifest["files"]]


class FlatCommitsLayout(Layout):
    """One commit's plain files in their own directory, DEST/commits/<commit>/<path>: staged
    under the repo's state, renamed into place whole once every file is verified, never
    changed after, and DEST/current pointed at it last (a commit update never mixes files)."""

    name = "flat-commits"

    def __init__(self, dest: Path, repo: str, commit: str = ""):
        if not commit:
            raise AgentError("InvalidConfiguration", "the flat layout keeps a directory per commit: "
                                                     "open it for one commit")
        super().__init__(dest, repo, commit)
        self.published = Path(flat_commit_path(str(dest), commit))
        self.staging = self.state / STAGING_DIR / commit
        self.donors: dict[str, Path] = {}  # key -> another published commit's file with the same bytes

    def root(self) -> Path:
        """The commit's directory once published, else where it is staged."""
        return self.published if self.published.is_dir() else self.staging

    def key(self, entry: Entry) -> str:
        """The file's published path under DEST: one verification record for the repo, so
        the same path in two commits is two keys (and a staged file keeps its key when its
        directory is renamed: the rename changes neither its inode nor its times)."""
        return f"{COMMITS_DIR}/{self.commit}/{entry.path}"

    def blob_path(self, entry: Entry) -> Path:
        return self.root() / entry.path

    def scan_roots(self) -> list[Path]:
        return [self.dest / COMMITS_DIR, self.state]

    def ensure_dirs(self) -> None:
        super().ensure_dirs()
        if self.published.is_symlink():
            raise AgentError("InvalidSource", f"{COMMITS_DIR}/{self.commit} is a symlink (symlink escape)")

    def scan(self, entries: tuple[Entry, ...], commit: str, report=None) -> DiskState:
        """What is on disk, and the files another published commit holds with the same sha256
        (vouched for by the verification record as they are now): those are hard-linked, not
        fetched, so a commit update downloads and stores only the files that changed."""
        disk = super().scan(entries, commit, report)
        marks = self.read_verified()
        wanted = {e.digest for e in entries if self.key(e) not in disk.verified}
        held: dict[str, Path] = {}
        for key, (mark, digest) in marks.items():
            parts = key.split("/", 2)
            if digest not in wanted or digest in held or len(parts) < 3 or parts[0] != COMMITS_DIR \
                    or parts[1] == self.commit:
                continue
            path = self.dest / key
            try:
                st = path.lstat()
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and stat_mark(st) == mark and _inside(self.dest / COMMITS_DIR, path):
                held[digest] = path
        self.donors = {self.key(e): held[e.digest] for e in entries
                       if self.key(e) not in disk.verified and e.digest in held}
        return DiskState(disk.verified | frozenset(self.donors),
                         {k: v for k, v in disk.partial.items() if k not in self.donors}, disk.linked)

    def is_linked(self, entry: Entry, commit: str) -> bool:
        return self.key(entry) not in self.donors

    def link(self, entry: Entry, commit: str) -> None:
        """A file another commit holds: hard-linked under a temp name and renamed into place.
        The link changes the shared inode's ctime, so every record vouching for that inode
        is renewed with it (their bytes were vouched for just before, under the lock)."""
        donor = self.donors.pop(self.key(entry), None)
        if donor is None:  # published where its bytes were renamed to
            return
        final = self.blob_path(entry)
        self._check_inside(final)
        before = stat_mark(donor.lstat())
        tmp = tmp_name(final)
        tmp.unlink(missing_ok=True)
        os.link(donor, tmp, follow_symlinks=False)
        os.replace(tmp, final)
        self.discard_partial(entry)
        after = stat_mark(final.lstat())
        sharing = [key for key, (mark, _) in self.read_verified().items() if mark == before]
        self._append_verified([f"{after} {entry.digest} {key}" for key in sorted({*sharing, self.key(entry)})])

    def forget_verified(self, entries: list[Entry]) -> None:
        """Withdraw the record of a corrupt file under every name of its inode (another commit's
        hard link holds the same corrupt bytes)."""
        marks = self.read_verified()
        corrupt = {marks[self.key(e)][0] for e in entries if self.key(e) in marks}
        self.forget_keys(sorted({self.key(e) for e in entries}
                                | {key for key, (mark, _) in marks.items() if mark in corrupt}))

    def finish(self, listing: Listing, entries: tuple[Entry, ...], digest: str, refs: tuple[str, ...] = ()) -> None:
        """The staged directory renamed into commits/ (one rename: readers see all of it or
        none), then the manifest and refs, then `current`."""
        if not self.published.is_dir():
            self.staging.mkdir(parents=True, exist_ok=True)
            for directory in sorted({self.blob_path(e).parent for e in entries} | {self.staging}):
                fsync_dir(directory)
            os.rename(self.staging, self.published)
            fsync_dir(self.published.parent)
        super().finish(listing, entries, digest, refs)
        self.point_current()

    def point_current(self) -> None:
        """DEST/current -> commits/<commit>: a relative link under a temp name, renamed over the old one."""
        link, target = self.dest / CURRENT_LINK, f"{COMMITS_DIR}/{self.commit}"
        try:
            if os.readlink(link) == target:
                return
        except OSError:
            pass
        tmp = self.dest / f".{CURRENT_LINK}{TMP_MARK}"
        tmp.unlink(missing_ok=True)
        try:
            os.symlink(target, tmp)
        except OSError as err:
            if err.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
            log.warning("no %s link: the volume refuses symlinks (%s); the commit is at %s", CURRENT_LINK,
                        errno.errorcode.get(err.errno, err.errno), target)
            return
        os.replace(tmp, link)
        fsync_dir(self.dest)

    def snapshot_root_for(self, final: Path) -> Path:
        return self.root()

    def published_paths(self, manifest: dict) -> list[tuple[Path, Entry]]:
        directory = Path(flat_commit_path(str(self.dest), manifest["commit"]))
        return [(directory / f["path"], Entry(**f)) for f in manifest["files"]]


LAYOUTS = {cls.name: cls for cls in (HfCacheLayout, FlatLayout, FlatCommitsLayout)}  # by manifest "layout"
FETCH_LAYOUTS = {"hf-cache": HfCacheLayout, "flat": FlatCommitsLayout}  # what `fetch --layout` writes


def open_layout(name: str, dest: Path, repo: str, commit: str = "") -> Layout:
    """The layout a manifest names, for reading (verify, prune, node-warm)."""
    return LAYOUTS[name](dest, repo, commit)


def fetch_layout(name: str, dest: Path, repo: str, commit: str) -> Layout:
    """The layout `fetch --layout NAME` writes one commit in."""
    return FETCH_LAYOUTS[name](dest, repo, commit)
