"""compose-model-replica: run one replica of a model's engine on its cluster.

Lifecycle, top to bottom:
1. read the spec the ModelDeployment wrote (cluster, delivery, model, cache, engine) and
   ask Crossplane for the replica's FleetCluster;
2. Wait and Fail compose nothing on the cluster: the replica reports Waiting (with the
   hydration's progress) or Failed (with the hydration's reason and remedy);
3. Cache and Source compose, through provider-kubernetes Objects on that cluster, the
   namespace (create only, never deleted), a one-pod Deployment of the engine carrying
   the environment contract of DESIGN.md §3, and a Service;
4. report: the replica is ready when its Deployment is available (a CEL readiness query
   on the Object).

The engine is told where the model is through environment variables only, so one
command line (`--model=$(FLEETCACHE_MODEL)`) serves both deliveries. What real engines
need to run under Pod Security `restricted` is written down in design/engines.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from fleetcache.agent.layout import HUB_DIR, repo_folder
from fleetcache.functions import kit

FLEET_CLUSTER_KEY = "fleet-cluster"
REMOTE_KEYS = ("namespace", "deployment", "service")
DELIVERIES = ("Cache", "Source", "Wait", "Fail")

ENGINE_UID = kit.AGENT_UID  # the agent's uid: the engine reads its files without a chown
ENGINE_HOME = "/home/fleetcache"
DEFAULT_PORT = 8000
DEFAULT_READINESS_PATH = "/health"
RESERVED_ENV = ("FLEETCACHE_MODEL", "FLEETCACHE_MODEL_REVISION", "FLEETCACHE_DELIVERY",
                "HF_HUB_CACHE", "HF_HUB_OFFLINE")
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
LABEL_DEPLOYMENT = f"{kit.GROUP}/model-deployment"
LABEL_REPLICA = f"{kit.GROUP}/model-replica"
LABEL_DELIVERY = f"{kit.GROUP}/delivery"


# --- 1. inputs ----------------------------------------------------------------------------


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise kit.InputError(f"{where} must be a list of strings")
    return tuple(value)


def _mapping(value: Any, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise kit.InputError(f"{where} must be an object")
    return dict(value)


def _integer(value: Any, where: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise kit.InputError(f"{where}: {value!r} must be an integer from {low} to {high}")
    return value


@dataclass(frozen=True)
class Engine:
    """The serving engine's container template, normalized with its defaults."""

    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[dict, ...]
    resources: dict
    port: int
    readiness_path: str
    shared_memory_size: str | None

    @classmethod
    def of(cls, value: Any, where: str = "spec.engine") -> "Engine":
        if not isinstance(value, Mapping):
            raise kit.InputError(f"{where} is required: set at least image (and args, for "
                                 "example --model=$(FLEETCACHE_MODEL))")
        image = value.get("image")
        if not isinstance(image, str) or not image.strip() or any(c.isspace() for c in image):
            raise kit.InputError(f"{where}.image: {image!r} must be a container image "
                                 "reference, for example vllm/vllm-openai:v0.11.0")
        env = value.get("env") or []
        if not isinstance(env, list):
            raise kit.InputError(f"{where}.env must be a list of {{name, value}} or "
                                 "{name, valueFrom} entries")
        for index, entry in enumerate(env):
            name = entry.get("name") if isinstance(entry, Mapping) else None
            if not isinstance(name, str) or not name or "=" in name:
                raise kit.InputError(f"{where}.env[{index}].name must be a variable name")
            if name in RESERVED_ENV:
                raise kit.InputError(f"{where}.env[{index}]: {name} is set by fleetcache "
                                     "from the delivery; remove it from spec.engine.env")
        shm = value.get("sharedMemorySize")
        if shm is not None:
            kit.quantity_bytes(shm, f"{where}.sharedMemorySize")
        path = value.get("readinessPath", DEFAULT_READINESS_PATH)
        if not isinstance(path, str) or not path.startswith("/"):
            raise kit.InputError(f"{where}.readinessPath: {path!r} must be an HTTP path "
                                 "starting with /")
        return cls(
            image=image,
            command=_strings(value.get("command"), f"{where}.command"),
            args=_strings(value.get("args"), f"{where}.args"),
            env=tuple(dict(e) for e in env),
            resources=_mapping(value.get("resources"), f"{where}.resources"),
            port=_integer(value.get("port", DEFAULT_PORT), f"{where}.port", 1, 65535),
            readiness_path=path,
            shared_memory_size=str(shm) if shm is not None else None,
        )

    def as_spec(self) -> dict:
        spec: dict[str, Any] = {"image": self.image, "args": list(self.args),
                                "env": [dict(e) for e in self.env], "port": self.port,
                                "readinessPath": self.readiness_path}
        if self.command:
            spec["command"] = list(self.command)
        if self.resources:
            spec["resources"] = dict(self.resources)
        if self.shared_memory_size:
            spec["sharedMemorySize"] = self.shared_memory_size
        return spec


