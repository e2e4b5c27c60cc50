"""`node-warm`: put one verified commit on this node's own disk, copied from the cluster volume.

Planning is `node_plan` (pure); this module does the I/O, in the order that keeps a node from
ever serving an unverified byte (design/node-tier.md §3.2):

1. checks: node-check.json (written by node-prepare) must not say the path shares the node's
   root filesystem (22); the volume's manifest for the commit must recompute to
   --manifest-digest (12); free bytes must cover what is still to copy (13);
2. a warm slot (slots.py), so at most maxConcurrentNodes nodes read the volume at once;
3. each blob read from the volume and hashed while it is written to a part file in the node's
   blobs/ (a journal of written spans lets a killed copy resume its prefix), fsynced and renamed
   only on a digest match; then the snapshot links, the manifest (layout.py, as fetch does) and
   `.fleetcache/node-ready.json` last.

A copy already published is stat-checked against the verification record, not re-hashed, and
takes no slot. Without --once the warmer idles after Ready and re-checks every 60 s: a copy
deleted underneath loses its marker and is warmed again. Failures are retried (--retries, each
attempt bounded by --attempt-timeout); then the record says Failed and the process idles NotReady
instead of exiting, since a CrashLoopBackOff would flap the node's readiness. Capacity and the
dedicated-filesystem check are re-checked while Failed (collection may free space).

The node's record `{phase, commit, bytesDone, bytesTotal, freeBytes, reason, message}` goes to
one key (the node's name) of the status ConfigMap, or of a JSON file: at each phase change and
every 30 s while copying, so write load follows the slot count, not the node count.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from fleetcache import reasons
from fleetcache.agent.disk import is_inside, write_atomic
from fleetcache.agent.errors import AgentError, from_os_error
from fleetcache.agent.flat_layouts import FlatLayout
from fleetcache.agent.hf_cache_layout import HfCacheLayout
from fleetcache.agent.layout import Layout
from fleetcache.agent.layouts import LAYOUTS, open_layout
from fleetcache.agent.lock import DestinationLock
from fleetcache.agent.node_plan import (
    VolumeNotReady,
    capacity_problem,
    clip,
    marker_matches,
    plan_node_copy,
    ready_marker,
    stale_records,
    volume_entries,
)
from fleetcache.agent.plan import FetchPlan, FileTask, Listing, check_path, new_hasher
from fleetcache.agent.progress import PRUNE_FIELDS, Progress, emit_to
from fleetcache.agent.prune import prune
from fleetcache.agent.slots import take
from fleetcache.agent.sources import manifest_entries, read_manifest_file
from fleetcache.manifest import Entry, manifest_digest
from fleetcache.volume import HUB_DIR, STATE_DIR

log = logging.getLogger("fleetcache.agent")

NODE_FIELDS = ("phase", "commit", "bytesDone", "bytesTotal", "freeBytes", "reason", "message")
READY_FILE = "node-ready.json"
CHECK_FILE = "node-check.json"
COPY_BLOCK = 8 << 20
STATUS_INTERVAL_ENV = "FLEETCACHE_NODE_STATUS_INTERVAL"  # seconds between records while copying (30)
RECHECK_ENV = "FLEETCACHE_NODE_RECHECK_SECONDS"  # seconds between re-checks while idle (60)
SLOT_POLL_ENV = "FLEETCACHE_NODE_SLOT_POLL_SECONDS"  # seconds between tries for a slot (2)
PRUNE_ENV = "FLEETCACHE_NODE_PRUNE_SECONDS"  # seconds between record prunings (300)
KILL_AFTER_ENV = "FLEETCACHE_NODE_WARM_KILL_AFTER"  # test hook: SIGKILL itself after N blocks written
RECHECKED = (reasons.InsufficientCapacity, reasons.NodeCacheNotDedicated)  # node conditions that change by themselves


def env_seconds(env: str, default: float) -> float:
    """A number of seconds from the environment; the default when unset or not a number."""
    try:
        return float(os.environ.get(env, default))
    except ValueError:
        return default


def state_file(dest: Path, name: str) -> Path:
    return dest / STATE_DIR / name


def read_json(path: Path) -> object:
    """A JSON file's content, None when it is missing or unparseable (a torn or forged marker)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def copy_ready(dest: Path, commit: str, digest: str | None) -> bool:
    """What the readiness probe asks: node-ready.json names the commit (and digest) and its snapshot exists."""
    if not marker_matches(read_json(state_file(dest, READY_FILE)), commit, digest):
        return False
    return has_snapshot(dest, commit)


