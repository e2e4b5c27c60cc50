"""A cluster-wide semaphore of warm slots: at most N nodes copy from the cluster volume at once.

Two backends with one interface (`try_take`, `renew`, `release`, `holders`):

- `LeaseSlots`: the FleetCluster composes Leases `node-warm-slot-<i>` (label
  `fleetcache.dev/node-warm-slot: "true"`) in fleetcache-system. A warmer takes one that is free
  (no holder) or expired (renewTime + leaseDurationSeconds passed) with an update conditioned on
  the resourceVersion it read, so of two racing warmers exactly one wins (the other gets 409 and
  tries the next slot); it renews every 10 s and clears holderIdentity when done. A crashed
  holder frees its slot after 60 s. The API is injected (`CoordinationV1Api` in cluster).
- `DirSlots`: one flock'ed file per slot (`slot-0` .. `slot-<N-1>`), the simulation's stand-in;
  the kernel frees a dead holder's lock at once.

`Holding` keeps the renewal going on a thread and sets `lost` when the slot is no longer ours
(taken over after a long API outage, or deleted because maxConcurrentNodes shrank): the copier
stops at the next block and waits for a slot again.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fleetcache import reasons
from fleetcache.agent.errors import AgentError
from fleetcache.agent.lock import try_flock

log = logging.getLogger("fleetcache.agent")

SLOT_LABEL = "fleetcache.dev/node-warm-slot"
LEASE_SECONDS = 60
RENEW_SECONDS = 10.0
_SLOT_FILE = re.compile(r"slot-(\d+)")


def utcnow() -> datetime:
    return datetime.now(UTC)


def incluster_coordination_api():
    from kubernetes import client, config

    config.load_incluster_config()
    return client.CoordinationV1Api()


def _conflict(err: Exception) -> bool:
    return getattr(err, "status", None) in (404, 409)


def lease_free(lease, holder: str, now: datetime, default_duration: int) -> bool:
    """A lease is free for `holder` when nobody holds it, it holds it already, or the holder stopped renewing."""
    spec = lease.spec
    if not spec.holder_identity or spec.holder_identity == holder or spec.renew_time is None:
        return True
    return spec.renew_time + timedelta(seconds=spec.lease_duration_seconds or default_duration) <= now


def hold_spec(spec, holder: str, now: datetime, duration: int) -> None:
    """Write `holder` into a lease spec as taking or renewing it."""
    if spec.holder_identity != holder:
        spec.lease_transitions = (spec.lease_transitions or 0) + 1
        spec.acquire_time = now
    spec.holder_identity = holder
    spec.renew_time = now
    spec.lease_duration_seconds = duration


class LeaseSlots:
    def __init__(self, api, namespace: str, holder: str, clock=utcnow, duration: int = LEASE_SECONDS):
        self.api, self.namespace, self.holder = api, namespace, holder
        self.clock, self.duration = clock, duration
        self.name: str | None = None

    def _leases(self) -> list:
        leases = self.api.list_namespaced_lease(self.namespace, label_selector=f"{SLOT_LABEL}=true").items
        return sorted(leases, key=lambda lease: lease.metadata.name)

    def _free(self, lease) -> bool:
        return lease_free(lease, self.holder, self.clock(), self.duration)

    def try_take(self) -> bool:
        """Take the first free or expired slot; a 409 means another warmer won it: try the next."""
        for lease in self._leases():
            if not self._free(lease):
                continue
            hold_spec(lease.spec, self.holder, self.clock(), self.duration)
            try:
                self.api.replace_namespaced_lease(lease.metadata.name, self.namespace, lease)
            except Exception as err:  # noqa: BLE001 - the API client raises ApiException
                if _conflict(err):
                    continue
                raise
            self.name = lease.metadata.name
            return True
        return False

    def renew(self) -> bool:
        """True while the slot is still ours; False once another holder has it or it is gone."""
        for _ in range(3):
            try:
                lease = self.api.read_namespaced_lease(self.name, self.namespace)
            except Exception as err:  # noqa: BLE001
                if getattr(err, "status", None) == 404:
                    return False
                raise
            if lease.spec.holder_identity != self.holder:
                return False
            lease.spec.renew_time = self.clock()
            try:
                self.api.replace_namespaced_lease(self.name, self.namespace, lease)
                return True
            except Exception as err:  # noqa: BLE001
                if not _conflict(err):
                    raise
        return False

    def release(self) -> None:
        """Clear holderIdentity, so the next warmer need not wait for the lease to expire."""
        if self.name is None:
            return
        for _ in range(3):
            try:
                lease = self.api.read_namespaced_lease(self.name, self.namespace)
                if lease.spec.holder_identity != self.holder:
                    break
                lease.spec.holder_identity = None
                self.api.replace_namespaced_lease(self.name, self.namespace, lease)
                break
            except Exception as err:  # noqa: BLE001 - release is best effort: the lease expires anyway
                if not _conflict(err):
                    log.warning("could not release warm slot %s (%s); it expires in %d s", self.name,
                                type(err).__name__, self.duration)
                    break
        self.name = None

    def holders(self) -> list[str]:
        return [lease.spec.holder_identity for lease in self._leases()
                if lease.spec.holder_identity and not self._free(lease)]


class NamedLease:
    """One named Lease that one warmer at a time holds (the record pruner, `<cache>-node-pruner`):
    created by the first warmer that asks (the Role allows create), then taken when free or expired,
    each write conditioned on the resourceVersion read."""

    def __init__(self, api, namespace: str, name: str, holder: str, duration: int, clock=utcnow):
        self.api, self.namespace, self.name, self.holder = api, namespace, name, holder
        self.duration, self.clock = duration, clock

    def try_take(self) -> bool:
        from kubernetes.client import V1Lease, V1LeaseSpec, V1ObjectMeta

        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except Exception as err:  # noqa: BLE001
            if getattr(err, "status", None) != 404:
                raise
            spec = V1LeaseSpec()
            hold_spec(spec, self.holder, self.clock(), self.duration)
            body = V1Lease(metadata=V1ObjectMeta(name=self.name, namespace=self.namespace), spec=spec)
            try:
                self.api.create_namespaced_lease(self.namespace, body)
            except Exception as err:  # noqa: BLE001
                if getattr(err, "status", None) == 409:  # another warmer created it first
                    return False
                raise
            return True
        if not lease_free(lease, self.holder, self.clock(), self.duration):
            return False
        hold_spec(lease.spec, self.holder, self.clock(), self.duration)
        try:
            self.api.replace_namespaced_lease(self.name, self.namespace, lease)
        except Exception as err:  # noqa: BLE001
            if _conflict(err):
                return False
            raise
        return True


class DirSlots:
    def __init__(self, directory: Path, holder: str):
        self.directory, self.holder = directory, holder
        self.name: str | None = None
        self._fd: int | None = None

    def _slots(self) -> list[Path]:
        slots = [p for p in self.directory.iterdir() if _SLOT_FILE.fullmatch(p.name)] \
            if self.directory.is_dir() else []
        if not slots:
            raise AgentError(reasons.InvalidConfiguration, f"--slots-dir {self.directory} holds no slot-<i> files")
        return sorted(slots, key=lambda p: int(p.name[5:]))

    def try_take(self) -> bool:
        for slot in self._slots():
            fd = try_flock(slot)
            if fd is None:
                continue
            os.ftruncate(fd, 0)
            os.pwrite(fd, self.holder.encode(), 0)
            self._fd, self.name = fd, slot.name
            return True
        return False

    def renew(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
        self._fd = self.name = None

    def holders(self) -> list[str]:
        return [text for slot in self._slots() if (text := slot.read_text().strip())]


class Holding:
    """A taken slot, renewed on a thread; `lost` is set when it is no longer ours."""

    def __init__(self, slots, renew_every: float = RENEW_SECONDS, clock=time.monotonic):
        self.slots, self.renew_every, self.clock = slots, renew_every, clock
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="warm-slot", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        last_ok = self.clock()
        while not self._stop.wait(self.renew_every):
            try:
                if not self.slots.renew():
                    self.lost.set()
                    return
                last_ok = self.clock()
            except Exception as err:  # noqa: BLE001 - an API outage: keep trying until the lease expires
                log.warning("could not renew warm slot %s (%s)", self.slots.name, type(err).__name__)
                if self.clock() - last_ok >= LEASE_SECONDS:
                    self.lost.set()
                    return

    def release(self) -> None:
        self._stop.set()
        self._thread.join()
        self.slots.release()


def take(slots, wait, poll: float = 2.0) -> Holding:
    """Block until a slot is ours; `wait(holders)` is told who holds them each time none is free."""
    while not slots.try_take():
        wait(slots.holders())
        time.sleep(poll)
    log.info("took warm slot %s", slots.name)
    return Holding(slots, RENEW_SECONDS)
