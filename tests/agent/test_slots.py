"""Warm slots: at most N nodes copy at once, over Leases (resourceVersion-guarded) or flock'ed files."""

from __future__ import annotations

import copy
import fcntl
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes.client import V1Lease, V1LeaseList, V1LeaseSpec, V1ObjectMeta
from kubernetes.client.exceptions import ApiException

from fleetcache.agent.errors import AgentError
from fleetcache.agent.slots import SLOT_LABEL, DirSlots, Holding, LeaseSlots

NS = "fleetcache-system"
T0 = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self):
        return self.now


class FakeCoordination:
    """CoordinationV1Api as the API server behaves for Leases: every write bumps resourceVersion,
    a replace carrying an older one is a 409 Conflict, a missing lease a 404."""

    def __init__(self, slots: int):
        self.leases = {}
        self.version = 0
        self.on_list = None
        for i in range(slots):
            self._store(V1Lease(metadata=V1ObjectMeta(name=f"node-warm-slot-{i}", namespace=NS,
                                                      labels={SLOT_LABEL: "true"}),
                                spec=V1LeaseSpec()))

    def _store(self, lease):
        self.version += 1
        lease.metadata.resource_version = str(self.version)
        self.leases[lease.metadata.name] = copy.deepcopy(lease)

    def list_namespaced_lease(self, namespace, label_selector):
        assert (namespace, label_selector) == (NS, f"{SLOT_LABEL}=true")
        listed = V1LeaseList(items=[copy.deepcopy(lease) for lease in self.leases.values()])
        if self.on_list:
            hook, self.on_list = self.on_list, None
            hook()
        return listed

    def read_namespaced_lease(self, name, namespace):
        if name not in self.leases:
            raise ApiException(status=404, reason="Not Found")
        return copy.deepcopy(self.leases[name])

    def replace_namespaced_lease(self, name, namespace, body):
        current = self.leases.get(name)
        if current is None:
            raise ApiException(status=404, reason="Not Found")
        if body.metadata.resource_version != current.metadata.resource_version:
            raise ApiException(status=409, reason="Conflict")
        self._store(body)
        return copy.deepcopy(self.leases[name])

    def holder(self, name):
        return self.leases[name].spec.holder_identity


def slots(api, holder, clock=None):
    return LeaseSlots(api, NS, holder, clock=clock or Clock())


def test_a_free_slot_is_taken_with_holder_and_times():
    api = FakeCoordination(2)
    clock = Clock()
    a = slots(api, "ns/c/node-a", clock)
    assert a.try_take() and a.name == "node-warm-slot-0"
    spec = api.leases["node-warm-slot-0"].spec
    assert (spec.holder_identity, spec.renew_time, spec.acquire_time, spec.lease_duration_seconds) == (
        "ns/c/node-a", T0, T0, 60)


def test_two_warmers_racing_for_one_slot_one_wins():
    api = FakeCoordination(1)
    a, b = slots(api, "node-a"), slots(api, "node-b")
    api.on_list = lambda: b.try_take()  # b takes the slot between a's list and a's update
    assert a.try_take() is False
    assert api.holder("node-warm-slot-0") == "node-b"


def test_a_held_slot_is_not_taken_before_it_expires():
    api = FakeCoordination(1)
    clock = Clock()
    assert slots(api, "node-a", clock).try_take()
    clock.now = T0 + timedelta(seconds=59)
    assert slots(api, "node-b", clock).try_take() is False


def test_an_expired_holders_slot_is_taken():
    api = FakeCoordination(1)
    clock = Clock()
    assert slots(api, "node-a", clock).try_take()
    clock.now = T0 + timedelta(seconds=61)
    b = slots(api, "node-b", clock)
    assert b.try_take() and api.holder("node-warm-slot-0") == "node-b"
    assert api.leases["node-warm-slot-0"].spec.lease_transitions == 2


def test_the_second_warmer_takes_the_next_slot():
    api = FakeCoordination(2)
    assert slots(api, "node-a").try_take()
    b = slots(api, "node-b")
    assert b.try_take() and b.name == "node-warm-slot-1"


def test_renewal_moves_renew_time_and_keeps_the_holder():
    api = FakeCoordination(1)
    clock = Clock()
    a = slots(api, "node-a", clock)
    a.try_take()
    clock.now = T0 + timedelta(seconds=10)
    assert a.renew()
    assert api.leases["node-warm-slot-0"].spec.renew_time == clock.now
    clock.now = T0 + timedelta(seconds=65)
    assert slots(api, "node-b", clock).try_take() is False  # renewed at +10: held until +70


def test_renewal_after_a_takeover_reports_the_slot_lost():
    api = FakeCoordination(1)
    clock = Clock()
    a = slots(api, "node-a", clock)
    a.try_take()
    clock.now = T0 + timedelta(seconds=61)
    slots(api, "node-b", clock).try_take()
    assert a.renew() is False


def test_renewal_of_a_deleted_slot_reports_it_lost():
    api = FakeCoordination(1)
    a = slots(api, "node-a")
    a.try_take()
    del api.leases["node-warm-slot-0"]
    assert a.renew() is False


def test_holding_sets_lost_when_renewal_fails():
    api = FakeCoordination(1)
    a = slots(api, "node-a")
    a.try_take()
    del api.leases["node-warm-slot-0"]
    holding = Holding(a, renew_every=0.01)
    assert holding.lost.wait(5)
    holding.release()


def test_release_clears_the_holder_identity():
    api = FakeCoordination(1)
    a = slots(api, "node-a")
    a.try_take()
    a.release()
    assert api.holder("node-warm-slot-0") is None
    assert slots(api, "node-b").try_take()


