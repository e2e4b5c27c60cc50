"""What keeping a cache's engine images on a pool composes on its cluster, as Kubernetes
manifests (node_tier/image_keepers.py composes them; design/engine-images.md): the keeper
DaemonSet, one pod per opted-in pool node that pulls every image at its pinned digest and
keeps it in use; the reporter Deployment that sums the keeper pods into the status
ConfigMap; their ServiceAccounts, the reporter's Role, and the binding to the warm-slot Role.

Two pod shapes. Where the FleetCluster mounts image volumes, each image is a read-only image
volume of the `keeper` container: the kubelet pulls it at pod setup and nothing of it runs.
Elsewhere each image is an init container `pull-<i>` that runs the entry's command (it must
exit 0), after a `slot` sidecar took one of the cluster's warm slots, so at most the pool's
maxConcurrentNodes nodes pull at once; the exited init containers stay in the runtime while
the pod lives, which is what keeps their images from the kubelet's image GC."""

from __future__ import annotations

from dataclasses import dataclass

from fleetcache import shapes
from fleetcache.functions import naming
from fleetcache.functions.k8s import agent_job
from fleetcache.functions.node_tier.warmer_inputs import Hydration, NodeCache
from fleetcache.functions.node_tier.warmer_names import SLOTS_ROLE, SYSTEM_NAMESPACE

STATE_DIR = "/var/run/fleetcache-images"  # the keeper's `done` and the sidecar's `slot`
IMAGE_MOUNT = "/var/lib/fleetcache-images"  # <i>: image volume i, read-only
KEEPER_COMPONENT = "image-keeper"
REPORTER_COMPONENT = "image-reporter"
PULL_DEADLINE_SECONDS = 1800  # a slot is held at most this long by one node's pulls
RBAC = "rbac.authorization.k8s.io"


@dataclass(frozen=True)
class PinnedImage:
    """One spec.images entry of the hydration, with the digest the fleet pinned."""

    image: str
    digest: str
    pull_policy: str = "IfNotPresent"
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    pull_secret: tuple[str, str] | None = None  # (name, key) of spec.images[].pullSecretRef

    @property
    def reference(self) -> str:
        return shapes.image_by_digest(self.image, self.digest)


def keeper_selector(cache: str) -> dict[str, str]:
    """The labels of a cache's keeper pods (its reporter lists them; replicas prefer their nodes)."""
    return {naming.LABEL_COMPONENT: KEEPER_COMPONENT, naming.LABEL_MODEL_CACHE: naming.label_value(cache)}


@dataclass(frozen=True)
class ImageNames:
    hydration: Hydration

    @property
    def keeper(self) -> str:
        """DaemonSet and ServiceAccount."""
        return f"{self.hydration.cache}-images"

    @property
    def reporter(self) -> str:
        """Deployment, ServiceAccount, Role, RoleBinding and the status ConfigMap."""
        return f"{self.hydration.cache}-images-status"

    @property
    def slots_binding(self) -> str:
        return f"{self.hydration.namespace}-{self.hydration.cache}-image-slots"

    @property
    def keeper_selector(self) -> dict[str, str]:
        return keeper_selector(self.hydration.cache)

    def object(self, key: str) -> str:
        return naming.child_name(self.hydration.name, key)

    def pull_secret(self, index: int) -> str:
        """The copy of the index-th pull secret the images name (pull_secrets), on the cluster."""
        return f"{self.hydration.cache}-images-pull-{index}"


def pull_secrets(images: tuple[PinnedImage, ...]) -> list[tuple[str, str]]:
    """(name, key) of each pull secret the images name, once each, in order: the keeper pods'
    imagePullSecrets, each a copy the hydration composes."""
    return list(dict.fromkeys(p.pull_secret for p in images if p.pull_secret))


def status_manifest(h: Hydration, names: ImageNames) -> dict:
    """The reporter's summary (`status.json`); created empty, then only the reporter writes."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": names.reporter, "namespace": h.namespace, "labels": dict(h.labels)}}


def access_manifests(h: Hydration, names: ImageNames, image_volumes: bool) -> list[dict]:
    """The keeper's and the reporter's ServiceAccounts, the reporter's Role (list the keeper
    pods and their events, patch its one ConfigMap) and binding, and without image volumes
    the keeper's binding to the warm-slot Role in fleetcache-system."""
    def account(name: str) -> dict:
        return {"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": h.namespace, "labels": dict(h.labels)},
                "automountServiceAccountToken": False}

    reporter_meta = {"name": names.reporter, "namespace": h.namespace, "labels": dict(h.labels)}
    manifests = [
        account(names.keeper), account(names.reporter),
        {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": dict(reporter_meta), "rules": [
            {"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["list"]},
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [names.reporter],
             "verbs": ["get", "patch"]}]},
        {"apiVersion": f"{RBAC}/v1", "kind": "RoleBinding", "metadata": dict(reporter_meta),
         "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": names.reporter},
         "subjects": [{"kind": "ServiceAccount", "name": names.reporter, "namespace": h.namespace}]},
    ]
    if not image_volumes:
        manifests.append(
            {"apiVersion": f"{RBAC}/v1", "kind": "RoleBinding",
             "metadata": {"name": names.slots_binding, "namespace": SYSTEM_NAMESPACE,
                          "labels": dict(h.labels)},
             "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": SLOTS_ROLE},
             "subjects": [{"kind": "ServiceAccount", "name": names.keeper, "namespace": h.namespace}]})
    return manifests


