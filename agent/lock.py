"""One writer per destination: an flock, plus a lease file for filesystems where flock does not
exclude across nodes (NFS, many FUSE drivers).

The flock decides between processes on one node. The lease (holder, pid, host,
heartbeat) decides across nodes: a fresh lease held by someone else means busy, even if
our flock succeeded. A lease whose holder is on this host but whose process is gone
(kill -9) is stale at once, so a crash on one node never blocks the rerun for a TTL.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

from fleetcache import reasons
from fleetcache.agent.disk import write_atomic
from fleetcache.agent.errors import AgentError

LEASE_TTL = 30.0
HEARTBEAT = 5.0
WAIT_POLL = 1.0


def try_flock(path: Path, flags: int = os.O_RDWR) -> int | None:
    """An exclusive flock on `path`, without waiting: the open descriptor, or None while another holds it."""
    fd = os.open(path, flags, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        if err.errno in (errno.EWOULDBLOCK, errno.EACCES):
            return None
        raise
    return fd


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DestinationLock:
    def __init__(self, state_root: Path, clock=time.time):
        self.dir = state_root
        self.lock_path = state_root / "lock"
        self.lease_path = state_root / "lease.json"
        self.clock = clock
        self.holder = f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
        self._fd: int | None = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def _lease(self) -> dict | None:
        try:
            return json.loads(self.lease_path.read_text())
        except (FileNotFoundError, ValueError):
            return None

    def _lease_blocks(self, lease: dict | None) -> bool:
        if not lease or lease.get("holder") == self.holder:
            return False
        if lease.get("host") == socket.gethostname() and not _alive(int(lease.get("pid", 0))):
            return False
        return self.clock() - float(lease.get("heartbeat", 0)) < float(lease.get("ttlSeconds", LEASE_TTL))

    def _write_lease(self) -> None:
        lease = {"holder": self.holder, "host": socket.gethostname(), "pid": os.getpid(),
                 "heartbeat": self.clock(), "ttlSeconds": LEASE_TTL}
        write_atomic(self.lease_path, json.dumps(lease).encode(), durable=False)

    def try_acquire(self) -> bool:
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = try_flock(self.lock_path, os.O_RDWR | os.O_CREAT)
        if fd is None:
            return False
        if self._lease_blocks(self._lease()):
            os.close(fd)
            return False
        self._fd = fd
        self._write_lease()
        if (self._lease() or {}).get("holder") != self.holder:  # lost a cross-node race on the lease file
            self.release()
            return False
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="lease-heartbeat", daemon=True)
        self._beat.start()
        return True

    def acquire(self, wait: bool) -> None:
        while not self.try_acquire():
            if not wait:
                lease = self._lease() or {}
                holder = lease.get("holder", "a process on this node")
                raise AgentError(reasons.StagerBusy, f"another writer ({holder}) holds {self.dir.parent}")
            time.sleep(WAIT_POLL)

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT):
            try:
                self._write_lease()
            except OSError:
                pass  # the next beat retries; the lease only expires after a TTL

    def release(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
        if self._fd is not None:
            lease = self._lease()
            if lease and lease.get("holder") == self.holder:
                self.lease_path.unlink(missing_ok=True)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
