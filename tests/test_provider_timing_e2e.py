"""provider-kubernetes' pace and a real API server's refusals, end to end
(design/provider-timing.md): the real function server on a compressed clock of 5 s a round,
real agents against the test hub, and the simulation's provider reconciling each Object when
the real one would (`--poll` 10 minutes once Ready, 30 s while not, no watches unless asked)
against a cluster that refuses a changed Job template and collects finished Jobs."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fleetcache.devtools import render as rendering
from fleetcache.devtools.simulation import (
    Clock,
    Cluster,
    ControlPlane,
    ProviderFlags,
    RealisticTiming,
    function_server,
    step,
)
from fleetcache.devtools.simulation.timing import NOT_READY_POLL
from fleetcache.devtools.testhub.content import make_model
from fleetcache.devtools.testhub.server import Fault, TestHub
from fleetcache.functions import naming, read
from tests.support.plane import control_plane

SECONDS_PER_ROUND = 5.0
NAMESPACE = "ml"
REPO = "fleetcache-test/pace"
CLUSTER = "gpu-a"
CACHE = "chat"
WALL_DEADLINE = 240.0  # seconds of this machine's time for any one wait


def fleet_cluster(image: str | None = None) -> dict:
    spec: dict = {"kubeconfigSecretRef": {"namespace": "crossplane-system",
                                          "name": f"{CLUSTER}-kubeconfig"}}
    if image:
        spec["agent"] = {"image": image}
    return {"apiVersion": naming.API_VERSION, "kind": "FleetCluster",
            "metadata": {"name": CLUSTER}, "spec": spec}


def model_cache(endpoint: str, **spec: object) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": CACHE, "namespace": NAMESPACE},
            "spec": {"grantRef": {"name": "team"},
                     "source": {"huggingFace": {"repo": REPO, "endpoint": endpoint}},
                     "placement": {"clusterNames": [CLUSTER]}, **spec}}


GRANT = {"apiVersion": naming.API_VERSION, "kind": "ModelCacheGrant",
         "metadata": {"name": "team", "namespace": NAMESPACE},
         "spec": {"clusters": {"clusterNames": [CLUSTER]}, "quota": {"bytes": "1Gi"}}}


class Fleet:
    """One cluster behind the simulated control plane, played in rounds."""

    def __init__(self, control: ControlPlane, cluster: Cluster, clock: Clock, hub: TestHub):
        self.control, self.cluster, self.clock, self.hub = control, cluster, clock, hub
        self.watchers: list[Callable[[], None]] = []

    def round(self) -> None:
        self.clock.tick()
        step(self.control, [self.cluster])
        for watcher in self.watchers:
            watcher()
        time.sleep(0.02)

    def until(self, done: Callable[[], bool], what: str, seconds: float) -> None:
        """Rounds until `done`, at most `seconds` of the clock (and WALL_DEADLINE of ours)."""
        limit, started = self.clock.seconds() + seconds, time.monotonic()
        while not done():
            assert self.clock.seconds() < limit, f"{what}: not within {seconds:.0f} s"
            assert time.monotonic() - started < WALL_DEADLINE, f"{what}: timed out"
            self.round()

    def hydration(self) -> dict:
        return next(iter(self.control.of_kind("ModelCacheHydration")), {})

    def cache(self) -> dict:
        return self.control.xrs.get(("ModelCache", NAMESPACE, CACHE), {})

    def jobs(self, what: str) -> dict[str, dict]:
        """The cluster's Jobs of one kind ("hydrate", "resolve"), by name."""
        prefix = f"{CACHE}-{what}-"
        return {key[2]: job for key, job in self.cluster.objects.items()
                if key[0] == "Job" and key[2].startswith(prefix)}

    def objects_not_synced(self) -> list[str]:
        """Each Object provider-kubernetes left Synced=False, with its message."""
        conditions = {key[2]: read.condition_of({"status": state.status}, "Synced")
                      for key, state in self.control.provider.managed.items()}
        return sorted(f"{name}: {synced.get('message')}" for name, synced in conditions.items()
                      if synced.get("status") == "False")


@contextlib.contextmanager
def fleet(root: Path, *, realistic: bool = True, flags: ProviderFlags | None = None,
          seed: int = 0) -> Iterator[Fleet]:
    clock = Clock(SECONDS_PER_ROUND) if realistic else Clock()
    timing = RealisticTiming(clock, flags or ProviderFlags(), seed) if realistic else None
    with TestHub() as hub, function_server(clock) as address, \
            rendering.channel_to(address) as channel:
        hub.add_repo(REPO, make_model(2 * 2**20, shards=2, seed=3))
        cluster = Cluster(CLUSTER, root / CLUSTER, clock=clock if realistic else None)
        control = control_plane(channel, {CLUSTER: cluster}, timing)
        control.apply(fleet_cluster())
        control.apply(GRANT)
        try:
            yield Fleet(control, cluster, clock, hub)
        finally:
            cluster.stop()


