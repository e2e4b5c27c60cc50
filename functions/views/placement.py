"""Which FleetClusters a placement selects: a ModelCache's or a ModelDeployment's
`spec.placement` (clusterNames, or a clusterSelector over the FleetClusters' labels)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fleetcache.functions.k8s import selectors
from fleetcache.functions.views.fleet_cluster import FleetClusterView


@dataclass(frozen=True)
class Target:
    """A cluster the placement selects, and its FleetCluster (None: named in clusterNames
    but it does not exist)."""

    name: str
    cluster: FleetClusterView | None

    @property
    def ready(self) -> bool:
        return self.cluster is not None and self.cluster.ready


def fleet_by_name(fleet: Iterable[Any]) -> dict[str, FleetClusterView]:
    """The FleetClusters by name; one without a valid name cannot be selected."""
    views = {}
    for resource in fleet:
        if isinstance(resource, Mapping):
            view = FleetClusterView.of(dict(resource))
            if view.name:
                views[view.name] = view
    return views


def targets(names: Iterable[str] | None, selector: dict | None, fleet: Iterable[Any]) -> list[Target]:
    """The placement's clusters in name order: the named ones (those that do not exist
    included), else the FleetClusters the selector matches."""
    views = fleet_by_name(fleet)
    if names is not None:
        return [Target(name, views.get(name)) for name in sorted(set(names))]
    return [Target(name, view) for name, view in sorted(views.items())
            if selectors.selector_matches(selector, view.labels, "spec.placement.clusterSelector")]
