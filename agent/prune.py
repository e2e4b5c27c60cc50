"""`prune`: remove from a volume every commit of a repo that is not kept, safe to kill at any instant.

What to remove is decided by `plan.plan_prune` from what `read_volume` finds on disk; this
module only reads and removes, in an order where every prefix leaves a usable volume:

1. refs naming a removed commit (the HF cache's, the agent's, and `DEST/current`): nothing
   resolves a revision to it any more;
2. its snapshot directories (flat: `DEST/commits/<commit>`, and a staged one), each renamed
   into `DEST/.fleetcache/trash/` (one atomic rename): a reader sees the whole snapshot or
   none of it, never half of one;
3. the blobs (and the files at the volume root of manifest layout `flat`) no kept commit
   references, after the verification record forgets them; a kept commit's are never touched;
4. its manifests, renamed into the trash: fetch writes them last, prune removes them last,
   so a kill before this step leaves the commit visible to the rerun, which finishes it;
5. the trash emptied.

Each run (and each fetch) empties leftover trash first under the destination lock, and a
rerun plans afresh from the disk, so a prune killed anywhere is finished by the next one.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

from fleetcache import reasons
from fleetcache.agent.disk import fsync_dir, is_inside
from fleetcache.agent.errors import AgentError
from fleetcache.agent.flat_layouts import STAGING_DIR, FlatCommitsLayout
from fleetcache.agent.hf_cache_layout import HfCacheLayout
from fleetcache.agent.layout import Layout
from fleetcache.agent.layouts import open_layout
from fleetcache.agent.lock import DestinationLock
from fleetcache.agent.plan import BlobKey, VolumeState, check_path, plan_prune
from fleetcache.agent.progress import Progress
from fleetcache.manifest import Entry
from fleetcache.volume import COMMITS_DIR, CURRENT_LINK, STATE_DIR

log = logging.getLogger("fleetcache.agent")

TRASH_DIR = "trash"
KILL_AFTER_ENV = "FLEETCACHE_PRUNE_KILL_AFTER"


class Removals:
    """Counts removals (unlink, rename, rmdir). With FLEETCACHE_PRUNE_KILL_AFTER=N the process
    kill -9s itself right after the Nth, so the crash tests interrupt a prune at a chosen instant."""

    def __init__(self) -> None:
        value = os.environ.get(KILL_AFTER_ENV, "")
        self.kill_after = int(value) if value.isdigit() else None
        self.count = 0

    def done(self) -> None:
        self.count += 1
        if self.count == self.kill_after:
            os.kill(os.getpid(), signal.SIGKILL)


# -- the trash ----------------------------------------------------------------------------------

def check_inside(dest: Path, directory: Path) -> Path:
    """A directory prune deletes in must resolve inside --dest: a symlink must not aim it elsewhere."""
    if directory.exists() and not is_inside(dest, directory / "x"):
        raise AgentError(reasons.InvalidSource,
                         f"{directory.relative_to(dest)} resolves outside --dest (symlink escape)")
    return directory


def trash_dir(dest: Path) -> Path:
    return check_inside(dest, dest / STATE_DIR / TRASH_DIR)


def move_to_trash(dest: Path, path: Path, removals: Removals) -> None:
    """One rename takes a whole directory out of readers' sight (same filesystem: the volume)."""
    trash = trash_dir(dest)
    trash.mkdir(parents=True, exist_ok=True)
    os.rename(path, trash / f"{path.parent.parent.name}.{path.parent.name}.{path.name}.{os.getpid()}."
                             f"{time.time_ns()}")
    removals.done()


def _remove_tree(path: Path, removals: Removals) -> None:
    """Bottom-up, one unlink at a time (shutil.rmtree's steps cannot be counted)."""
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
        removals.done()
        return
    for dirpath, dirnames, filenames in os.walk(path, topdown=False):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            os.unlink(os.path.join(dirpath, name))
            removals.done()
        os.rmdir(dirpath)
        removals.done()


def empty_trash(dest: Path, removals: Removals | None = None) -> None:
    """Delete what a prune (this one, or one killed before) moved out of readers' sight."""
    trash = trash_dir(dest)
    if trash.is_dir():
        for entry in sorted(trash.iterdir()):
            _remove_tree(entry, removals or Removals())