def completed(jobs: dict[str, dict]) -> bool:
    return any(read.is_true(job, "Complete") for job in jobs.values())


def test_a_finished_fetch_is_seen_within_the_not_ready_requeue(tmp_path):
    """A fetch Job's Object is not Ready until the Job ended, so the provider re-reads it
    every 30 s, not every 10 minutes: the hydration is Ready within one requeue of it."""
    with fleet(tmp_path) as f:
        f.control.apply(model_cache(f.hub.endpoint))
        f.until(lambda: completed(f.jobs("hydrate")), "the fetch Job to complete", 1800)
        done = f.clock.seconds()
        f.until(lambda: read.get_path(f.hydration(), "status.phase") == "Ready",
                "the hydration to say Ready", 1800)
        assert f.clock.seconds() - done <= NOT_READY_POLL * 1.1 + SECONDS_PER_ROUND


def test_with_watches_a_finished_fetch_is_seen_in_the_next_round(tmp_path):
    with fleet(tmp_path, flags=ProviderFlags(enable_watches=True)) as f:
        f.control.apply(model_cache(f.hub.endpoint))
        f.until(lambda: completed(f.jobs("hydrate")), "the fetch Job to complete", 1800)
        done = f.clock.seconds()
        f.until(lambda: read.get_path(f.hydration(), "status.phase") == "Ready",
                "the hydration to say Ready", 1800)
        assert f.clock.seconds() - done <= SECONDS_PER_ROUND


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_resolved_cache_stays_resolved_after_its_resolve_job_is_collected(tmp_path, seed):
    """ttlSecondsAfterFinished 60: the resolve Job is collected a minute after it completed.
    Its result is latched and it is never created again (the provider recreates a collected
    Job whose Object still asks for it, and the source would resolve anew)."""
    with fleet(tmp_path, seed=seed) as f:
        created: list[str] = []  # a name each time a resolve Job appears on the cluster
        present: set[str] = set()

        def count_resolve_jobs() -> None:
            names = set(f.jobs("resolve"))
            created.extend(sorted(names - present))
            present.clear()
            present.update(names)

        f.watchers.append(count_resolve_jobs)
        f.control.apply(model_cache(f.hub.endpoint, job={"ttlSecondsAfterFinished": 60}))
        f.until(lambda: completed(f.jobs("resolve")), "the resolve Job to complete", 1800)
        collected_by = f.clock.seconds() + 60 + 2 * SECONDS_PER_ROUND
        f.until(lambda: read.get_path(f.hydration(), "status.phase") == "Ready"
                and f.clock.seconds() > collected_by, "the cache to hydrate", 1800)
        commit = read.get_path(f.cache(), "status.resolved.commit")
        assert read.condition_of(f.cache(), "Resolved").get("status") == "True"
        assert not f.jobs("resolve") and len(created) == 1
        for _ in range(3):
            f.round()
        assert read.get_path(f.cache(), "status.resolved.commit") == commit


def test_a_changed_agent_image_while_a_job_exists_converges_on_a_new_job(tmp_path):
    """The fetch failed (a corrupting proxy) and its Job stays; the platform team fixes the
    proxy and sets spec.agent.image. The API server refuses a changed Job template, so the
    new image is a new Job, and the old one goes."""
    with fleet(tmp_path, realistic=False) as f:
        fault = f.hub.inject(Fault("corrupt", path="/lfs/*", host="cdn", times=None, offset=4096))
        f.control.apply(model_cache(f.hub.endpoint))
        f.until(lambda: read.get_path(f.hydration(), "status.phase") == "Failed",
                "the fetch to fail", 1e9)
        failed = set(f.jobs("hydrate"))
        f.hub.faults.remove(fault)
        f.control.apply(fleet_cluster("ghcr.io/fleetcache/fleetcache-agent:patched"))
        f.until(lambda: read.get_path(f.hydration(), "status.phase") == "Ready",
                "the hydration to be Ready with the new image", 1e9)
        jobs = f.jobs("hydrate")
        assert set(jobs).isdisjoint(failed)
        assert [j["spec"]["template"]["spec"]["containers"][0]["image"] for j in jobs.values()] \
            == ["ghcr.io/fleetcache/fleetcache-agent:patched"]
        assert f.objects_not_synced() == []