@dataclass(frozen=True)
class CacheMount:
    """Where the warm cache is: the PVC on the cluster and the snapshot inside it."""

    model_cache: str
    volume: str
    mount_path: str
    snapshot_path: str
    commit: str

    @classmethod
    def of(cls, value: Any, where: str = "spec.cache") -> "CacheMount":
        if not isinstance(value, Mapping):
            raise kit.InputError(f"{where} is required when spec.delivery is Cache")
        fields = {}
        for key in ("modelCacheName", "volumeName", "mountPath", "snapshotPath", "commit"):
            if not isinstance(value.get(key), str) or not value[key]:
                raise kit.InputError(f"{where}.{key} is required when spec.delivery is Cache")
            fields[key] = value[key]
        if not fields["snapshotPath"].startswith(fields["mountPath"].rstrip("/") + "/"):
            raise kit.InputError(f"{where}.snapshotPath must lie under {where}.mountPath")
        return cls(fields["modelCacheName"], fields["volumeName"], fields["mountPath"],
                   fields["snapshotPath"], fields["commit"])

    def as_spec(self) -> dict:
        return {"modelCacheName": self.model_cache, "volumeName": self.volume,
                "mountPath": self.mount_path, "snapshotPath": self.snapshot_path,
                "commit": self.commit}


def hf_hub_cache(mount_path: str) -> str:
    """HF_HUB_CACHE on the volume: the agent's `hub/` directory, its bookkeeping kept beside it."""
    return f"{mount_path.rstrip('/')}/{HUB_DIR}"


def hf_snapshot_path(mount_path: str, repo: str, commit: str) -> str:
    """The Hugging Face cache layout the agent writes: hub/models--ORG--NAME/snapshots/<commit>."""
    return f"{hf_hub_cache(mount_path)}/{repo_folder(repo)}/snapshots/{commit}"


@dataclass(frozen=True)
class ReplicaSpec:
    name: str
    namespace: str
    deployment: str
    index: int
    cluster: str
    delivery: str
    repo: str
    revision: str
    commit: str
    cache: CacheMount | None
    hydration: dict
    engine: Engine

    @property
    def model(self) -> str:
        """FLEETCACHE_MODEL: the snapshot directory on Cache, org/repo on Source."""
        return self.cache.snapshot_path if self.cache else self.repo

    @property
    def model_revision(self) -> str:
        """FLEETCACHE_MODEL_REVISION: the pinned commit, else the revision asked for."""
        if self.cache:
            return self.cache.commit
        return self.commit or self.revision


def read_spec(request: kit.Request) -> ReplicaSpec:
    spec = request.spec
    if not spec:
        raise kit.InputError("spec is required: a ModelReplica is written by its "
                             "ModelDeployment; do not create one by hand")
    cluster = spec.get("clusterName")
    if not isinstance(cluster, str) or not cluster:
        raise kit.InputError("spec.clusterName is required: the FleetCluster to run on")
    kit.object_name(cluster, "spec.clusterName")
    delivery = spec.get("delivery")
    if delivery not in DELIVERIES:
        raise kit.InputError(f"spec.delivery: {delivery!r} is not one of "
                             f"{', '.join(DELIVERIES)}")
    model = _mapping(spec.get("model"), "spec.model")
    for key in ("repo", "revision", "commit"):
        if not isinstance(model.get(key, ""), str):
            raise kit.InputError(f"spec.model.{key} must be a string")
    hydration = _mapping(spec.get("hydration"), "spec.hydration")
    return ReplicaSpec(
        name=request.name,
        namespace=request.namespace,
        deployment=str(spec.get("deploymentName") or ""),
        index=_integer(spec.get("replica", 0), "spec.replica", 0, 999),
        cluster=cluster,
        delivery=delivery,
        repo=model.get("repo", ""),
        revision=model.get("revision", "") or "main",
        commit=model.get("commit", ""),
        cache=CacheMount.of(spec.get("cache")) if delivery == "Cache" else None,
        hydration=hydration,
        engine=Engine.of(spec.get("engine")),
    )


# --- 2. waiting and failed replicas -------------------------------------------------------


