"""The Deployment and DaemonSet controllers of a simulated cluster. Without nodes a Deployment
is available when its engine could start; with nodes both run pods on them, a DaemonSet one
per matching node, a Deployment's placed by the scheduler and rolled on a new template. A
Deployment not available within its progress deadline (compressed) says Progressing False,
ProgressDeadlineExceeded (design/simulation.md, "The clusters", "Nodes" and "Image volumes")."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import time
from collections.abc import Mapping
from pathlib import Path

from fleetcache.devtools.simulation.api import Key, Objects
from fleetcache.devtools.simulation.kubelet import Kubelet
from fleetcache.devtools.simulation.nodes import Node
from fleetcache.devtools.simulation.pods import NodePod
from fleetcache.devtools.simulation.registry_pulls import PullError
from fleetcache.devtools.simulation.scheduling import pod_fits, schedule, tolerates
from fleetcache.devtools.simulation.storage import Volumes, translate
from fleetcache.functions import read

# The progress deadline runs this much faster than written (3600 s: 6 s), as the kubelet's
# CrashLoopBackOff does: a rollout that cannot progress times out within a story's rounds.
DEADLINE_SCALE = 1 / 600
MOUNTED_DELIVERIES = ("cache", "image")  # FLEETCACHE_DELIVERY values whose model is on a mount


def generation_of(resource: dict) -> int:
    """The metadata.generation a controller reports having seen (api.Objects counts it)."""
    return resource.get("metadata", {}).get("generation", 1)


def template_hash(template: Mapping) -> str:
    """pod-template-hash: a changed template is a new generation of pods."""
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def progress_key(deployment: dict) -> tuple[str, str]:
    return deployment["metadata"].get("namespace", ""), deployment["metadata"]["name"]


class Workloads:
    """The pods of each DaemonSet and Deployment (`pods`, by owner), run by `kubelet`."""

    def __init__(self, root: Path, objects: Objects, nodes: Mapping[str, Node], volumes: Volumes,
                 kubelet: Kubelet):
        self.root = root
        self.objects = objects
        self.nodes = nodes
        self.volumes = volumes
        self.kubelet = kubelet
        self.pods: dict[Key, list[NodePod]] = {}  # by DaemonSet or Deployment
        self.pod_serial = 0
        self.progress: dict[tuple[str, str], tuple[str, float]] = {}  # Deployment: (template, last progress)

    def all_pods(self) -> list[NodePod]:
        return [pod for pods in self.pods.values() for pod in pods]

    def model_mounts(self, namespace: str, pod_spec: dict, container: dict) -> dict[str, str]:
        """mountPath -> the directory of each PVC and image volume the container mounts (an
        image pulled here if not present: PullError when it cannot be)."""
        volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
        mounts = self.volumes.claim_mounts(namespace, pod_spec, container)
        for mount in container.get("volumeMounts", []):
            image = volumes.get(mount["name"], {}).get("image")
            if image:
                mounts[mount["mountPath"]] = str(self.kubelet.images.mount(image["reference"]))
        return mounts

    def progressing(self, deployment: dict) -> dict:
        """The Progressing condition of a Deployment not available, as the Deployment
        controller writes it (pkg/controller/deployment/progress.go): its new ReplicaSet
        progresses, and times out once progressDeadlineSeconds (compressed) pass since the
        template changed or was last available."""
        meta, template = deployment["metadata"], deployment["spec"]["template"]
        digest, now = template_hash(template), time.monotonic()
        seen = self.progress.get(progress_key(deployment))
        if seen is None or seen[0] != digest:
            seen = self.progress[progress_key(deployment)] = (digest, now)
        replica_set = f'ReplicaSet "{meta["name"]}-{digest}"'
        deadline = deployment["spec"].get("progressDeadlineSeconds", 600) * DEADLINE_SCALE
        if now - seen[1] > deadline:
            return {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                    "message": f"{replica_set} has timed out progressing."}
        return {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
                "message": f"{replica_set} is progressing."}

    def deployment_status(self, deployment: dict) -> dict:
        """Available when the engine could start: on Cache and Image delivery the model
        directory the environment names must exist on the mounted volume or artifact (a real
        engine would fail), and an image volume must be pulled first."""
        pod_spec = deployment["spec"]["template"]["spec"]
        container = pod_spec["containers"][0]
        env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
        replicas = deployment["spec"].get("replicas", 1)
        if env.get("FLEETCACHE_DELIVERY") in MOUNTED_DELIVERIES:
            try:
                mounts = self.model_mounts(deployment["metadata"]["namespace"], pod_spec, container)
                model_dir = Path(translate(env.get("FLEETCACHE_MODEL", ""), mounts))
                why = "" if (model_dir / "config.json").is_file() else \
                    f"the engine cannot find {env.get('FLEETCACHE_MODEL')}"
            except PullError as err:
                why = f"ErrImagePull: {err}"
            if why:
                return {"replicas": replicas, "unavailableReplicas": replicas, "conditions": [
                    {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable",
                     "message": why}, self.progressing(deployment)]}
        self.progress.pop(progress_key(deployment), None)  # available: the clock starts afresh
        return {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas,
                "updatedReplicas": replicas, "observedGeneration": generation_of(deployment),
                "conditions": [{"type": "Available", "status": "True",
                                "reason": "MinimumReplicasAvailable"}]}

    def run_daemonset(self, key: Key, daemonset: dict) -> dict:
        """One pod per node the template's node affinity and tolerations admit; a node that
        leaves or disappears loses its pod; a new template replaces every pod at once
        (maxUnavailable 100%, all fleetcache's DaemonSets use)."""
        template = daemonset["spec"]["template"]
        digest = template_hash(template)
        eligible = [name for name, node in sorted(self.nodes.items())
                    if pod_fits(template["spec"], node)
                    and tolerates(template["spec"], node, daemon=True)]
        pods = self.pods.setdefault(key, [])
        for pod in list(pods):
            if pod.node not in eligible or pod.template_hash != digest:
                self.delete_pod(pod)
        placed = {pod.node for pod in pods}
        for name in eligible:
            if name not in placed:
                pods.append(self.new_pod(key, template, digest, name))
        for pod in pods:
            self.kubelet.run_pod(pod)
        ready = sum(1 for pod in pods if pod.ready)
        return {"desiredNumberScheduled": len(eligible), "currentNumberScheduled": len(pods),
                "updatedNumberScheduled": len(pods), "numberMisscheduled": 0,
                "numberReady": ready, "numberAvailable": ready,
                "numberUnavailable": len(eligible) - ready, "observedGeneration": generation_of(daemonset)}

    def run_deployment(self, key: Key, deployment: dict) -> dict:
        """Pods scheduled onto nodes (filters: taints, node affinity, volume node affinity;
        score: preferred node affinity), init containers run, the engine available when the
        model directory its environment names holds config.json. A new template rolls: the
        old pods go once the new ones are available (maxSurge 25% rounds up to them all at
        fleetcache's one replica per Deployment)."""
        template = deployment["spec"]["template"]
        digest = template_hash(template)
        replicas = deployment["spec"].get("replicas", 1)
        pods = self.pods.setdefault(key, [])
        current = [pod for pod in pods if pod.template_hash == digest]
        for pod in current[replicas:]:
            self.delete_pod(pod)
        for _ in range(replicas - len(current)):
            pods.append(self.new_pod(key, template, digest, ""))
        for pod in pods:
            if not pod.node:
                pod.node, pod.message = schedule(pod, self.nodes, self.objects)
            if pod.node:
                self.kubelet.run_pod(pod)
        updated = [pod for pod in pods if pod.template_hash == digest]
        if sum(1 for pod in updated if self.available(pod)) >= replicas:
            for pod in [pod for pod in pods if pod.template_hash != digest]:
                self.delete_pod(pod)
        available = min(replicas, sum(1 for pod in pods if self.available(pod)))
        status = {"replicas": len(pods), "readyReplicas": available,
                  "availableReplicas": available, "updatedReplicas": len(updated),
                  "observedGeneration": generation_of(deployment)}
        if available < replicas:
            why = next((pod.message or self.engine_problem(pod) or f"pod {pod.name} is not ready"
                        for pod in updated if not self.available(pod)), "")
            status.update(unavailableReplicas=replicas - available, conditions=[
                {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable",
                 "message": why}, self.progressing(deployment)])
        else:
            self.progress.pop(progress_key(deployment), None)
            status["conditions"] = [{"type": "Available", "status": "True",
                                     "reason": "MinimumReplicasAvailable"}]
        return status

    def available(self, pod: NodePod) -> bool:
        return pod.ready and not self.engine_problem(pod)

    @staticmethod
    def engine_problem(pod: NodePod) -> str:
        """Why the engine would not start: the model directory its environment names (through
        the pod's mounts and the link `select` wrote) lacks config.json."""
        if pod.phase != "Running" or not pod.containers:
            return ""
        engine = pod.containers[0]
        if engine.env.get("FLEETCACHE_DELIVERY") not in (*MOUNTED_DELIVERIES, "node"):
            return ""
        model = engine.env.get("FLEETCACHE_MODEL", "")
        if (Path(model) / "config.json").is_file():
            return ""
        return f"the engine cannot find {engine.spec_env.get('FLEETCACHE_MODEL', model)}"

    def new_pod(self, owner: Key, template: dict, digest: str, node: str) -> NodePod:
        self.pod_serial += 1
        name = f"{owner[2]}-{digest[:5]}-{self.pod_serial}"
        directory = self.root / "pods" / name
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        return NodePod(name, owner[1], node, owner, digest, copy.deepcopy(template["spec"]),
                       dict(read.get_path(template, "metadata.labels", {}) or {}), directory)

    def delete_pod(self, pod: NodePod) -> None:
        pod.stop()
        if pod in self.pods.get(pod.owner, []):
            self.pods[pod.owner].remove(pod)
        self.objects.pop(("Pod", pod.namespace, pod.name), None)

    def forget(self, owner: Key) -> None:
        """A deleted DaemonSet or Deployment: its pods go with it."""
        for pod in list(self.pods.pop(owner, [])):
            self.delete_pod(pod)

    def node_gone(self, name: str) -> None:
        """PodGC: the pods of a deleted node are deleted."""
        for pods in self.pods.values():
            for pod in [p for p in pods if p.node == name]:
                self.delete_pod(pod)

    def stop(self) -> None:
        for pods in list(self.pods.values()):
            for pod in list(pods):
                self.delete_pod(pod)