# -- reading the volume -------------------------------------------------------------------------

def _files(root: Path) -> list[Path]:
    """Regular files and links below `root`, except the agent's temporary ones (fetch sweeps those)."""
    found = []
    for dirpath, _, names in os.walk(root):
        found += [Path(dirpath) / n for n in names if not n.startswith(".")]
    return found


def _linked_blobs(hf: HfCacheLayout, snapshot: Path) -> set[BlobKey]:
    """The blobs a snapshot's links point to: a commit still hydrating has links before its manifest."""
    blobs = os.path.normpath(hf.root / "blobs")
    keys = set()
    for dirpath, dirnames, names in os.walk(snapshot):
        for name in names + dirnames:
            link = os.path.join(dirpath, name)
            if os.path.islink(link):
                target = os.path.normpath(os.path.join(dirpath, os.readlink(link)))
                if os.path.dirname(target) == blobs:
                    keys.add((hf.name, os.path.basename(target)))
    return keys


def _flat_files(dest: Path, layout: Layout, listed: dict[str, set[str]]) -> dict[BlobKey, int]:
    """Flat files a manifest lists, but only while the verification record says the file holds
    bytes a manifest lists for its path: a file a fetch in progress replaced (new digest, no
    manifest yet) belongs to that fetch, and one the record does not vouch for is left alone."""
    marks = layout.read_verified()
    files = {}
    for path, digests in listed.items():
        file = dest / check_path(path)
        if marks.get(path, ("", ""))[1] in digests and file.is_file() and not file.is_symlink() \
                and is_inside(dest, file):
            files[("flat", path)] = file.lstat().st_size
    return files


def _tree_files(directory: Path) -> list[os.stat_result]:
    """`lstat` of every file below a commit directory (partial ones too); symlinks are counted,
    never followed."""
    found = []
    for dirpath, dirnames, names in os.walk(directory):
        for name in names + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            found.append(os.lstat(os.path.join(dirpath, name)))
    return found


def commit_directories(dest: Path, repo: str, commits: set[str]) -> dict[str, list[Path]]:
    """A flat volume's directories per commit (`DEST/commits/<commit>`, and the repo's staged
    ones): real directories only, a symlink is never taken for one. The published ones are
    the repo's only when it fetched flat here (a staged commit or a flat manifest, passed in
    `commits`): the flat layout holds one repo per volume, and a prune of another repo must
    not take them."""
    staged_root = check_inside(dest, Layout(dest, repo).state / STAGING_DIR)
    published_root = check_inside(dest, dest / COMMITS_DIR)
    found: dict[str, list[Path]] = {}
    staged = [d for d in sorted(staged_root.iterdir()) if d.is_dir() and not d.is_symlink()] \
        if staged_root.is_dir() else []
    for directory in staged:
        found.setdefault(directory.name, []).append(directory)
    if (commits or found) and published_root.is_dir():
        for directory in sorted(published_root.iterdir()):
            if directory.is_dir() and not directory.is_symlink() and not directory.name.startswith("."):
                found.setdefault(directory.name, []).append(directory)
    return found