def hydration_progress(hydration: Mapping, cluster: str) -> str:
    phase = str(hydration.get("phase") or "Pending")
    done, total = kit.as_int(hydration.get("bytesDone")), kit.as_int(hydration.get("bytesTotal"))
    text = f"waiting for the model cache on cluster {cluster}: {phase}"
    if total > 0:
        text += f", {kit.human_bytes(min(done, total))} of {kit.human_bytes(total)} " \
                f"({done * 100 // total}%)"
    detail = str(hydration.get("message") or "")
    return f"{text} ({detail})" if detail else text


def hydration_failure(hydration: Mapping, cluster: str) -> tuple[str, str]:
    """The message for a Fail replica: the hydration's own reason and remedy."""
    cause = str(hydration.get("reason") or "")
    detail = str(hydration.get("message") or "")
    text = f"the model cache failed to hydrate on cluster {cluster}"
    if cause:
        text += f" ({cause})"
    if detail:
        return "HydrationFailed", f"{text}: {detail}"
    return "HydrationFailed", kit.with_remedy(text, cause or "HydrationFailed")


# --- 3. the engine on its cluster ---------------------------------------------------------


def labels_of(spec: ReplicaSpec) -> dict[str, str]:
    labels = {kit.LABEL_MANAGED_BY: "fleetcache", kit.LABEL_COMPONENT: "engine",
              LABEL_REPLICA: kit.label_value(spec.name),
              kit.LABEL_CLUSTER: kit.label_value(spec.cluster)}
    if spec.deployment:
        labels[LABEL_DEPLOYMENT] = kit.label_value(spec.deployment)
    return labels


def engine_env(spec: ReplicaSpec) -> list[dict]:
    """The environment contract of DESIGN.md §3, then writable-path defaults, then the
    user's env (last, so its $(VAR) references can use the contract's variables)."""
    env = [{"name": "FLEETCACHE_MODEL", "value": spec.model},
           {"name": "FLEETCACHE_MODEL_REVISION", "value": spec.model_revision},
           {"name": "FLEETCACHE_DELIVERY", "value": spec.delivery.lower()}]
    if spec.cache:
        env += [{"name": "HF_HUB_CACHE", "value": hf_hub_cache(spec.cache.mount_path)},
                {"name": "HF_HUB_OFFLINE", "value": "1"}]
    user_names = {e["name"] for e in spec.engine.env}
    env += [{"name": n, "value": v} for n, v in WRITABLE_ENV if n not in user_names]
    return env + [dict(e) for e in spec.engine.env]


def pod_volumes(spec: ReplicaSpec) -> tuple[list[dict], list[dict]]:
    """(volumes, mounts): writable emptyDirs for /tmp and $HOME, memory-backed /dev/shm,
    and on Cache the model cache PVC, read-only at both the pod and the container."""
    shm: dict[str, Any] = {"medium": "Memory"}
    if spec.engine.shared_memory_size:
        shm["sizeLimit"] = spec.engine.shared_memory_size
    volumes = [{"name": "tmp", "emptyDir": {}}, {"name": "home", "emptyDir": {}},
               {"name": "dshm", "emptyDir": shm}]
    mounts = [{"name": "tmp", "mountPath": "/tmp"}, {"name": "home", "mountPath": ENGINE_HOME},
              {"name": "dshm", "mountPath": "/dev/shm"}]
    if spec.cache:
        volumes.append({"name": "model-cache", "persistentVolumeClaim": {
            "claimName": spec.cache.volume, "readOnly": True}})
        mounts.append({"name": "model-cache", "mountPath": spec.cache.mount_path,
                       "readOnly": True})
    return volumes, mounts


def deployment_manifest(spec: ReplicaSpec, name: str) -> dict:
    """A one-pod Deployment of the engine under Pod Security `restricted`."""
    labels = labels_of(spec)
    volumes, mounts = pod_volumes(spec)
    engine = spec.engine
    container: dict[str, Any] = {
        "name": "engine",
        "image": engine.image,
        "imagePullPolicy": "IfNotPresent",
        "args": list(engine.args),
        "env": engine_env(spec),
        "ports": [{"name": "http", "containerPort": engine.port, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": engine.readiness_path, "port": "http"},
                           "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3},
        "securityContext": dict(kit.RESTRICTED_CONTAINER_SECURITY),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": mounts,
    }
    if engine.command:
        container["command"] = list(engine.command)
    if engine.resources:
        container["resources"] = dict(engine.resources)
    pod_labels = {**labels, LABEL_DELIVERY: spec.delivery.lower()}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": spec.namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {LABEL_REPLICA: labels[LABEL_REPLICA]}},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "progressDeadlineSeconds": 3600,
            "revisionHistoryLimit": 2,
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
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
                },
            },
        },
    }