def has_snapshot(dest: Path, commit: str) -> bool:
    """A snapshot directory of `commit` exists under the node copy's hub/ (of whichever repo)."""
    return any(p.is_dir() for p in (dest / HUB_DIR).glob(f"*/snapshots/{commit}"))


# -- the node's record ---------------------------------------------------------------------------

class KeyedSink:
    """Puts the record under one key: the node's key of the status ConfigMap (one merge-patched key
    per node, never the others')."""

    def __init__(self, sink, key: str):
        self.sink, self.key = sink, key

    def emit(self, record: dict) -> None:
        self.sink.emit({self.key: record})

    def close(self) -> None:
        self.sink.close()


class StatusFileSink:
    """The status ConfigMap's stand-in: a JSON file of {"<node>": record} shared by every warmer of a
    cache, so each merges its own key under an flock, as a merge patch would, never the others'."""

    def __init__(self, path: Path, key: str):
        self.path, self.key = path, key

    def emit(self, record: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            current = read_json(self.path)
            merged = {**(current if isinstance(current, dict) else {}), self.key: record}
            write_atomic(self.path, (json.dumps(merged, sort_keys=True) + "\n").encode(), durable=False)

    def close(self) -> None:
        pass


class NodeRecorder:
    """The node's record, emitted at each phase change (only when it changed) and every
    `interval` seconds while bytes move; safe to call from copy threads."""

    def __init__(self, sinks: list, commit: str, interval: float, clock=time.monotonic):
        self.sinks, self.interval, self.clock = sinks, interval, clock
        self.record: dict = {f: None for f in NODE_FIELDS}
        self.record["commit"] = commit
        self._lock = threading.Lock()
        self._emitted: dict | None = None
        self._last = float("-inf")

    def _emit_locked(self) -> None:
        snapshot = dict(self.record)
        if snapshot == self._emitted:
            return
        self._emitted, self._last = snapshot, self.clock()
        emit_to(self.sinks, snapshot, "the node record")

    def phase(self, phase: str, reason: str | None = None, message: str | None = None, **fields) -> None:
        with self._lock:
            self.record.update(fields, phase=phase, reason=reason, message=clip(message))
            self._emit_locked()

    def advance(self, done: int) -> None:
        with self._lock:
            self.record["bytesDone"] = (self.record["bytesDone"] or 0) + done
            if self.clock() - self._last >= self.interval:
                self._emit_locked()

    def fail(self, reason: str, message: str) -> dict:
        """The CLI's final record. A warmer stopped while Ready still leaves a Ready copy behind."""
        if not (reason == reasons.Interrupted and self.record["phase"] == "Ready"):
            self.phase("Failed", reason, message)
        return dict(self.record)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


class RecordPruner:
    """One warmer at a time (the pruner Lease) deletes the records of nodes that no longer run a
    warmer pod: the DaemonSet controller deletes the pod of a node that leaves the pool and PodGC
    the pods of deleted nodes, but their records would stay and count (KServe #6159, OME #314).
    The ConfigMap is read before the pods are listed, so a record written by a pod that started
    in between is never taken for a departed node's."""

    def __init__(self, core_api, lease, namespace: str, configmap: str, selector: str):
        self.core, self.lease = core_api, lease
        self.namespace, self.configmap, self.selector = namespace, configmap, selector

    def prune_once(self) -> list[str]:
        if not self.lease.try_take():
            return []
        data = self.core.read_namespaced_config_map(self.configmap, self.namespace).data or {}
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=self.selector).items
        stale = stale_records(data, {pod.spec.node_name for pod in pods if pod.spec and pod.spec.node_name})
        if stale:
            self.core.patch_namespaced_config_map(self.configmap, self.namespace,
                                                  {"data": {key: None for key in stale}})
            log.info("pruned the records of %d nodes without a warmer: %s", len(stale), ", ".join(stale[:5]))
        return stale

    def start(self, period: float) -> None:
        """Prune every `period` seconds on a daemon thread; a failure is logged and retried next time."""
        def loop() -> None:
            while True:
                time.sleep(period)
                try:
                    self.prune_once()
                except Exception as err:  # noqa: BLE001 - pruning must never stop the warmer
                    log.warning("could not prune node records (%s %s)", type(err).__name__,
                                getattr(err, "status", "") or "")

        threading.Thread(target=loop, name="record-pruner", daemon=True).start()