def test_release_never_clears_another_holders_slot():
    api = FakeCoordination(1)
    clock = Clock()
    a = slots(api, "node-a", clock)
    a.try_take()
    clock.now = T0 + timedelta(seconds=61)
    slots(api, "node-b", clock).try_take()
    a.release()
    assert api.holder("node-warm-slot-0") == "node-b"


def test_holders_names_who_holds_the_live_slots():
    api = FakeCoordination(2)
    slots(api, "node-a").try_take()
    assert slots(api, "node-b").holders() == ["node-a"]


# -- flock'ed files (the simulation's stand-in) ------------------------------------------------------

HOLD = """
import sys, time
from pathlib import Path
from fleetcache.agent.slots import DirSlots
s = DirSlots(Path(sys.argv[1]), sys.argv[2])
assert s.try_take()
print(s.name, flush=True)
time.sleep(60)
"""


def slot_dir(tmp_path, n):
    for i in range(n):
        (tmp_path / f"slot-{i}").touch()
    return tmp_path


def holder_process(directory, holder):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(directory), holder], stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


def test_another_process_holding_the_only_slot_blocks_this_one(tmp_path):
    directory = slot_dir(tmp_path, 1)
    proc, name = holder_process(directory, "node-a")
    try:
        mine = DirSlots(directory, "node-b")
        assert name == "slot-0" and mine.try_take() is False
        assert mine.holders() == ["node-a"]
    finally:
        proc.kill()
        proc.wait()


def test_a_second_process_takes_the_next_slot_file(tmp_path):
    directory = slot_dir(tmp_path, 2)
    proc, _ = holder_process(directory, "node-a")
    try:
        mine = DirSlots(directory, "node-b")
        assert mine.try_take() and mine.name == "slot-1"
        mine.release()
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_holders_slot_is_free_at_once(tmp_path):
    directory = slot_dir(tmp_path, 1)
    proc, _ = holder_process(directory, "node-a")
    proc.kill()
    proc.wait()
    assert DirSlots(directory, "node-b").try_take()


def test_a_released_slot_file_is_free_and_empty(tmp_path):
    directory = slot_dir(tmp_path, 1)
    mine = DirSlots(directory, "node-b")
    mine.try_take()
    mine.release()
    with open(directory / "slot-0") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert (directory / "slot-0").read_text() == ""


def test_a_slots_dir_without_slot_files_is_a_configuration_error(tmp_path):
    with pytest.raises(AgentError) as err:
        DirSlots(tmp_path, "node-a").try_take()
    assert err.value.reason == "InvalidConfiguration"


# -- node-warm with a slot -----------------------------------------------------------------------------

def test_a_warmer_waits_for_a_free_slot_says_who_holds_it_then_warms(tmp_path):
    from tests.agent.node_support import make_volume, model_files, status, visible_bytes
    from tests.agent.test_node_warm import start, wait_for

    files = model_files()
    digest = make_volume(tmp_path / "vol", files)
    (tmp_path / "slots").mkdir()
    directory = slot_dir(tmp_path / "slots", 1)
    holder, _ = holder_process(directory, "other-cache/node-a")
    proc = start(tmp_path, digest, "--slots-dir", str(directory), "--ready-file", str(tmp_path / "ready"),
                 env={"FLEETCACHE_NODE_SLOT_POLL_SECONDS": "0.05"})
    try:
        wait_for(lambda: "held by other-cache/node-a" in (status(tmp_path / "st.json").get("message") or "")
                 if (tmp_path / "st.json").exists() else False)
        time.sleep(0.3)
        assert not (tmp_path / "ready").exists() and visible_bytes(tmp_path / "node") == {}
        holder.kill()
        holder.wait()
        wait_for(lambda: (tmp_path / "ready").exists())
        assert visible_bytes(tmp_path / "node") == files
        assert (directory / "slot-0").read_text() == ""  # released after the copy
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_node_warm_takes_a_lease_slot_and_releases_it(tmp_path):
    from fleetcache.agent import cli
    from tests.agent.node_support import COMMIT, REPO, make_volume, model_files

    digest = make_volume(tmp_path / "vol", model_files())
    api = FakeCoordination(1)
    taken = []
    real_replace = api.replace_namespaced_lease
    api.replace_namespaced_lease = lambda name, ns, body: taken.append(body.spec.holder_identity) or \
        real_replace(name, ns, body)
    argv = ["node-warm", "--source", str(tmp_path / "vol"), "--dest", str(tmp_path / "node"), "--repo", REPO,
            "--commit", COMMIT, "--manifest-digest", digest, "--node", "node-a", "--slots-namespace", NS,
            "--holder", "ns/cache/node-a", "--once"]
    assert cli.main(argv, coordination_api=lambda: api) == 0
    assert taken[0] == "ns/cache/node-a" and api.holder("node-warm-slot-0") is None


class Outage:
    """A slot backend whose renewals fail as during an API server outage."""

    name = "node-warm-slot-0"

    def renew(self):
        raise ConnectionError("API server unreachable")

    def release(self):
        pass


def test_a_slot_not_renewed_for_a_lease_duration_is_given_up():
    ticks = iter([0.0, 30.0, 61.0, 91.0])
    holding = Holding(Outage(), renew_every=0.01, clock=lambda: next(ticks))
    assert holding.lost.wait(5)  # another warmer may have taken it by now: stop copying
    holding.release()


def test_a_short_outage_keeps_the_slot():
    holding = Holding(Outage(), renew_every=0.01, clock=lambda: 0.0)
    assert not holding.lost.wait(0.2)
    holding.release()
