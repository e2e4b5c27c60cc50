"""The fleet the mirror end-to-end tests play on: simulated clusters over the real function
server, a test hub, a proxy in front of it that corrupts its CDN bytes, and an S3 server."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

from fleetcache.devtools import render as rendering
from fleetcache.devtools.demo import sources as act
from fleetcache.devtools.demo.stage import Stage
from fleetcache.devtools.simulation import Clock, Cluster
from fleetcache.devtools.testhub.content import make_model
from fleetcache.devtools.testhub.server import Fault, TestHub
from tests.support.plane import control_plane

MODEL_BYTES = 2 * 2**20
DEADLINE = 120.0


@contextlib.contextmanager
def mirror_fleet(root: Path, fleet_clusters: list[dict], buckets: list[str]
                 ) -> Iterator[tuple[Stage, TestHub, TestHub, act.S3Store]]:
    """The FleetClusters applied with the demo's grant and S3 credentials Secret, and the
    buckets made; yields the stage, the hub, the corrupting proxy and the S3 server."""
    names = [c["metadata"]["name"] for c in fleet_clusters]
    with TestHub() as hub, TestHub() as proxy, act.S3Store() as s3, \
            rendering.function_process() as address, rendering.channel_to(address) as channel:
        proxy.inject(Fault("corrupt", path="/lfs/*", host="cdn", times=None, offset=4096))
        clusters = {name: Cluster(name, root / name) for name in names}
        control = control_plane(channel, clusters)
        stage = Stage(control, clusters, (hub,), Clock(), act.NAMESPACE, "", "", MODEL_BYTES,
                      tuple(names), 0.05, time.monotonic() + DEADLINE, lambda line: None)
        try:
            for cluster in fleet_clusters:
                control.apply(cluster)
            for bucket in buckets:
                s3.make_bucket(bucket)
            control.apply(act.grant(names))
            control.apply(act.credentials_secret())
            yield stage, hub, proxy, s3
        finally:
            for cluster in clusters.values():
                cluster.stop()


def add_repo(hubs: tuple[TestHub, ...], repo: str, seed: int) -> int:
    """The same repo on the hub and the proxy (their commits agree only while their histories
    do); the model's size."""
    files = dict(make_model(MODEL_BYTES, shards=2, seed=seed))
    for each in hubs:
        each.add_repo(repo, files)
    return sum(c.size for c in files.values())