# -- one attempt ---------------------------------------------------------------------------------

class SlotLost(Exception):
    """The warm slot was taken over or deleted: stop at the next block and wait for one again."""


@dataclass
class Warm:
    source: Path  # the cluster volume's root (fetch's --dest): hub/ and .fleetcache/
    dest: Path  # this node's <root>/<ns>/<cache>, same layout
    repo: str
    commit: str
    digest: str
    recorder: NodeRecorder
    slots: object | None = None  # LeaseSlots | DirSlots
    ready_file: Path | None = None
    attempt_timeout: float | None = None
    keep: frozenset[str] | None = None  # with --keep: the other commits to keep; the rest is pruned once Ready
    manifest_file: Path | None = None  # an existing volume's pinned manifest (contract §D): files flat at --source

    def set_ready(self, ready: bool) -> None:
        if self.ready_file is None:
            return
        if ready:
            self.ready_file.touch()
        else:
            self.ready_file.unlink(missing_ok=True)

    # -- reading the volume ---------------------------------------------------------------------
    def volume(self) -> tuple[Layout, tuple[Entry, ...]]:
        if self.manifest_file is not None:  # a volume fleetcache did not write: its files at their paths
            entries = tuple(sorted(manifest_entries(read_manifest_file(str(self.manifest_file))),
                                   key=lambda e: e.path))
            if manifest_digest(entries) != self.digest:
                raise AgentError(reasons.DigestMismatch,
                                 f"--manifest-file recomputes to {manifest_digest(entries)[:12]}…, "
                                                   f"not --manifest-digest {self.digest[:12]}…")
            return FlatLayout(self.source, self.repo), entries
        state = Layout(self.source, self.repo)  # manifests are layout-independent
        name, entries = volume_entries(state.read_manifests(self.commit) if self.source.is_dir() else [],
                                       self.repo, self.commit, self.digest)
        if name not in LAYOUTS:
            raise AgentError(reasons.InvalidSource, f"the volume's manifest names an unknown layout {name!r}")
        return open_layout(name, self.source, self.repo), entries

    def volume_refs(self) -> tuple[str, ...]:
        """The volume's revision names for the commit, so engines given repo and revision find it offline."""
        root = Layout(self.source, self.repo).state / "refs"
        names = []
        for path in root.rglob("*") if root.is_dir() else []:
            name = path.relative_to(root).as_posix()
            try:
                if path.is_file() and path.read_text().strip() == self.commit and check_path(name) \
                        and not name.startswith("."):
                    names.append(name)
            except (OSError, AgentError):
                continue
        return tuple(sorted(names))

    def check_dedicated(self) -> None:
        check = read_json(state_file(self.dest, CHECK_FILE))
        if check is None:
            log.warning("no %s under --dest (node-prepare has not run here): not checking the filesystem",
                        CHECK_FILE)
        elif isinstance(check, dict) and check.get("dedicated") is False:
            raise AgentError(reasons.NodeCacheNotDedicated, f"{self.dest} shares the node's root filesystem "
                                                      f"({check.get('sizeBytes')} bytes)")

    # -- the attempt ------------------------------------------------------------------------------
    def attempt(self) -> None:
        """Check, plan, take a slot, copy, publish; Ready on return."""
        self.check_dedicated()
        source, entries = self.volume()
        node = HfCacheLayout(self.dest, self.repo)
        self.dest.mkdir(parents=True, exist_ok=True)
        with DestinationLock(self.dest / STATE_DIR) as lock:
            lock.acquire(wait=True)  # a killed predecessor's lease expires in 30 s: wait, never fail on it
            node.ensure_dirs()
            node.sweep({p for e in entries for p in (node.part_path(e), node.journal_path(e))})
            plan = plan_node_copy(entries, node.scan(entries, self.commit))
            marker = state_file(self.dest, READY_FILE)
            published = not plan.tasks and not plan.to_link and node.manifest_path(self.commit, self.digest).exists()
            if published and marker_matches(read_json(marker), self.commit, self.digest):
                if self.recorder.record["phase"] != "Ready":  # an idle re-check writes nothing new:
                    self.recorder.phase("Ready", bytesDone=plan.bytes_total, bytesTotal=plan.bytes_total,
                                        freeBytes=free_bytes(self.dest))  # free space drifts on every node
                self.set_ready(True)
                return
            if marker_matches(read_json(marker), self.commit, None):  # it no longer vouches for the copy
                marker.unlink()
            self.set_ready(False)
            free = free_bytes(self.dest)
            problem = capacity_problem(free, plan.bytes_missing)
            if problem:
                self.recorder.record["freeBytes"] = free
                raise AgentError(reasons.InsufficientCapacity, problem)
            self.recorder.phase("Waiting", bytesDone=plan.bytes_present, bytesTotal=plan.bytes_total,
                                freeBytes=free, message="waiting for a warm slot" if self.slots else None)
            holding = take(self.slots, self._waiting, env_seconds(SLOT_POLL_ENV, 2.0)) \
                if self.slots and plan.tasks else None  # only reading the volume needs a slot
            try:
                self.recorder.phase("Copying", freeBytes=free_bytes(self.dest))
                self._copy(source, node, plan, holding.lost if holding else threading.Event())
                listing = Listing(self.repo, self.commit, self.commit, entries)
                node.finish(listing, entries, self.digest, self.volume_refs())
                write_atomic(marker, json.dumps(ready_marker(self.repo, self.commit, self.digest)).encode())
            finally:
                if holding:
                    holding.release()
        self.recorder.phase("Ready", bytesDone=plan.bytes_total, freeBytes=free_bytes(self.dest))
        self.set_ready(True)

    def _waiting(self, holders: list[str]) -> None:
        self.recorder.phase("Waiting", message=f"waiting for a warm slot; held by {', '.join(holders) or 'none'}")

    def _copy(self, source: Layout, node: HfCacheLayout, plan: FetchPlan, lost: threading.Event) -> None:
        deadline = time.monotonic() + self.attempt_timeout if self.attempt_timeout else None
        stop = threading.Event()
        copier = _Copier(source, node, self.recorder, lost, stop, deadline)
        for entry in plan.to_link:
            node.link(entry, self.commit)
        pool = ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="node-copy")
        try:
            futures = [pool.submit(copier.copy, task, self.commit) for task in plan.tasks]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for future in done:
                failure = future.exception()
                if failure is not None:
                    raise failure
        finally:
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)


