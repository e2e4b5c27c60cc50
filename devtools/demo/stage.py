"""The stage the demo's acts play on: the demo's fleet as act one leaves it (its control
plane, clusters, hubs and clock), played in rounds until an act's ending holds. The main
demo builds it; every act after act one, and the end-to-end tests, play on it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fleetcache.devtools.simulation import Clock, Cluster, ControlPlane, step
from fleetcache.devtools.testhub.server import TestHub
from fleetcache.functions import naming, read

Echo = Callable[[str], None]


@dataclass
class Stage:
    """The demo's fleet, as act one leaves it."""

    control: ControlPlane
    clusters: dict[str, Cluster]
    hubs: tuple[TestHub, ...]  # the origin first, then the mirrors in front of it
    clock: Clock
    namespace: str
    cache: str  # act one's ModelCache
    repo: str
    model_bytes: int
    healthy: tuple[str, ...]  # clusters whose hydration can succeed
    pause: float
    deadline: float  # time.monotonic() by which the whole demo must be done
    out: Echo
    rounds: int = 0

    def round(self) -> None:
        self.clock.tick()
        step(self.control, self.clusters.values())
        self.rounds += 1
        time.sleep(self.pause)

    def until(self, done: Callable[[], bool], what: str) -> str:
        """Rounds until `done`; "" or the problem of running out of time."""
        while not done():
            if time.monotonic() > self.deadline:
                return f"timed out waiting for {what}"
            self.round()
        return ""

    def hydrations(self, cache: str | None = None) -> list[dict]:
        return [h for h in self.control.of_kind("ModelCacheHydration")
                if cache is None or h["spec"]["modelCacheName"] == cache]

    def hydration(self, cache: str, cluster: str) -> dict:
        return next((h for h in self.hydrations(cache) if h["spec"]["clusterName"] == cluster),
                    {})

    def volume(self, cluster: str, cache: str) -> Path:
        return self.clusters[cluster].volume_dir(self.namespace, naming.cache_volume_name(cache))

    def fleet_cluster(self, name: str) -> dict:
        return next(c for c in self.control.of_kind("FleetCluster")
                    if c["metadata"]["name"] == name)


def phase_of(hydration: dict) -> str:
    return read.get_path(hydration, "status.phase", "") or ""
