"""What other composers read of a FleetCluster: its spec as far as they use it, and the
capacity decisions compose-fleet-cluster publishes in status.cache."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetcache.apis.specs import InputError
from fleetcache.functions.k8s.agent_job import DEFAULT_AGENT_IMAGE
from fleetcache.functions.naming import API_VERSION
from fleetcache.functions.protocol import Requirement
from fleetcache.functions.quantities import human_bytes, quantity_bytes
from fleetcache.functions.read import as_int, get_path, is_true, mapping_at, name_or_empty

ACCESS_MODES = ("ReadWriteMany", "ReadWriteOnce")  # the agent writes the volume: never ReadOnlyMany


@dataclass(frozen=True)
class FleetClusterView:
    """What other composers need to know of a FleetCluster."""

    name: str
    labels: dict[str, str]
    ready: bool
    provider_config: str
    storage_class: str | None
    access_mode: str
    capacity: int | None
    agent_image: str
    high_watermark: int = 80  # spec.cache.highWatermark, percent
    cache: ClusterCache | None = None  # status.cache: None until compose-fleet-cluster wrote it
    image_volumes: bool = False  # spec.features.imageVolumes: its nodes mount OCI artifacts

    @classmethod
    def of(cls, resource: dict) -> FleetClusterView:
        # Tolerant by design: a malformed FleetCluster is reported by compose-fleet-cluster
        # on the FleetCluster itself; it must not fail every composer that merely reads it.
        # Each field that is malformed reads as absent: the cluster is then not Ready (no
        # providerConfigName) or gets the defaults, never a bad value in a composed PVC or Job.
        spec = mapping_at(resource, "spec")
        provider_config = name_or_empty(get_path(resource, "status.providerConfigName"))
        labels = get_path(resource, "metadata.labels")
        try:
            capacity = quantity_bytes(get_path(spec, "cache.capacity"), "spec.cache.capacity")
        except InputError:
            capacity = None
        access_mode = get_path(spec, "cache.accessMode")
        image = get_path(spec, "agent.image")
        return cls(
            name=name_or_empty(get_path(resource, "metadata.name")),
            labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping)
            else {},
            ready=bool(provider_config) and is_true(resource, "Ready"),
            provider_config=provider_config,
            storage_class=name_or_empty(get_path(spec, "cache.storageClassName")) or None,
            access_mode=access_mode if access_mode in ACCESS_MODES else "ReadWriteMany",
            capacity=capacity,
            agent_image=image if isinstance(image, str) and image and len(image) <= 1024
            and not any(c.isspace() for c in image) else DEFAULT_AGENT_IMAGE,
            high_watermark=watermark(get_path(spec, "cache.highWatermark"), 80),
            cache=ClusterCache.of(get_path(resource, "status.cache")),
            image_volumes=get_path(spec, "features.imageVolumes") is True,
        )


def watermark(value: Any, default: int) -> int:
    """A watermark percent as the XRD bounds it (1..95), else the XRD's default."""
    return value if isinstance(value, int) and not isinstance(value, bool) \
        and 1 <= value <= 95 else default


@dataclass(frozen=True)
class ClusterCache:
    """The capacity decision compose-fleet-cluster publishes in status.cache (each hydration
    as namespace/name), written by `as_status` and read back by `of`, which
    compose-model-cache-hydration obeys."""

    capacity: int | None  # capacityBytes the decisions were made for; None: no capacity
    used: int
    reserved: int
    admitted: tuple[str, ...]
    evicted: tuple[str, ...]
    waiting: tuple[str, ...] = ()  # as published: sorted, at most the XRD's maxItems
    waiting_count: int = 0  # all that wait, listed or not

    @property
    def used_percent(self) -> int | None:
        return self.used * 100 // self.capacity if self.capacity else None

    def as_status(self) -> dict:
        status: dict = {
            "capacityHuman": human_bytes(self.capacity) if self.capacity else "unlimited",
            "usedBytes": self.used,
            "usedHuman": human_bytes(self.used),
            "reservedBytes": self.reserved,
            "admitted": list(self.admitted), "waiting": list(self.waiting), "evicted": list(self.evicted),
            "waitingCount": self.waiting_count,
        }
        if self.capacity:
            status.update(capacityBytes=self.capacity, usedPercent=self.used_percent,
                          usedHuman=f"{human_bytes(self.used)} ({self.used_percent}%)")
        return status

    @classmethod
    def of(cls, cache: Any) -> ClusterCache | None:
        if not isinstance(cache, Mapping):
            return None

        def keys(name: str) -> tuple[str, ...]:
            values = cache.get(name)
            return tuple(v for v in values if isinstance(v, str)) if isinstance(values, list) else ()

        capacity = as_int(cache.get("capacityBytes"), -1)
        return cls(capacity=capacity if capacity > 0 else None,
                   used=max(0, as_int(cache.get("usedBytes"))),
                   reserved=max(0, as_int(cache.get("reservedBytes"))),
                   admitted=keys("admitted"), evicted=keys("evicted"), waiting=keys("waiting"),
                   waiting_count=max(0, as_int(cache.get("waitingCount"))))


FLEET_CLUSTERS = Requirement(API_VERSION, "FleetCluster")


def fleet_cluster_requirement(name: str) -> Requirement:
    return Requirement(API_VERSION, "FleetCluster", match_name=name)