class _Copier:
    """Copies one blob at a time: read from the volume, hash, write the node's part file, publish."""

    def __init__(self, source: Layout, node: HfCacheLayout, recorder: NodeRecorder, lost: threading.Event,
                 stop: threading.Event, deadline: float | None):
        self.source, self.node, self.recorder = source, node, recorder
        self.lost, self.stop, self.deadline = lost, stop, deadline
        kill = os.environ.get(KILL_AFTER_ENV, "")
        self.kill_after = int(kill) if kill.isdigit() else None
        self.blocks = 0
        self.count_lock = threading.Lock()

    def _open_source(self, entry: Entry) -> int:
        path = self.source.blob_path(entry)
        if not is_inside(self.source.dest, path):
            raise AgentError(reasons.InvalidSource, f"the volume's {entry.path} resolves outside --source (symlink)")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise AgentError(reasons.DigestMismatch, f"the cluster volume lacks {entry.path}, which its manifest "
                                               "lists") from None
        except OSError as err:
            if err.errno == 40:  # ELOOP: the blob itself is a symlink
                raise AgentError(reasons.InvalidSource, f"the volume's {entry.path} is a symlink") from None
            raise
        size = os.fstat(fd).st_size
        if size != entry.size:
            os.close(fd)
            raise AgentError(reasons.DigestMismatch, f"the cluster volume's {entry.path} has {size} bytes, its "
                                               f"manifest says {entry.size}")
        return fd

    def _tick(self) -> None:
        if self.stop.is_set():
            raise InterruptedError("copy stopped")
        if self.lost.is_set():
            raise SlotLost()
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise AgentError(reasons.SourceUnreachable, "the copy did not finish within --attempt-timeout")
        if self.kill_after is not None:
            with self.count_lock:
                self.blocks += 1
                if self.blocks > self.kill_after:
                    os.kill(os.getpid(), signal.SIGKILL)

    def copy(self, task: FileTask, commit: str) -> None:
        entry = task.entry
        resume = task.done[0][1] if len(task.done) == 1 and task.done[0][0] == 0 else 0
        if not self._copy_once(entry, resume) and (not resume or not self._copy_once(entry, 0)):
            raise AgentError(reasons.DigestMismatch, f"the cluster volume's {entry.path} does not match its "
                                               f"{entry.algo} digest; nothing was published on the node")
        for linked in task.entries:
            self.node.link(linked, commit)

    def _copy_once(self, entry: Entry, start: int) -> bool:
        """True when the bytes hashed to the digest and were published; False (part discarded) else."""
        part, journal = self.node.part_path(entry), self.node.journal_path(entry)
        part.parent.mkdir(parents=True, exist_ok=True)
        fresh = 0 if start else os.O_TRUNC
        src = self._open_source(entry)
        fd = os.open(part, os.O_RDWR | os.O_CREAT | fresh, 0o644)
        jfd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND | fresh, 0o644)
        try:
            hasher = new_hasher(entry)
            position = 0
            while position < start:  # the prefix a killed copy wrote: hashed from the node disk
                data = os.pread(fd, min(COPY_BLOCK, start - position), position)
                if not data:
                    break
                hasher.update(data)
                position += len(data)
            buffer = bytearray(COPY_BLOCK)
            view = memoryview(buffer)
            while position < entry.size:
                self._tick()
                n = os.preadv(src, [view[: min(COPY_BLOCK, entry.size - position)]], position)
                if n == 0:
                    break
                os.pwrite(fd, view[:n], position)
                os.write(jfd, b"%d %d\n" % (position, position + n))
                hasher.update(view[:n])
                position += n
                self.recorder.advance(n)
            if position == entry.size and hasher.hexdigest() == entry.digest:
                self.node.publish_blob(entry, fd)
                return True
            log.warning("%s: copied bytes do not match the manifest's digest%s", entry.path,
                        " (resumed prefix; copying again from the start)" if start else "")
            self.recorder.advance(-position)
            self.node.discard_partial(entry)
            return False
        finally:
            os.close(src)
            os.close(fd)
            os.close(jfd)


