"""A simulated cluster's nodes: labels, taints, a Ready flag, a directory standing in for
each node's disk and the node's container images (design/simulation.md, "Nodes", "Engine
images")."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fleetcache.devtools.simulation.node_images import NodeImages
from fleetcache.functions import quantities

CONTROL_PLANE_ROLE = "node-role.kubernetes.io/control-plane"
PULL_BANDWIDTH = "100Mi"  # bytes a second an image pull gets, unless the node says otherwise
IMAGEFS_CAPACITY = "200Gi"  # the image filesystem's size, unless the node says otherwise


@dataclass
class Node:
    """A node: labels, taints, a directory standing in for its local filesystem, and the host
    paths under it that are filesystems of their own (a dedicated NVMe disk mounted there)."""

    name: str
    disk: Path
    labels: dict[str, str]
    taints: list[dict]
    capacity_bytes: int
    filesystems: tuple[str, ...]
    images: NodeImages = field(default_factory=lambda: NodeImages(
        quantities.quantity_bytes(PULL_BANDWIDTH, "pull_bandwidth"),
        quantities.quantity_bytes(IMAGEFS_CAPACITY, "imagefs")))
    ready: bool = True
    unschedulable: bool = False  # spec.unschedulable: `kubectl cordon`

    @classmethod
    def join(cls, name: str, disk: Path, labels: Mapping[str, str] | None = None, *,
             control_plane: bool = False, capacity: str = "1Ti",
             filesystems: Iterable[str] = (), taints: Iterable[dict] = (),
             pull_bandwidth: str = PULL_BANDWIDTH, imagefs: str = IMAGEFS_CAPACITY) -> Node:
        """A node as it joins, its disk and filesystems made: a control-plane node carries the
        role label and its NoSchedule taint, as kubeadm sets them; `filesystems` are host
        paths with a disk of their own; `pull_bandwidth` (bytes a second, a quantity) paces
        its image pulls, `imagefs` is the size its image GC keeps the images within."""
        all_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                      **(labels or {})}
        all_taints = [dict(t) for t in taints]
        if control_plane:
            all_labels[CONTROL_PLANE_ROLE] = ""
            all_taints.append({"key": CONTROL_PLANE_ROLE, "effect": "NoSchedule"})
        node = cls(name, disk, all_labels, all_taints,
                   quantities.quantity_bytes(capacity, "capacity"), tuple(filesystems),
                   NodeImages(quantities.quantity_bytes(pull_bandwidth, "pull_bandwidth"),
                              quantities.quantity_bytes(imagefs, "imagefs")))
        for path in ("/", *node.filesystems):
            node.host(path).mkdir(parents=True, exist_ok=True)
        return node

    def relabel(self, labels: Mapping[str, str | None]) -> None:
        """`kubectl label node NAME k=v k-`: None removes a label."""
        for key, value in labels.items():
            if value is None:
                self.labels.pop(key, None)
            else:
                self.labels[key] = value

    def host(self, path: str) -> Path:
        """A path on the node, as the directory standing in for it."""
        return self.disk / path.lstrip("/")

    def manifest(self) -> dict:
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name, "labels": dict(self.labels)},
                "spec": {"taints": [dict(t) for t in self.taints],
                         **({"unschedulable": True} if self.unschedulable else {})},
                "status": {"capacity": {"ephemeral-storage": str(self.capacity_bytes)},
                           "images": self.images.status_images(),
                           "conditions": [{"type": "Ready",
                                           "status": "True" if self.ready else "False"}]}}

    def mountinfo(self) -> Path:
        """/proc/self/mountinfo as a container with the node's paths bind-mounted would see
        it: each dedicated filesystem mounted at its own root (what node-prepare checks)."""
        path = self.disk.parent / f"{self.name}.mountinfo"
        lines = [f"{100 + i} 1 259:{i} / {os.path.realpath(self.host(fs))} rw,relatime - ext4 "
                 f"/dev/nvme{i}n1 rw" for i, fs in enumerate(self.filesystems)]
        path.write_text("\n".join(lines) + "\n")
        return path
