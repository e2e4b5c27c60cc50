"""Doing the fetch: concurrent ranged downloads, digest checked while the bytes stream, resume.

Each blob is an `Assembly`: a partial file written with pwrite at the part's offset, a
journal of written spans (so a crash resumes without refetching), and a running digest
that follows the contiguous written prefix, fed by whichever worker extends it: from its
buffer when the block extends the prefix, else read back from the file once the gap
closes, so parts arrive in any order with bounded memory. When the last part lands the
digest is compared; only a match is fsynced and renamed into place, then linked. A
mismatch discards the file and fetches it again, up to MISMATCH_RETRIES times.

The byte path costs little more CPU than receiving and hashing (design/performance.md):
each worker receives straight from the socket into its own page-aligned stage (no bytes
object per read), hashes from that memory, and writes whole 4 KiB blocks with O_DIRECT,
which on a VM costs a tenth of copying into fresh page-cache pages; read-back is direct
too. Unaligned heads and tails, and filesystems that refuse O_DIRECT, go through the page
cache as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import http.client
import itertools
import logging
import mmap
import os
import queue
import shutil
import threading
import time
from pathlib import Path

import urllib3

from fleetcache import reasons
from fleetcache.agent.errors import AgentError, from_os_error
from fleetcache.agent.hub import Bandwidth, Retryable, RetryPolicy, describe, redact_url
from fleetcache.agent.layout import Layout
from fleetcache.agent.lock import DestinationLock
from fleetcache.agent.plan import (
    FetchPlan,
    FileTask,
    Listing,
    Span,
    merge_spans,
    new_hasher,
    plan_fetch,
    split_spans,
)
from fleetcache.agent.progress import Progress
from fleetcache.agent.prune import empty_trash
from fleetcache.agent.sources import Source
from fleetcache.manifest import Entry, manifest_digest
from fleetcache.volume import STATE_DIR

log = logging.getLogger("fleetcache.agent")

STAGE_BLOCK = 8 << 20  # bytes per write, and per read-back for the digest
READ_MIN = 64 << 10  # a slow stream's reads shrink to this so each returns within about FLUSH_AFTER
FLUSH_AFTER = 0.05  # seconds a slow stream's bytes may wait in the stage before they are written
ALIGN = 4096  # O_DIRECT transfers whole blocks from block-aligned memory
HUGE_PAGE = 2 << 20
O_DIRECT = getattr(os, "O_DIRECT", 0)
PART_SIZE = 32 << 20
WRITEBACK_STEP = 16 << 20
MISMATCH_RETRIES = 3
STOP_GRACE = 5.0  # seconds an interrupted run waits for workers to journal the bytes they hold


class Aborted(Exception):
    """Another worker failed; stop quietly."""


_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_sync_file_range = getattr(_libc, "sync_file_range", None)
SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Queue hashed bytes for writeback now (Linux), so the fsync before publish has little left.

    Unlike fadvise(DONTNEED) this keeps the pages cached for the engine that reads them next.
    """
    if _sync_file_range is not None:
        _sync_file_range(fd, ctypes.c_longlong(offset), ctypes.c_longlong(length), SYNC_FILE_RANGE_WRITE)