def agent_container(name: str, image: str, args: list[str], mounts: list[dict], *,
                    env: tuple[dict, ...] = ()) -> dict:
    return {"name": name, "image": image, "imagePullPolicy": "IfNotPresent",
            "command": ["fleetcache-agent"], "args": args,
            "env": [*env, {"name": "HOME", "value": "/tmp"}, {"name": "TMPDIR", "value": "/tmp"}],
            "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
            "securityContext": dict(agent_job.RESTRICTED_CONTAINER_SECURITY),
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "volumeMounts": [*mounts, {"name": "tmp", "mountPath": "/tmp"}]}


def pull_container(index: int, pinned: PinnedImage) -> dict:
    """The image's own command, run once on the node: it pulls the image and proves it
    starts. Restricted, no GPU, no token, no volume but a scratch /tmp; its root filesystem
    stays writable, as an engine's command may expect."""
    return {"name": f"pull-{index}", "image": pinned.reference, "imagePullPolicy": pinned.pull_policy,
            "command": list(pinned.command), "args": list(pinned.args),
            "env": [{"name": "HOME", "value": "/tmp"}, {"name": "TMPDIR", "value": "/tmp"},
                    {"name": "XDG_CACHE_HOME", "value": "/tmp/.cache"}],
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}},
            "securityContext": {**agent_job.RESTRICTED_CONTAINER_SECURITY, "readOnlyRootFilesystem": False},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}


def keeper_manifest(h: Hydration, names: ImageNames, node_cache: NodeCache, agent_image: str,
                    images: tuple[PinnedImage, ...], image_volumes: bool) -> dict:
    """One keeper pod per opted-in pool node (the pool's affinity, as the warmers')."""
    state: dict = {"name": "state", "mountPath": STATE_DIR}
    volumes: list[dict] = [{"name": "state", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}]
    init: list[dict] = []
    keeper_mounts: list[dict] = [state]
    if image_volumes:
        for index, pinned in enumerate(images):
            volumes.append({"name": f"image-{index}", "image": {
                "reference": pinned.reference, "pullPolicy": pinned.pull_policy}})
            keeper_mounts.append({"name": f"image-{index}", "mountPath": f"{IMAGE_MOUNT}/{index}",
                                  "readOnly": True})
    else:
        volumes.append(agent_job.api_token_volume())
        node = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                                "fieldPath": "spec.nodeName"}}}
        slot = agent_container(
            "slot", agent_image,
            ["image-slot", "--state", STATE_DIR, "--slots-namespace", SYSTEM_NAMESPACE,
             "--holder", f"{h.namespace}/{h.cache}/$(NODE_NAME)",
             "--pull-deadline", str(PULL_DEADLINE_SECONDS)],
            [state, {"name": "token", "mountPath": agent_job.API_TOKEN_MOUNT, "readOnly": True}], env=(node,))
        slot["restartPolicy"] = "Always"  # a sidecar: it holds the slot while the pulls run
        slot["startupProbe"] = {"exec": {"command": ["fleetcache-agent", "image-slot", "--state",
                                                     STATE_DIR, "--held"]},
                                "periodSeconds": 5, "timeoutSeconds": 10, "failureThreshold": 8640}
        init = [slot, *(pull_container(i, pinned) for i, pinned in enumerate(images))]
    pod: dict = {
        "serviceAccountName": names.keeper,
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": agent_job.AGENT_UID,
                            "runAsGroup": agent_job.AGENT_UID,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": node_cache.pool}},
        "containers": [agent_container("keeper", agent_image, ["image-keep", "--state", STATE_DIR],
                                       keeper_mounts)],
        "volumes": volumes,
    }
    if init:
        pod["initContainers"] = init
    if secrets := pull_secrets(images):
        pod["imagePullSecrets"] = [{"name": names.pull_secret(i)} for i in range(len(secrets))]
    if node_cache.tolerations:
        pod["tolerations"] = [dict(t) for t in node_cache.tolerations]
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": names.keeper, "namespace": h.namespace, "labels": dict(h.labels)},
            "spec": {"selector": {"matchLabels": names.keeper_selector},
                     "updateStrategy": {"type": "RollingUpdate",
                                        "rollingUpdate": {"maxUnavailable": "100%"}},
                     "template": {"metadata": {"labels": {**h.labels, **names.keeper_selector}},
                                  "spec": pod}}}


def reporter_manifest(h: Hydration, names: ImageNames, agent_image: str) -> dict:
    """One small pod anywhere on the cluster that sums the keeper pods: a keeper that cannot
    pull never runs a container, so it cannot report on itself."""
    selector = {naming.LABEL_COMPONENT: REPORTER_COMPONENT,
                naming.LABEL_MODEL_CACHE: naming.label_value(h.cache)}
    keepers = ",".join(f"{k}={v}" for k, v in sorted(names.keeper_selector.items()))
    container = agent_container(
        "reporter", agent_image,
        ["image-status", "--namespace", h.namespace, "--selector", keepers,
         "--configmap", f"{h.namespace}/{names.reporter}"],
        [{"name": "token", "mountPath": agent_job.API_TOKEN_MOUNT, "readOnly": True}])
    pod = {"serviceAccountName": names.reporter, "automountServiceAccountToken": False,
           "securityContext": {"runAsNonRoot": True, "runAsUser": agent_job.AGENT_UID,
                               "runAsGroup": agent_job.AGENT_UID,
                               "seccompProfile": {"type": "RuntimeDefault"}},
           "containers": [container],
           "volumes": [agent_job.api_token_volume(), {"name": "tmp", "emptyDir": {}}]}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": names.reporter, "namespace": h.namespace, "labels": dict(h.labels)},
            "spec": {"replicas": 1, "selector": {"matchLabels": selector},
                     "template": {"metadata": {"labels": {**h.labels, **selector}}, "spec": pod}}}
