"""What compose-fleet-cluster composes on a cluster with spec.nodeCache, once per cluster,
in namespace fleetcache-system (design/node-tier.md §3.1, §3.3, §3.5, §4): the only pod of
fleetcache that is not Pod Security `restricted`, and everything it and the warmers share.

- Namespace fleetcache-system: PSA enforce privileged (the node agent's hostPath), audit and
  warn restricted, so anything else placed there is still reported;
- the node agent: ServiceAccount, and only with labels NodeAgent a ClusterRole (nodes get,
  patch), its binding and a ValidatingAdmissionPolicy narrowing that patch to the
  node-cache labels of the agent's own Node; DaemonSet fleetcache-node-agent on the pool with
  `prepare` (root, CHOWN only, no API access) and `label` (uid 65532, no capabilities, the
  root read-only, a projected token);
- ConfigMap fleetcache-node-dirs: keep.json, the directories the nodes keep;
- the warm slots: Leases node-warm-slot-<i> (Observe/Create/Delete: the warmers' holder
  updates are never overwritten) and Role fleetcache-node-warm-slots the warmers bind to.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetcache.functions import naming
from fleetcache.functions.k8s import agent_job, objects
from fleetcache.functions.node_tier.warmer_inputs import DEFAULT_POOL, NodeCache
from fleetcache.functions.node_tier.warmer_names import NODE_LABEL_PREFIX, SLOTS_ROLE, SYSTEM_NAMESPACE

NAME = "fleetcache-node-agent"  # ServiceAccount, ClusterRole, its binding and the DaemonSet
DIRS = "fleetcache-node-dirs"
KEEP_KEY = "keep.json"
KEEP_MOUNT = "/etc/fleetcache/keep"
KEEP_FILE = f"{KEEP_MOUNT}/{KEEP_KEY}"
HOST_ROOT = "/host"  # spec.nodeCache.path inside both containers
SLOT_PREFIX = "node-warm-slot-"
SLOT_LABEL = f"{naming.GROUP}/node-warm-slot"
SLOT_SECONDS = 60  # the contract's lease duration
POLICY = "fleetcache-node-agent-labels"
AGENT_USER = f"system:serviceaccount:{SYSTEM_NAMESPACE}:{NAME}"
NODE_NAME_CLAIM = "authentication.kubernetes.io/node-name"
RBAC = "rbac.authorization.k8s.io"
ADMISSION = "admissionregistration.k8s.io/v1"
ROOT_UID = 0

# Control-plane keys; every one starts with "node-".
NAMESPACE_KEY = "node-namespace"
ACCOUNT_KEY = "node-agent-account"
CLUSTER_ROLE_KEY = "node-agent-cluster-role"
CLUSTER_BINDING_KEY = "node-agent-cluster-role-binding"
POLICY_KEY = "node-agent-labels-policy"
POLICY_BINDING_KEY = "node-agent-labels-policy-binding"
AGENT_KEY = "node-agent"
DIRS_KEY = "node-dirs"
SLOTS_ROLE_KEY = "node-warm-slots-role"


POOL_LABEL = f"{naming.GROUP}/node-pool"
MAX_SLOTS = 64  # Leases over every pool: the contract's bound on readers of a cluster's volumes


@dataclass(frozen=True)
class PoolNames:
    """The node agent of one pool: its control-plane keys, its DaemonSet and keep-list names
    and its pods' selector. The default pool keeps the names it had before pools had names;
    another pool's carry its name, and its pods a component of their own, so no two
    DaemonSets' selectors overlap."""

    pool: str

    @property
    def default(self) -> bool:
        return self.pool == DEFAULT_POOL

    @property
    def agent_key(self) -> str:
        return AGENT_KEY if self.default else f"node-pool-{self.pool}-agent"

    @property
    def dirs_key(self) -> str:
        return DIRS_KEY if self.default else f"node-pool-{self.pool}-dirs"

    @property
    def agent(self) -> str:
        return NAME if self.default else f"{NAME}-{self.pool}"

    @property
    def dirs(self) -> str:
        return DIRS if self.default else f"{DIRS}-{self.pool}"

    @property
    def selector(self) -> dict[str, str]:
        if self.default:
            return {naming.LABEL_COMPONENT: "node-agent"}
        return {naming.LABEL_COMPONENT: "node-pool-agent", POOL_LABEL: self.pool}


def slot_key(index: int) -> str:
    return f"node-warm-slot-{index}"


def slot_name(index: int) -> str:
    return f"{SLOT_PREFIX}{index}"


def meta(name: str, labels: dict, namespace: str | None = SYSTEM_NAMESPACE) -> dict:
    out: dict = {"name": name, "labels": dict(labels)}
    if namespace:
        out["namespace"] = namespace
    return out