def aligned_buffer(size: int) -> memoryview:
    """Private memory on a 2 MiB boundary, in transparent huge pages where the kernel allows:
    pinning a huge page for a direct transfer costs a fraction of pinning 512 small ones
    (direct I/O's system time fell about threefold here)."""
    area = mmap.mmap(-1, size + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        area.madvise(mmap.MADV_HUGEPAGE)
    except (AttributeError, OSError):  # no THP: small pages, still page-aligned
        pass
    skip = -ctypes.addressof(ctypes.c_char.from_buffer(area)) % HUGE_PAGE
    return memoryview(area)[skip : skip + size]


_spare_buffers: list[memoryview] = []  # read-back buffers, as many as read-backs ever ran at once


def body_reader(resp):
    """`readinto(view) -> n` for a response body, filling `view` unless the body ends first.

    urllib3's own readinto reads into a new bytes and copies it; the http.client response it
    wraps fills the buffer straight from the socket. A source's wrapper may offer `readinto`;
    anything else is read with read1 and copied.
    """
    raw = getattr(resp, "_fp", None)
    if (isinstance(resp, urllib3.BaseHTTPResponse) and isinstance(raw, http.client.HTTPResponse)
            and resp.headers.get("Content-Encoding", "identity") == "identity"):
        return raw.readinto
    if hasattr(resp, "readinto"):
        return resp.readinto

    def copied(view: memoryview) -> int:
        chunk = resp.read1(len(view))
        view[: len(chunk)] = chunk
        return len(chunk)

    return copied


class Assembly:
    """One blob being written: partial file, journal, written spans and the digest of the prefix."""

    def __init__(self, task: FileTask, layout: Layout, url: str, attempt: int):
        self.task, self.entry, self.attempt = task, task.entry, attempt
        self.layout = layout
        self.start_url = self.url = url
        self.fd = self.direct = self.journal = -1
        self.spans = list(task.done)
        self.claims: set[int] = set()  # starts of blocks their writers are about to hash from memory
        self.lock = threading.Lock()
        self.hash_lock = threading.Lock()
        self.hasher = new_hasher(self.entry)
        self.hashed = 0
        self.flushed = 0
        self.short_read = False
        self.parts_left = len(task.parts)

    def open(self) -> None:
        """Files are opened by the first part taken, so a repo of many files never holds many fds.

        A second descriptor with O_DIRECT carries whole blocks; a filesystem that refuses it
        leaves `direct` at -1 and every byte goes through the page cache."""
        with self.lock:
            if self.fd >= 0:
                return
            part = self.layout.part_path(self.entry)
            part.parent.mkdir(parents=True, exist_ok=True)
            # Starting from nothing, old journal lines (a part file lost since) must not count.
            fresh = 0 if self.task.done else os.O_TRUNC
            self.fd = os.open(part, os.O_RDWR | os.O_CREAT | fresh, 0o644)
            self.journal = os.open(self.layout.journal_path(self.entry),
                                   os.O_WRONLY | os.O_CREAT | os.O_APPEND | fresh, 0o644)
            if O_DIRECT:
                try:
                    self.direct = os.open(part, os.O_RDWR | O_DIRECT)
                except OSError as err:
                    if err.errno != errno.EINVAL:
                        raise

    def store(self, view: memoryview, filled: int, position: int, final: bool) -> int:
        """Write the stage's first `filled` bytes at `position`; how many were written.

        Whole blocks go direct; a head up to the next block boundary, and a tail when `final`,
        go through the page cache. Without `final` a tail (less than a block) is left at the
        stage's start for the next write.
        """
        written = 0
        if self.direct >= 0 and position % ALIGN:
            head = min(filled, -position % ALIGN)
            self._pwrite(self.fd, view[:head], position)
            view[: filled - head] = view[head:filled]  # direct transfers start at an aligned address
            written, filled, position = head, filled - head, position + head
        bulk = filled - filled % ALIGN if self.direct >= 0 else 0
        if bulk:
            try:
                self._pwrite(self.direct, view[:bulk], position)
            except OSError as err:
                if err.errno != errno.EINVAL:
                    raise
                self.direct, bulk = -1, 0  # opened with O_DIRECT but refuses its writes
        rest = filled - bulk
        if rest and (final or self.direct < 0):
            self._pwrite(self.fd, view[bulk:filled], position + bulk)
            return written + filled
        view[:rest] = view[bulk:filled]
        return written + bulk

    def _pwrite(self, fd: int, data: memoryview, position: int) -> None:
        """Record the bytes only once they are written: journal, spans, digest."""
        if len(data):
            os.pwrite(fd, data, position)
            self.written(position, position + len(data), data)

    def written(self, start: int, end: int, data: memoryview) -> None:
        """Journal the span, then hash.

        A block that extends the written prefix is hashed from `data` by its writer, who waits
        for the digest to reach it (other hashers stop reading back at its start); a block
        ahead of a gap is read back by whoever hashes once the gap is filled.
        """
        os.write(self.journal, b"%d %d\n" % (start, end))
        with self.lock:
            extends = self._contiguous() == start
            self.spans = merge_spans(self.spans + [(start, end)])
            if extends:
                self.claims.add(start)
        self.advance_hash(wait=extends, fresh=(start, data) if extends else None)

    def _contiguous(self) -> int:
        return self.spans[0][1] if self.spans and self.spans[0][0] == 0 else 0

    def hashable(self) -> int:
        """The written prefix, up to the first block whose writer hashes it from memory."""
        with self.lock:
            return min(self._contiguous(), *self.claims) if self.claims else self._contiguous()

    def advance_hash(self, wait: bool, fresh: tuple[int, memoryview] | None = None) -> None:
        """Hash the written prefix; without `wait`, leave it to whoever already hashes this file."""
        while True:
            if not self.hash_lock.acquire(blocking=wait):
                return
            try:
                if fresh is not None:
                    try:
                        self._read_to(fresh[0])
                        if fresh[0] == self.hashed and not self.short_read:
                            self.hasher.update(fresh[1])
                            self.hashed += len(fresh[1])
                    finally:
                        with self.lock:
                            self.claims.discard(fresh[0])
                    fresh = None
                self._read_to(self.hashable())
                if self.direct < 0 and self.hashed - self.flushed >= WRITEBACK_STEP:
                    start_writeback(self.fd, self.flushed, self.hashed - self.flushed)
                    self.flushed = self.hashed
            finally:
                self.hash_lock.release()
            if wait or self.short_read or self.hashable() <= self.hashed:
                return

    def _read_to(self, target: int) -> None:
        """Read back and hash up to `target`, through a buffer shared with other files' read-backs
        (fewer than the workers run at once, and each new buffer's first touch costs here)."""
        if self.hashed >= target or self.short_read:
            return
        try:
            back = _spare_buffers.pop()
        except IndexError:
            back = aligned_buffer(STAGE_BLOCK)
        try:
            while self.hashed < target and not self.short_read:
                self._read_back(target, back)
        finally:
            _spare_buffers.append(back)

    def _read_back(self, target: int, back: memoryview) -> None:
        """Hash the next written bytes up to `target` from the file, in whole blocks when direct."""
        skip = self.hashed % ALIGN if self.direct >= 0 else 0
        base = self.hashed - skip
        length = min(len(back), target - base)
        if self.direct >= 0:
            length = min(len(back), -(-length // ALIGN) * ALIGN)
        got = os.preadv(self.direct if self.direct >= 0 else self.fd, [back[:length]], base)
        usable = min(got, target - base) - skip
        if usable <= 0:  # the journal claims bytes the file lacks (power loss): refetch
            self.short_read = True
            return
        self.hasher.update(back[skip : skip + usable])
        self.hashed += usable

    def matches(self) -> bool:
        self.advance_hash(wait=True)
        return (not self.short_read and self.hashed == self.entry.size
                and self.hasher.hexdigest() == self.entry.digest)

    def close(self) -> None:
        for fd in (self.fd, self.direct, self.journal):
            if fd >= 0:
                os.close(fd)


class Fetcher:
    """Worker threads taking ranged parts from one queue; the first permanent failure stops them all."""

    def __init__(self, source: Source, layout: Layout, listing: Listing, progress: Progress, concurrency: int,
                 bandwidth: Bandwidth | None, policy: RetryPolicy):
        self.source, self.layout, self.listing = source, layout, listing
        self.progress, self.concurrency, self.bandwidth, self.policy = progress, concurrency, bandwidth, policy
        self.jobs: queue.Queue = queue.Queue()
        self.abort = threading.Event()
        self.failure: Exception | None = None
        self.pending = 0
        self.pending_lock = threading.Lock()

    # -- orchestration --------------------------------------------------------------------
    def run(self, plan: FetchPlan) -> None:
        self.pending = len(plan.tasks)
        self._start(plan.tasks, attempt=1)
        for entry in plan.to_link:
            self.layout.link(entry, self.listing.commit)
            self.progress.update(files_delta=1)
        if self.pending == 0:
            return
        workers = [threading.Thread(target=self._worker, name=f"fetch-{i}", daemon=True)
                   for i in range(self.concurrency)]
        for worker in workers:
            worker.start()
        try:
            for worker in workers:
                worker.join()
        except BaseException:  # a signal (Interrupted): let workers write what they hold, then go
            self._fail(Aborted())
            deadline = time.monotonic() + STOP_GRACE
            for worker in workers:
                worker.join(max(0.0, deadline - time.monotonic()))
            raise
        if self.failure is not None:
            raise self.failure

    def _start(self, tasks: tuple[FileTask, ...], attempt: int) -> None:
        """Queue parts round-robin across files: writers of one file contend for its inode lock,
        and several files hash in parallel on several cores."""
        queues: list[list[tuple[Assembly, Span | None]]] = []
        for task in tasks:
            url = self.source.url(task.entry)
            asm = Assembly(task, self.layout, url, attempt)
            parts: list[tuple[Assembly, Span | None]] = [(asm, span) for span in task.parts]
            queues.append(parts or [(asm, None)])
        for round_ in itertools.zip_longest(*queues):
            for job in round_:
                if job is not None:
                    self.jobs.put(job)

    def _fail(self, err: Exception) -> None:
        """Stop every worker; `run` raises the first failure (an unexpected one too, so nothing hangs)."""
        if not self.abort.is_set():
            self.failure = err
            self.abort.set()
            for _ in range(self.concurrency):
                self.jobs.put(None)

    def _worker(self) -> None:
        stage = aligned_buffer(STAGE_BLOCK)
        while not self.abort.is_set():
            job = self.jobs.get()
            if job is None:
                return
            asm, span = job
            try:
                asm.open()
                if span is not None:
                    self._download(asm, span, stage)
                with asm.lock:
                    asm.parts_left -= 1
                    last = asm.parts_left <= 0
                if last:
                    self._finish(asm)
            except Aborted:
                return
            except AgentError as err:
                self._fail(err)
            except OSError as err:
                self._fail(from_os_error(err, str(self.layout.part_path(asm.entry))) or err)
            except Exception as err:  # noqa: BLE001 - a bug must end the run, not leave workers waiting
                self._fail(err)

    # -- one part -------------------------------------------------------------------------
    def _download(self, asm: Assembly, span: tuple[int, int], stage: memoryview) -> None:
        """Stream one range into the file through the worker's stage.

        Bytes are written (and journaled, and hashed) when the stage is full or has waited
        FLUSH_AFTER: large writes cost far less than small ones, and a slow stream still never
        holds more than a moment's bytes that a kill would lose. Each read fills its slice of
        the stage; slices shrink on a slow stream so a read returns within about FLUSH_AFTER.
        """
        position, end = span
        weight = len(asm.task.entries)
        size = asm.entry.size
        what = f"{asm.entry.path} bytes {span[0]}-{end - 1}"

        def flush(filled: int, final: bool) -> int:
            """Write, and return how many bytes are left at the stage's start (a block's tail)."""
            nonlocal position
            done = asm.store(stage, filled, position, final)
            position += done
            self.progress.update(bytes_delta=done * weight, transferred=done)
            return filled - done

        def attempt() -> None:
            try:
                resp = self.source.open_range(asm.url, position, end, size)
            except Retryable:
                asm.url = asm.start_url  # ask the hub again: a signed CDN URL may have expired
                raise
            asm.url = resp.final_url
            readinto = body_reader(resp)
            filled, since, step = 0, time.monotonic(), READ_MIN
            try:
                while position + filled < end:
                    if self.abort.is_set():
                        raise Aborted()
                    want = min(step, STAGE_BLOCK - filled, end - position - filled)
                    began = time.monotonic()
                    try:
                        got = readinto(stage[filled : filled + want])
                    except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as err:
                        raise self._stream_error(asm, what, err) from None
                    if not got:
                        raise self._stream_error(asm, what, EOFError())
                    if self.bandwidth:
                        self.bandwidth.take(got)
                    filled += got
                    now = time.monotonic()
                    step = (min(step * 2, STAGE_BLOCK) if now - began < FLUSH_AFTER / 4
                            else max(step // 2, READ_MIN) if now - began > FLUSH_AFTER else step)
                    if filled == STAGE_BLOCK or position + filled == end or now - since >= FLUSH_AFTER:
                        filled, since = flush(filled, final=position + filled == end), now
                resp.release_conn()
            except BaseException:
                if filled:  # bytes that arrived whole before the stream broke are kept
                    flush(filled, final=True)
                resp.close()
                raise

        self.policy.run(attempt, what, self.abort)

    @staticmethod
    def _stream_error(asm: Assembly, what: str, err: BaseException) -> Retryable:
        failure = AgentError(reasons.SourceUnreachable, f"{what} from {redact_url(asm.url)}: interrupted, "
                                                  f"{describe(err)}")
        asm.url = asm.start_url
        return Retryable(failure)

    # -- one blob ---------------------------------------------------------------------------
    def _finish(self, asm: Assembly) -> None:
        entry, task = asm.entry, asm.task
        if asm.matches():
            self.layout.publish_blob(entry, asm.fd)
            asm.close()
            for linked in task.entries:
                self.layout.link(linked, self.listing.commit)
            self.progress.update(files_delta=len(task.entries))
            with self.pending_lock:
                self.pending -= 1
                done = self.pending == 0
            if done:
                for _ in range(self.concurrency):
                    self.jobs.put(None)
            return
        got = "a short file" if asm.short_read else asm.hasher.hexdigest()[:16] + "…"
        log.warning("%s: digest mismatch on attempt %d (got %s, want %s…)", entry.path, asm.attempt, got,
                    entry.digest[:16])
        asm.close()
        self.layout.discard_partial(entry)
        self.progress.update(bytes_delta=-entry.size * len(task.entries))
        self.source.mismatch(entry)  # a mirror's corrupt blob: the retry comes from the origin
        if asm.attempt > MISMATCH_RETRIES:
            raise AgentError(reasons.DigestMismatch, f"{entry.path} did not match its {entry.algo} digest after "
                                               f"{asm.attempt} attempts")
        fresh = FileTask(task.key, task.entries, tuple(split_spans([(0, entry.size)], PART_SIZE)), ())
        self._start((fresh,), asm.attempt + 1)


def check_space(dest: Path, needed: int) -> None:
    free = shutil.disk_usage(dest).free
    if needed > free:
        raise AgentError(reasons.InsufficientCapacity, f"{needed} more bytes are needed under --dest but only "
                                                 f"{free} are free")


def fetch(source: Source, layout: Layout, listing: Listing, entries: tuple[Entry, ...], progress: Progress,
          concurrency: int, bandwidth: Bandwidth | None, policy: RetryPolicy, wait: bool,
          refs: tuple[str, ...] = ()) -> dict:
    """Lock, sweep, plan from what is on disk, check space, download, publish; manifest and refs last,
    then the source's own completion (a mirror publisher uploads the verified blobs and its manifest)."""
    digest = manifest_digest(entries)
    layout.dest.mkdir(parents=True, exist_ok=True)
    with DestinationLock(layout.dest / STATE_DIR) as lock:
        lock.acquire(wait)
        empty_trash(layout.dest)  # a prune killed before it emptied its trash: free the space first
        layout.ensure_dirs()
        keep = {p for e in entries for p in (layout.part_path(e), layout.journal_path(e))}
        layout.sweep(keep)
        plan = plan_fetch(entries, layout.key, layout.scan(entries, listing.commit, progress.note), PART_SIZE)
        check_space(layout.dest, plan.bytes_missing)
        progress.phase("Hydrating", commit=listing.commit, manifestDigest=digest, bytesTotal=plan.bytes_total,
                       bytesDone=plan.bytes_present, filesTotal=plan.files_total, filesDone=plan.files_present)
        Fetcher(source, layout, listing, progress, concurrency, bandwidth, policy).run(plan)
        progress.phase("Verifying")
        layout.finish(listing, entries, digest, refs)
        extra = source.complete(layout, entries, digest)  # a mirror publisher uploads before Ready
    progress.phase("Ready", bytesDone=plan.bytes_total, filesDone=plan.files_total, **extra)
    return dict(progress.record)