# -- the loop ------------------------------------------------------------------------------------

def prune_others(warm: Warm) -> None:
    """Once Ready, remove the repo's commits on the node other than this one and --keep (prune.py:
    refs, snapshots, unshared blobs, manifests, in its kill-safe order). Without --keep nothing is
    removed: only the composer knows which commits replicas on this node still read."""
    keep = frozenset({warm.commit, *(warm.keep or ())})
    try:
        record = prune(warm.dest, warm.repo, keep, Progress([], PRUNE_FIELDS), wait=True)
    except (AgentError, OSError) as err:  # the copy is Ready; a failed cleanup is retried by the next pod
        log.warning("could not prune older commits on the node (%s)", err)
        return
    if record["prunedCommits"]:
        log.info("pruned %s from the node (%s bytes freed)", ", ".join(record["prunedCommits"]),
                 record["freedBytes"])


def _attempt(warm: Warm) -> None:
    """One attempt, with disk errors named by the exit-code table (a full node disk is 13)."""
    try:
        warm.attempt()
    except OSError as err:
        raise from_os_error(err, f"the node copy under {warm.dest}") or AgentError(
            reasons.SourceUnreachable,
            f"copying from the cluster volume: {type(err).__name__} {err.strerror}") from None


def run(warm: Warm, once: bool, retries: int, sleep=time.sleep) -> dict:
    """Attempt until Ready. With `once`, return the Ready record or raise the failure (its exit code);
    without, never return: idle Ready (re-checking) or Failed (NotReady), never exit non-zero."""
    recheck = env_seconds(RECHECK_ENV, 60.0)
    base = env_seconds("FLEETCACHE_RETRY_BASE_DELAY", 0.5)
    failures = 0
    failed: AgentError | None = None
    pruned = False
    while True:
        try:
            if failed is None or failed.reason in RECHECKED:
                _attempt(warm)
                failures, failed = 0, None
                if warm.keep is not None and not pruned:
                    prune_others(warm)
                    pruned = True
                if once:
                    return dict(warm.recorder.record)
        except VolumeNotReady as err:
            if once:
                raise AgentError(reasons.SourceNotFound, str(err)) from None
            warm.recorder.phase("Waiting", message=str(err))
        except SlotLost:
            log.warning("lost the warm slot; waiting for one again")
            continue
        except AgentError as err:
            warm.set_ready(False)
            if not err.row.permanent and failures < retries:
                failures += 1
                note = f"retrying (attempt {failures + 1} of {retries + 1}) after: {err.what}"
                log.warning("%s", note)
                warm.recorder.phase("Waiting", message=note)
                sleep(min(8.0, base * 2 ** failures))
                continue
            if once:
                raise
            failed = err
            warm.recorder.phase("Failed", err.reason, err.what)
            log.error("%s: %s; idling NotReady", err.reason, err.what)
        sleep(recheck)
