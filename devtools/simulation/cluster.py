"""A simulated cluster: its API objects and the controllers fleetcache relies on, in a
directory. `Cluster` is what provider-kubernetes and the tests talk to; it delegates each
concern to one collaborator: `Volumes` (PVC binding), `JobController` (Jobs as agent
processes), `Workloads` (Deployments and DaemonSets), `Kubelet` (pods on nodes), `StandIns`
(the in-cluster APIs the node agents would call, as files)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from fleetcache.devtools.simulation.api import Key, Objects
from fleetcache.devtools.simulation.clock import Clock
from fleetcache.devtools.simulation.jobs import JobController
from fleetcache.devtools.simulation.kubelet import Kubelet
from fleetcache.devtools.simulation.node_images import GcResult
from fleetcache.devtools.simulation.nodes import IMAGEFS_CAPACITY, PULL_BANDWIDTH, Node
from fleetcache.devtools.simulation.pods import NodePod
from fleetcache.devtools.simulation.standins import StandIns
from fleetcache.devtools.simulation.storage import Volumes
from fleetcache.devtools.simulation.workloads import Workloads


class Cluster:
    """A cluster's API objects plus the controllers fleetcache relies on, in a directory."""

    def __init__(self, name: str, root: Path, endpoint_override: str | None = None,
                 clock: Clock | None = None):
        """`clock`: the realistic timing's, which finished Jobs' TTLs, image pulls and image GC
        run on (none: Jobs never collected, pulls and GC on the machine's time)."""
        self.name = name
        self.root = root
        self.objects = Objects()
        self.nodes: dict[str, Node] = {}  # none: pods are not placed (the first acts' clusters)
        self.volumes = Volumes(root, self.objects)
        self.job_controller = JobController(root, self.objects, self.volumes, endpoint_override,
                                            clock)
        self.stand_ins = StandIns(root, self.objects, self.nodes, self.label_node)
        self.kubelet = Kubelet(self.objects, self.nodes, self.volumes, self.stand_ins, clock)
        self.workloads = Workloads(root, self.objects, self.nodes, self.volumes, self.kubelet)
        self.terminating: set[Key] = set()  # PVCs deleted while a pod uses them
        root.mkdir(parents=True, exist_ok=True)

    @property
    def endpoint_override(self) -> str | None:
        """Where this cluster's agents fetch from instead of their `--endpoint` (a broken
        mirror in front of it, its own test hub); None: where they are told."""
        return self.job_controller.endpoint_override

    @endpoint_override.setter
    def endpoint_override(self, endpoint: str | None) -> None:
        self.job_controller.endpoint_override = endpoint

    @property
    def pods(self) -> dict[Key, list[NodePod]]:
        """The pods on nodes, by their DaemonSet or Deployment."""
        return self.workloads.pods

    def volume_dir(self, namespace: str, claim: str) -> Path:
        return self.volumes.volume_dir(namespace, claim)

    def claim_mounts(self, namespace: str, pod_spec: dict, container: dict) -> dict[str, str]:
        return self.volumes.claim_mounts(namespace, pod_spec, container)

    # -- the API --------------------------------------------------------------------------------
    def get(self, key: Key) -> dict | None:
        return self.objects.get(key)

    def apply(self, manifest: dict) -> None:
        self.objects.apply(manifest)

    def delete(self, key: Key) -> None:
        """A DELETE. A PVC a pod still uses only turns Terminating (the `kubernetes.io/
        pvc-protection` finalizer): it goes, with its volume, once no pod uses it
        (pkg/controller/volume/pvcprotection)."""
        if key[0] == "PersistentVolumeClaim" and key in self.objects and self.claim_used(key):
            self.terminating.add(key)
            self.objects[key].setdefault("metadata", {}).setdefault(
                "deletionTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            return
        self.terminating.discard(key)
        gone = self.objects.pop(key, None) or {}
        self.volumes.release(key, gone)
        self.stand_ins.forget(key)
        self.workloads.forget(key)
        self.job_controller.forget(key)

    def claim_used(self, claim: Key) -> bool:
        """Whether a pod uses the claim: a running Job attempt mounts it, or a Deployment or
        DaemonSet (whose pods stand for it) has it in its template."""
        if any(run.pod is not None and run.pod.process.poll() is None and claim in run.pod.claims
               for run in self.job_controller.jobs.values()):
            return True
        return any(key[0] in ("Deployment", "DaemonSet") and key[1] == claim[1] and any(
            (volume.get("persistentVolumeClaim") or {}).get("claimName") == claim[2]
            for volume in (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
                "volumes", []))
            for key, obj in self.objects.items())

    # -- controllers --------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        for key in sorted(self.terminating):
            if key not in self.objects or not self.claim_used(key):
                self.delete(key)
            else:  # an apply does not undo a deletion
                self.objects[key].setdefault("metadata", {}).setdefault(
                    "deletionTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        self.stand_ins.sync_slots()
        for key, obj in list(self.objects.items()):
            kind = key[0]
            if kind == "PersistentVolumeClaim":
                self.volumes.bind_claim(key, obj)
            elif kind == "Job":
                self.job_controller.run_job(key, obj, now)
            elif kind == "Deployment":
                obj["status"] = self.workloads.run_deployment(key, obj) if self.nodes else \
                    self.workloads.deployment_status(obj)
            elif kind == "DaemonSet":
                obj["status"] = self.workloads.run_daemonset(key, obj)
        pods = self.workloads.all_pods()
        self.stand_ins.collect(pods)
        self.kubelet.report(pods)

    # -- nodes (design/simulation.md "Nodes") ----------------------------------------------------
    def add_node(self, name: str, labels: Mapping[str, str] | None = None, *,
                 control_plane: bool = False, capacity: str = "1Ti",
                 filesystems: Iterable[str] = (), taints: Iterable[dict] = (),
                 pull_bandwidth: str = PULL_BANDWIDTH, imagefs: str = IMAGEFS_CAPACITY) -> Node:
        """A node joins: a control-plane node carries the role label and its NoSchedule
        taint, as kubeadm sets them; `filesystems` are host paths with a disk of their own;
        `pull_bandwidth` (bytes a second) paces its image pulls, `imagefs` bounds its images
        (image GC)."""
        node = Node.join(name, self.root / "nodes" / name, labels, control_plane=control_plane,
                         capacity=capacity, filesystems=filesystems, taints=taints,
                         pull_bandwidth=pull_bandwidth, imagefs=imagefs)
        self.nodes[name] = node
        self.objects[("Node", "", name)] = node.manifest()
        return node

    def remove_node(self, name: str) -> None:
        """The Node object is deleted (a scaled-in or lost machine); PodGC deletes its pods."""
        self.nodes.pop(name, None)
        self.objects.pop(("Node", "", name), None)
        self.workloads.node_gone(name)

    def label_node(self, name: str, labels: Mapping[str, str | None]) -> None:
        """`kubectl label node NAME k=v k-`."""
        node = self.nodes[name]
        node.relabel(labels)
        self.objects[("Node", "", name)] = node.manifest()

    def cordon_node(self, name: str) -> None:
        """`kubectl cordon NAME`: spec.unschedulable, which the scheduler's NodeUnschedulable
        filter reads (new pods that do not tolerate node.kubernetes.io/unschedulable go
        elsewhere; DaemonSet pods do, and running pods stay)."""
        self.nodes[name].unschedulable = True
        self.objects[("Node", "", name)] = self.nodes[name].manifest()

    def image_gc(self, name: str) -> GcResult:
        """The node's image GC now (it also runs by itself every 5 minutes of the clock)."""
        result = self.kubelet.image_gc(self.nodes[name], self.workloads.all_pods())
        self.objects[("Node", "", name)] = self.nodes[name].manifest()
        return result

    def set_node_ready(self, name: str, ready: bool) -> None:
        self.nodes[name].ready = ready
        self.objects[("Node", "", name)] = self.nodes[name].manifest()

    # -- the end ----------------------------------------------------------------------------------
    def running_pods(self) -> int:
        return self.job_controller.running_pods()

    def stop(self) -> None:
        for key in list(self.job_controller.jobs):
            self.delete(key)
        self.workloads.stop()
