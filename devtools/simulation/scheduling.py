"""Where a pod may run: the scheduler's filters (NodeUnschedulable, NodeAffinity,
TaintToleration, VolumeBinding)
and its NodeAffinity score, as the Deployment and DaemonSet controllers and the kubelet here
read them (design/simulation.md, "Nodes")."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from fleetcache.devtools.simulation.api import Objects
from fleetcache.devtools.simulation.nodes import Node
from fleetcache.devtools.simulation.pods import NodePod
from fleetcache.functions import read

# Taints the DaemonSet controller makes every daemon pod tolerate (NoExecute and NoSchedule
# node-condition taints): a NotReady node keeps its warmer, the pod is just not Ready.
DAEMON_TOLERATED = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable",
                    "node.kubernetes.io/disk-pressure", "node.kubernetes.io/memory-pressure",
                    "node.kubernetes.io/pid-pressure", "node.kubernetes.io/unschedulable")
# What a pod tolerates to land on a cordoned node (v1.TaintNodeUnschedulable).
UNSCHEDULABLE = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def expression_matches(expression: Mapping, labels: Mapping[str, str]) -> bool:
    """One NodeSelectorRequirement against a node's labels, as the scheduler reads it."""
    key, operator = expression.get("key", ""), expression.get("operator")  # no label has the empty key
    values = expression.get("values") or []
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt") and key in labels:
        try:
            have, want = int(labels[key]), int(values[0])
        except (ValueError, IndexError):
            return False
        return have > want if operator == "Gt" else have < want
    return False


def term_matches(term: Mapping, node: Node) -> bool:
    """A NodeSelectorTerm: every matchExpression and matchField (metadata.name) holds; an
    empty term matches nothing."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    return all(expression_matches(e, node.labels) for e in expressions) and all(
        expression_matches(f, {"metadata.name": node.name}) for f in fields)


def selector_matches(selector: Mapping | None, node: Node) -> bool:
    """A NodeSelector (terms ORed); None matches every node."""
    if selector is None:
        return True
    return any(term_matches(t, node) for t in selector.get("nodeSelectorTerms") or [])


def node_affinity(pod_spec: Mapping) -> Mapping:
    return read.get_path(pod_spec, "affinity.nodeAffinity", {}) or {}


def pod_fits(pod_spec: Mapping, node: Node) -> bool:
    """nodeSelector and required node affinity (the NodeAffinity filter)."""
    node_selector = pod_spec.get("nodeSelector") or {}
    if any(node.labels.get(k) != v for k, v in node_selector.items()):
        return False
    return selector_matches(
        node_affinity(pod_spec).get("requiredDuringSchedulingIgnoredDuringExecution"), node)


def tolerated(taint: Mapping, tolerations: Iterable[Mapping]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        if toleration.get("operator") == "Exists":
            if not toleration.get("key") or toleration["key"] == taint.get("key"):
                return True
        elif toleration.get("key") == taint.get("key") and \
                toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def tolerates(pod_spec: Mapping, node: Node, daemon: bool = False) -> bool:
    """The TaintToleration filter: every NoSchedule/NoExecute taint tolerated."""
    tolerations = list(pod_spec.get("tolerations") or [])
    if daemon:
        tolerations += [{"key": k, "operator": "Exists"} for k in DAEMON_TOLERATED]
    return all(tolerated(t, tolerations) for t in node.taints
               if t.get("effect") in ("NoSchedule", "NoExecute"))


def preference(pod_spec: Mapping, node: Node) -> int:
    """The NodeAffinity score: the weights of the preferred terms the node matches."""
    return sum(p.get("weight", 0) for p in
               node_affinity(pod_spec).get("preferredDuringSchedulingIgnoredDuringExecution") or []
               if term_matches(p.get("preference") or {}, node))


def schedule(pod: NodePod, nodes: Mapping[str, Node], objects: Objects) -> tuple[str, str]:
    """(node, "") or ("", the scheduler's FailedScheduling message). Among the nodes
    that pass every filter the highest preferred-affinity score wins, then the name."""
    why: dict[str, int] = {}
    fits = []
    for name, node in sorted(nodes.items()):
        reason = "" if node.ready else "node(s) were not ready"
        reason = reason or ("" if not node.unschedulable or
                            tolerated(UNSCHEDULABLE, pod.spec.get("tolerations") or [])
                            else "node(s) were unschedulable")
        reason = reason or ("" if tolerates(pod.spec, node) else "node(s) had untolerated taint")
        reason = reason or ("" if pod_fits(pod.spec, node) else
                            "node(s) didn't match Pod's node affinity/selector")
        reason = reason or volume_conflict(pod, node, objects)
        if reason:
            why[reason] = why.get(reason, 0) + 1
        else:
            fits.append((-preference(pod.spec, node), name))
    if fits:
        return min(fits)[1], ""
    return "", (f"0/{len(nodes)} nodes are available: " +
                ", ".join(f"{n} {r}" for r, n in sorted(why.items())) + ".")


def volume_conflict(pod: NodePod, node: Node, objects: Objects) -> str:
    """The VolumeBinding filter: claims bound, their PVs' node affinity admits the node."""
    for volume in pod.spec.get("volumes", []):
        claim_name = read.get_path(volume, "persistentVolumeClaim.claimName")
        if not claim_name:
            continue
        claim = objects.get(("PersistentVolumeClaim", pod.namespace, claim_name))
        if read.get_path(claim, "status.phase") != "Bound":
            return "pod has unbound immediate PersistentVolumeClaims"
        pv = objects.get(("PersistentVolume", "", read.get_path(claim, "spec.volumeName", "")))
        if pv is not None and not selector_matches(
                read.get_path(pv, "spec.nodeAffinity.required"), node):
            return "node(s) had volume node affinity conflict"
    return ""