def service_manifest(spec: ReplicaSpec, name: str) -> dict:
    labels = labels_of(spec)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": spec.namespace, "labels": labels},
        "spec": {"type": "ClusterIP",
                 "selector": {LABEL_REPLICA: labels[LABEL_REPLICA]},
                 "ports": [{"name": "http", "port": spec.engine.port, "targetPort": "http",
                            "protocol": "TCP"}]},
    }


def remote_name(replica: str) -> str:
    """The Deployment's and Service's name on the cluster: a DNS-1035 label (a Service
    name must start with a letter)."""
    return replica if DNS_1035.match(replica) and len(replica) <= 63 \
        else kit.child_name("replica", replica)


def compose_engine(spec: ReplicaSpec, cluster: kit.FleetClusterView,
                   outcome: kit.Outcome) -> str:
    name = remote_name(spec.name)

    def remote(what: str, manifest: dict, **kwargs: Any) -> None:
        outcome.compose(what, kit.remote_object(
            kit.child_name(spec.name, what), spec.namespace, manifest, cluster.provider_config,
            labels={LABEL_REPLICA: kit.label_value(spec.name)}, **kwargs))

    remote("namespace", kit.namespace_manifest(spec.namespace),
           management_policies=kit.CREATE_ONLY)
    remote("deployment", deployment_manifest(spec, name), readiness_query=AVAILABLE_QUERY)
    remote("service", service_manifest(spec, name))
    return name


# --- 4. report ----------------------------------------------------------------------------


def engine_state(request: kit.Request, cluster: str, name: str) -> tuple[str, str, str]:
    """(phase, reason, message) of the composed engine, from its Deployment Object."""
    observed = request.observed.get("deployment")
    if kit.is_true(observed, "Ready"):
        return "Ready", "Available", f"Deployment {name} is available on cluster {cluster}"
    progressing = kit.condition_of(kit.remote_manifest(observed), "Progressing")
    if progressing.get("status") == "False":
        reason = str(progressing.get("reason") or "NotProgressing")
        return "Pending", reason, (f"Deployment {name} on cluster {cluster} is not "
                                   f"progressing: {progressing.get('message', '')}").rstrip(": ")
    return "Pending", "Starting", (f"waiting for Deployment {name} on cluster {cluster} to "
                                   "become available (pulling the image, loading the model)")


def compose(request: kit.Request) -> kit.Outcome:
    outcome = kit.Outcome()
    spec = read_spec(request)
    outcome.require(FLEET_CLUSTER_KEY, kit.fleet_cluster_requirement(spec.cluster))
    status: dict[str, Any] = {"clusterName": spec.cluster, "delivery": spec.delivery}
    outcome.status = status
    outcome.composite_ready = False

    def phase(value: str, reason: str, message: str) -> kit.Outcome:
        status.update({"phase": value, "reason": reason, "message": message})
        return outcome

    if spec.delivery == "Wait":
        return phase("Waiting", "Hydrating", hydration_progress(spec.hydration, spec.cluster))
    if spec.delivery == "Fail":
        return phase("Failed", *hydration_failure(spec.hydration, spec.cluster))
    if not spec.model:
        return phase("Pending", "ModelUnknown",
                     "no model to load: the ModelDeployment's modelCacheRef names no "
                     "ModelCache and no model was ever resolved for it")

    clusters = request.required.get(FLEET_CLUSTER_KEY)
    if clusters is None:  # not fetched yet: keep what runs
        kit.carry_over(request, outcome, REMOTE_KEYS)
        return phase("Pending", "Resolving", f"looking up FleetCluster {spec.cluster}")
    view = kit.FleetClusterView.of(clusters[0]) if clusters else None
    if view is None or not view.ready:
        reason = "ClusterNotFound" if view is None else "ClusterNotReady"
        kit.carry_over(request, outcome, REMOTE_KEYS)
        return phase("Pending", reason, kit.with_remedy(
            f"FleetCluster {spec.cluster} " + ("does not exist" if view is None
                                               else "is not Ready"), reason))

    name = compose_engine(spec, view, outcome)
    status["endpoint"] = f"{name}.{spec.namespace}.svc:{spec.engine.port}"
    status["model"] = {"name": spec.model, "revision": spec.model_revision}
    value, reason, message = engine_state(request, spec.cluster, name)
    outcome.composite_ready = value == "Ready"
    return phase(value, reason, message)