def namespace_manifest(labels: dict) -> dict:
    """The one namespace fleetcache lets run a privileged pod; audit and warn stay
    restricted, so any other pod placed there shows up in audit logs and kubectl warnings."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta(SYSTEM_NAMESPACE, {
        **labels,
        "pod-security.kubernetes.io/enforce": "privileged",
        "pod-security.kubernetes.io/audit": "restricted",
        "pod-security.kubernetes.io/warn": "restricted"}, None)}


def account_manifest(labels: dict) -> dict:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(NAME, labels),
            "automountServiceAccountToken": False}


def cluster_role_manifest(labels: dict) -> dict:
    """Nodes get and patch, nothing else; the admission policy narrows the patch."""
    return {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRole", "metadata": meta(NAME, labels, None),
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]}


def cluster_binding_manifest(labels: dict) -> dict:
    return {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding",
            "metadata": meta(NAME, labels, None),
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": NAME},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": SYSTEM_NAMESPACE}]}


def label_rules() -> list[dict]:
    """The CEL of the label policy (design/node-tier.md §4), for node updates by the node
    agent only (matchConditions): its own Node (the node-name claim of its bound token),
    spec, annotations, finalizers and owners unchanged, and every label it adds, changes or
    removes under node-cache.fleetcache.dev/."""
    prefix = NODE_LABEL_PREFIX
    claim = f"request.userInfo.extra[{NODE_NAME_CLAIM!r}]"
    same = "has(object.{0}) == has(oldObject.{0}) && (!has(object.{0}) || object.{0} == oldObject.{0})"
    return [
        {"expression": f"{NODE_NAME_CLAIM!r} in request.userInfo.extra && size({claim}) > 0 "
                       f"&& object.metadata.name == {claim}[0]",
         "message": "the fleetcache node agent may change only the Node its pod runs on",
         "reason": "Forbidden"},
        {"expression": same.format("spec"),
         "message": "the fleetcache node agent may not change a Node's spec", "reason": "Forbidden"},
        {"expression": " && ".join(same.format(f"metadata.{field}") for field in
                                   ("annotations", "finalizers", "ownerReferences")),
         "message": "the fleetcache node agent may not change a Node's annotations, finalizers "
                    "or owners", "reason": "Forbidden"},
        {"expression": f"!has(object.metadata.labels) || object.metadata.labels.all(k, "
                       f"k.startsWith({prefix!r}) || (has(oldObject.metadata.labels) && "
                       f"k in oldObject.metadata.labels && "
                       f"oldObject.metadata.labels[k] == object.metadata.labels[k]))",
         "message": f"the fleetcache node agent may add or change only labels {prefix}*",
         "reason": "Forbidden"},
        {"expression": f"!has(oldObject.metadata.labels) || oldObject.metadata.labels.all(k, "
                       f"k.startsWith({prefix!r}) || (has(object.metadata.labels) && "
                       f"k in object.metadata.labels))",
         "message": f"the fleetcache node agent may remove only labels {prefix}*",
         "reason": "Forbidden"},
    ]


def policy_manifest(labels: dict) -> dict:
    return {"apiVersion": ADMISSION, "kind": "ValidatingAdmissionPolicy",
            "metadata": meta(POLICY, labels, None),
            "spec": {"failurePolicy": "Fail",
                     "matchConstraints": {"resourceRules": [{
                         "apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                         "resources": ["nodes"]}]},
                     "matchConditions": [{"name": "node-agent",
                                          "expression": f"request.userInfo.username == "
                                                        f"{AGENT_USER!r}"}],
                     "validations": label_rules()}}


def policy_binding_manifest(labels: dict) -> dict:
    return {"apiVersion": ADMISSION, "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": meta(POLICY, labels, None),
            "spec": {"policyName": POLICY, "validationActions": ["Deny"]}}


def dirs_manifest(keep_json: str, labels: dict, name: str = DIRS) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(name, labels),
            "data": {KEEP_KEY: keep_json}}


def slot_manifest(index: int, labels: dict) -> dict:
    """A free slot: no holder. Created once; the warmers update it (Observe/Create/Delete)."""
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": meta(slot_name(index), {**labels, SLOT_LABEL: "true"}),
            "spec": {"leaseDurationSeconds": SLOT_SECONDS}}


def slots_role_manifest(slots: int, labels: dict) -> dict:
    """What a warmer may do with the slots (bound by each hydration's RoleBinding): list and
    watch them, update only these names; no create or delete, the slots are composed."""
    return {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": meta(SLOTS_ROLE, labels),
            "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                       "verbs": ["get", "list", "watch"]},
                      {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                       "resourceNames": [slot_name(i) for i in range(slots)],
                       "verbs": ["update"]}]}


def agent_manifest(node_cache: NodeCache, image: str, labels: dict) -> dict:
    """The node agent DaemonSet on the pool. `prepare` is the one container of fleetcache that
    runs as root: it creates and chowns cache directories and deletes expired ones, with
    CHOWN as its only capability and no API access; `label` patches its own Node."""
    names = PoolNames(node_cache.name)
    selector = names.selector
    env = [{"name": "HOME", "value": "/tmp"}, {"name": "TMPDIR", "value": "/tmp"}]
    security = {"allowPrivilegeEscalation": False, "privileged": False,
                "readOnlyRootFilesystem": True, "seccompProfile": {"type": "RuntimeDefault"}}
    resources = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}}
    keep = {"name": "keep", "mountPath": KEEP_MOUNT, "readOnly": True}

    def container(name: str, args: list[str], context: dict, mounts: list[dict],
                  extra_env: tuple[dict, ...] = ()) -> dict:
        return {"name": name, "image": image, "imagePullPolicy": "IfNotPresent",
                "command": ["fleetcache-agent"], "args": args, "env": [*extra_env, *env],
                "resources": resources, "securityContext": {**security, **context},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "volumeMounts": [*mounts, {"name": "tmp", "mountPath": "/tmp"}]}

    containers = [container(
        "prepare", ["node-prepare", "--root", HOST_ROOT, "--keep-file", KEEP_FILE],
        {"runAsUser": ROOT_UID, "runAsGroup": ROOT_UID,
         "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}},
        [{"name": "host", "mountPath": HOST_ROOT}, keep])]
    volumes = [{"name": "host", "hostPath": {"path": node_cache.path, "type": "Directory"}},
               {"name": "keep", "configMap": {"name": names.dirs}},
               {"name": "tmp", "emptyDir": {}}]
    if node_cache.labels:
        containers.append(container(
            "label", ["node-label", "--root", HOST_ROOT, "--node", "$(NODE_NAME)",
                      "--keep-file", KEEP_FILE],
            {"runAsNonRoot": True, "runAsUser": agent_job.AGENT_UID, "runAsGroup": agent_job.AGENT_UID,
             "capabilities": {"drop": ["ALL"]}},
            [{"name": "host", "mountPath": HOST_ROOT, "readOnly": True}, keep,
             {"name": "token", "mountPath": agent_job.API_TOKEN_MOUNT, "readOnly": True}],
            ({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                              "fieldPath": "spec.nodeName"}}},)))
        volumes.append(agent_job.api_token_volume())
    pod: dict = {
        "serviceAccountName": NAME,
        "automountServiceAccountToken": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": node_cache.pool}},
        "containers": containers,
        "volumes": volumes,
    }
    if node_cache.tolerations:
        pod["tolerations"] = [dict(t) for t in node_cache.tolerations]
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta(names.agent, labels),
            "spec": {"selector": {"matchLabels": selector},
                     "template": {"metadata": {"labels": {**labels, **selector}},
                                  "spec": pod}}}


def manifests(node_caches: list[NodeCache], slots: int, image: str, labels: dict
              ) -> dict[str, tuple[dict, tuple[str, ...] | None]]:
    """key -> (manifest, management policies; None: full management) for the pools given
    (each with a path): one node agent per pool, the rest shared; the keep-lists aside (they
    need the capacity decisions). The warm slots are shared by every pool: `slots` is the
    sum of their maxConcurrentNodes, at most MAX_SLOTS (design/node-pools.md)."""
    slots = min(slots, MAX_SLOTS)
    out: dict[str, tuple[dict, tuple[str, ...] | None]] = {
        NAMESPACE_KEY: (namespace_manifest(labels), None),
        ACCOUNT_KEY: (account_manifest(labels), None),
        SLOTS_ROLE_KEY: (slots_role_manifest(slots, labels), None),
    }
    for node_cache in node_caches:
        out[PoolNames(node_cache.name).agent_key] = (agent_manifest(node_cache, image, labels), None)
    for index in range(slots):
        out[slot_key(index)] = (slot_manifest(index, labels), objects.OBSERVE_CREATE_DELETE)
    if any(node_cache.labels for node_cache in node_caches):
        out[CLUSTER_ROLE_KEY] = (cluster_role_manifest(labels), None)
        out[CLUSTER_BINDING_KEY] = (cluster_binding_manifest(labels), None)
        out[POLICY_KEY] = (policy_manifest(labels), None)
        out[POLICY_BINDING_KEY] = (policy_binding_manifest(labels), None)
    return out