def read_volume(dest: Path, repo: str) -> VolumeState:
    """Commits (snapshot directories and manifests) with the blobs each references, the refs
    (by their path under --dest) with the commit each names, and the blobs with their sizes."""
    hf = HfCacheLayout(dest, repo)
    for directory in (hf.root, *hf.scan_roots()):
        check_inside(dest, directory)
    commits: dict[str, set[BlobKey]] = {}
    snapshots = hf.root / "snapshots"
    for snapshot in sorted(snapshots.iterdir()) if snapshots.is_dir() else []:
        if snapshot.is_dir() and not snapshot.is_symlink():
            commits.setdefault(snapshot.name, set()).update(_linked_blobs(hf, snapshot))
    flat_listed: dict[str, set[str]] = {}
    flat_commits = set()
    for commit in hf.manifest_commits():
        keys = commits.setdefault(commit, set())
        for manifest in hf.read_manifests(commit):
            layout = open_layout(manifest["layout"], dest, repo, commit)
            for entry in (Entry(**f) for f in manifest["files"]):
                keys.add((layout.name, layout.key(entry)))
                if layout.name == "flat":
                    flat_listed.setdefault(entry.path, set()).add(entry.digest)
            if layout.name == FlatCommitsLayout.name:
                flat_commits.add(commit)
    refs = {str(path.relative_to(dest)): path.read_text().strip()
            for path in _files(hf.root / "refs") + _files(hf.state / "refs")}
    blobs: dict[BlobKey, int] = {(hf.name, path.name): path.lstat().st_size
                                 for path in _files(hf.root / "blobs") if path.parent == hf.root / "blobs"}
    blobs.update(_flat_files(dest, open_layout("flat", dest, repo), flat_listed))
    directories = commit_directories(dest, repo, flat_commits)
    for commit, found in directories.items():  # a directory goes whole; its files are blobs by inode,
        keys = commits.setdefault(commit, set())  # so one hard-linked into a kept commit frees nothing
        for directory in found:
            for st in _tree_files(directory):
                key = (FlatCommitsLayout.name, f"{st.st_dev}:{st.st_ino}")
                keys.add(key)
                blobs[key] = st.st_size
    current = dest / CURRENT_LINK
    if current.is_symlink():
        target = os.readlink(current)
        commit = target.removeprefix(f"{COMMITS_DIR}/")
        if target == f"{COMMITS_DIR}/{commit}" and commit in directories:
            refs[CURRENT_LINK] = commit
    return VolumeState({c: frozenset(keys) for c, keys in commits.items()}, refs, blobs)


# -- doing it -----------------------------------------------------------------------------------

def _unlink_all(paths: list[Path], removals: Removals) -> None:
    """Unlink each file (counted), then fsync the directories they were in."""
    for path in paths:
        path.unlink(missing_ok=True)
        removals.done()
    for directory in sorted({p.parent for p in paths}):
        if directory.is_dir():
            fsync_dir(directory)


def prune(dest: Path, repo: str, keep: frozenset[str], progress: Progress, wait: bool) -> dict:
    """Lock, empty leftover trash, plan from the disk, then refs, snapshots, blobs, manifests, trash."""
    progress.phase("Pruning", repo=repo)
    removals = Removals()
    hf = HfCacheLayout(dest, repo)
    with DestinationLock(dest / STATE_DIR) as lock:
        lock.acquire(wait)
        empty_trash(dest, removals)
        plan = plan_prune(read_volume(dest, repo), keep)
        log.info("pruning %s: %d commits, %d refs, %d blobs (%d bytes); keeping %s", repo, len(plan.commits),
                 len(plan.refs), len(plan.blobs), plan.freed_bytes, ", ".join(sorted(keep)))
        _unlink_all([dest / ref for ref in plan.refs], removals)
        for commit in plan.commits:
            for snapshot in (hf.root / "snapshots" / commit, dest / COMMITS_DIR / commit,
                             hf.state / STAGING_DIR / commit):
                if snapshot.is_dir() and not snapshot.is_symlink():
                    move_to_trash(dest, snapshot, removals)
        blobs = [dest / key if layout == "flat" else hf.root / "blobs" / key for layout, key in plan.blobs
                 if layout != FlatCommitsLayout.name]  # a commit directory's files went with it
        removed = tuple(f"{COMMITS_DIR}/{commit}/" for commit in plan.commits)
        hf.forget_keys([key for layout, key in plan.blobs if layout != FlatCommitsLayout.name]  # one record
                       + [key for key in hf.read_verified() if key.startswith(removed)])  # per repo
        _unlink_all(blobs, removals)
        for commit in plan.commits:
            manifests = hf.state / "manifests" / commit
            if manifests.is_dir():
                move_to_trash(dest, manifests, removals)
        empty_trash(dest, removals)
    log.info("pruned %s in %d removals (unlink, rename or rmdir)", repo, removals.count)
    progress.phase("Pruned", prunedCommits=list(plan.commits), freedBytes=plan.freed_bytes)
    return dict(progress.record)
