"""The engine of one ModelReplica on its cluster: a one-pod Deployment under Pod Security
`restricted` and its Service, named and labelled for the replica.

compose-model-replica says what the pod is told and what it mounts (`Pod`: the environment
contract of DESIGN.md §3, the model's volumes, on Node the select init container and the
affinity on warm nodes); this module wraps that in what every engine pod gets under a
read-only root: writable emptyDirs for /tmp and $HOME, a memory-backed /dev/shm, the
writable-path defaults, the agent's uid. What real engines need to run under `restricted` is
written down in design/engines.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetcache.functions import naming
from fleetcache.functions.k8s import agent_job

ENGINE_UID = agent_job.AGENT_UID  # the agent's uid: the engine reads its files without a chown
ENGINE_HOME = "/home/fleetcache"
# Written only where the user has not set them: they point every cache an engine keeps
# (Hugging Face, torch, triton, vLLM) at writable emptyDirs under a read-only root.
# USER/LOGNAME: the uid has no passwd entry, and getpass.getuser() (torch inductor's cache
# path) reads these before it would fail on the lookup.
WRITABLE_ENV = (
    ("HOME", ENGINE_HOME),
    ("USER", "fleetcache"),
    ("LOGNAME", "fleetcache"),
    ("TMPDIR", "/tmp"),
    ("XDG_CACHE_HOME", f"{ENGINE_HOME}/.cache"),
    ("XDG_CONFIG_HOME", f"{ENGINE_HOME}/.config"),
    ("HF_HOME", f"{ENGINE_HOME}/.cache/huggingface"),
)
AVAILABLE_QUERY = ("has(object.status) && has(object.status.conditions) && "
                   "object.status.conditions.exists(c, c.type == 'Available' && "
                   "c.status == 'True')")
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_DEPLOYMENT = f"{naming.GROUP}/model-deployment"
LABEL_REPLICA = f"{naming.GROUP}/model-replica"
LABEL_DELIVERY = f"{naming.GROUP}/delivery"


@dataclass(frozen=True)
class Container:
    """The serving engine's container template, as its pod runs it (a ModelDeployment's
    spec.engine, read with its defaults by views/model_replica.py Engine)."""

    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[dict, ...]
    resources: dict
    port: int
    readiness_path: str
    shared_memory_size: str | None


@dataclass(frozen=True)
class Pod:
    """What a replica puts into its engine's pod: the environment contract of DESIGN.md §3,
    the model's volumes and their mounts, and on Node the select init container and the
    affinity on warm nodes (node_tier/delivery.py builds those)."""

    delivery: str  # Node | Cache | Source: the pod's delivery label, lower-cased
    env: list[dict]
    volumes: list[dict] = field(default_factory=list)
    mounts: list[dict] = field(default_factory=list)
    init_containers: list[dict] = field(default_factory=list)
    affinity: dict | None = None


def labels_of(replica: str, deployment: str, cluster: str) -> dict[str, str]:
    return {naming.LABEL_MANAGED_BY: "fleetcache", naming.LABEL_COMPONENT: "engine",
            LABEL_REPLICA: naming.label_value(replica),
            LABEL_DEPLOYMENT: naming.label_value(deployment),
            naming.LABEL_CLUSTER: naming.label_value(cluster)}


def remote_name(replica: str) -> str:
    """The Deployment's and Service's name on the cluster: a DNS-1035 label (a Service
    name must start with a letter)."""
    return replica if DNS_1035.match(replica) and len(replica) <= 63 \
        else naming.child_name("replica", replica)


def engine_env(pod: Pod, engine: Container) -> list[dict]:
    """The environment contract of DESIGN.md §3, then writable-path defaults, then the
    user's env (last, so its $(VAR) references can use the contract's variables)."""
    env = [dict(e) for e in pod.env]
    user_names = {e["name"] for e in engine.env}
    env += [{"name": n, "value": v} for n, v in WRITABLE_ENV if n not in user_names]
    return env + [dict(e) for e in engine.env]


def pod_volumes(pod: Pod, engine: Container) -> tuple[list[dict], list[dict]]:
    """(volumes, mounts): writable emptyDirs for /tmp and $HOME, memory-backed /dev/shm,
    then the model's (on Cache the model cache PVC, read-only at both the pod and the
    container; on Node the node PVC and the cluster PVC, both read-only, and the link's
    emptyDir)."""
    shm: dict[str, Any] = {"medium": "Memory"}
    if engine.shared_memory_size:
        shm["sizeLimit"] = engine.shared_memory_size
    volumes = [{"name": "tmp", "emptyDir": {}}, {"name": "home", "emptyDir": {}},
               {"name": "dshm", "emptyDir": shm}]
    mounts = [{"name": "tmp", "mountPath": "/tmp"}, {"name": "home", "mountPath": ENGINE_HOME},
              {"name": "dshm", "mountPath": "/dev/shm"}]
    return volumes + list(pod.volumes), mounts + list(pod.mounts)


def deployment_manifest(name: str, namespace: str, labels: Mapping[str, str], engine: Container,
                        pod: Pod) -> dict:
    """A one-pod Deployment of the engine under Pod Security `restricted`."""
    volumes, mounts = pod_volumes(pod, engine)
    container: dict[str, Any] = {
        "name": "engine",
        "image": engine.image,
        "imagePullPolicy": "IfNotPresent",
        "args": list(engine.args),
        "env": engine_env(pod, engine),
        "ports": [{"name": "http", "containerPort": engine.port, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": engine.readiness_path, "port": "http"},
                           "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3},
        "securityContext": dict(agent_job.RESTRICTED_CONTAINER_SECURITY),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": mounts,
    }
    if engine.command:
        container["command"] = list(engine.command)
    if engine.resources:
        container["resources"] = dict(engine.resources)
    pod_labels = {**labels, LABEL_DELIVERY: pod.delivery.lower()}
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": ENGINE_UID,
            "runAsGroup": ENGINE_UID,
            "fsGroup": ENGINE_UID,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": volumes,
    }
    if pod.init_containers:
        pod_spec["initContainers"] = list(pod.init_containers)
    if pod.affinity:
        pod_spec["affinity"] = pod.affinity
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {LABEL_REPLICA: labels[LABEL_REPLICA]}},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "progressDeadlineSeconds": 3600,
            "revisionHistoryLimit": 2,
            "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
        },
    }


def service_manifest(name: str, namespace: str, labels: Mapping[str, str], engine: Container) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {"type": "ClusterIP",
                 "selector": {LABEL_REPLICA: labels[LABEL_REPLICA]},
                 "ports": [{"name": "http", "port": engine.port, "targetPort": "http",
                            "protocol": "TCP"}]},
    }
