"""The flat layouts: plain files, no symlinks, keyed by path.

- `flat` (what `fetch --layout flat` writes, manifest layout `flat-commits`,
  `FlatCommitsLayout`): each commit's plain files in their own directory,
  `DEST/commits/<commit>/<path>`, for filesystems without symlinks (one repo per volume). A
  commit's files are staged in `DEST/.fleetcache/models--ORG--NAME/staging/<commit>/` and the
  directory is renamed into `commits/` in one step once every file is verified; a published
  commit directory is never changed (a file found corrupt is replaced by its verified bytes),
  so a replica pinned to one commit never sees another's files. A file whose sha256 another
  published commit holds is hard-linked from it instead of fetched (one copy on the volume, as
  blobs are shared). `DEST/current` is a relative symlink to the directory of the latest commit
  fetched to Ready, replaced atomically, for pods that mount the volume themselves (left out,
  with a warning, where the filesystem has no symlinks).
- files at `DEST/<path>` (manifest layout `flat`, `FlatLayout`): an existing volume someone
  else filled, read in place; what the first flat fetches wrote, still read and pruned.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path

from fleetcache import reasons
from fleetcache.agent.disk import TMP_MARK, fsync_dir, is_inside, tmp_name
from fleetcache.agent.errors import AgentError
from fleetcache.agent.layout import Layout, stat_mark
from fleetcache.agent.plan import DiskState, Listing
from fleetcache.manifest import Entry
from fleetcache.volume import COMMITS_DIR, CURRENT_LINK, flat_commit_path

log = logging.getLogger("fleetcache.agent")

STAGING_DIR = "staging"  # a flat commit being fetched, under the repo's state directory


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
            raise AgentError(reasons.InvalidConfiguration, "the flat layout keeps a directory per commit: "
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
            raise AgentError(reasons.InvalidSource, f"{COMMITS_DIR}/{self.commit} is a symlink (symlink escape)")

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
            if stat.S_ISREG(st.st_mode) and stat_mark(st) == mark and is_inside(self.dest / COMMITS_DIR, path):
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
