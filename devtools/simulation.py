"""A control plane and a fleet of clusters on one machine, for the demo.

`ControlPlane` stands in for the API server and Crossplane: it stores composites,
defaults them from their XRDs, runs each one's Composition pipeline against the real
function server, applies what comes back and deletes what no longer does.
`Provider` stands in for provider-kubernetes: it applies Objects' manifests to a
`Cluster` under their management policies, patches references in from control-plane
Secrets, and reports the remote object and its readiness (the Object's CEL query,
evaluated with cel-python) the way the real provider does. `Cluster` stands in for a
cluster's controllers: PVCs bind to directories, Jobs run the real `fleetcache-agent`
as processes with their volumes mapped to directories, and derive their status as the
Job controller does (podFailurePolicy, backoffLimit, activeDeadlineSeconds). A cluster
can have `Node`s (joining, leaving, relabelled, NotReady): then hostPath PVs resolve to
each node's directory, a DaemonSet controller runs one pod of real agent processes per
matching node, probed for readiness, and Deployment pods are scheduled by node affinity,
their init containers run. design/simulation.md says exactly where this differs from the
real thing.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import datetime
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import grpc
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from fleetcache.apis import xrds
from fleetcache.apis import specs
from fleetcache.functions import quantities
from fleetcache.functions import read
from fleetcache.devtools import render as rendering
from fleetcache.agent.progress import configmap_data

from fleetcache.functions.server import FunctionRunner

# Reconciled in this order in each pass: a grant decides before the caches that obey it.
XR_KINDS = ("FleetCluster", "ModelCacheGrant", "ModelCache", "ModelCacheHydration",
            "ModelDeployment", "ModelReplica")
READY = {"type": "Ready", "status": "True", "reason": "Available"}
NOT_READY = {"type": "Ready", "status": "False", "reason": "Creating"}
SYNCED = {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"}

Key = tuple[str, str, str]  # kind, namespace, name


def key_of(resource: dict) -> Key:
    meta = resource.get("metadata", {})
    return resource.get("kind", ""), meta.get("namespace", ""), meta.get("name", "")


# --- nodes and the pods that run on them ----------------------------------------------------

CONTROL_PLANE_ROLE = "node-role.kubernetes.io/control-plane"
NODE_CACHE_LABEL_PREFIX = "node-cache.fleetcache.dev/"  # the only labels node-label may set
SLOT_LEASE = re.compile(r"node-warm-slot-(\d+)$")
SLOT_LABEL = "fleetcache.dev/node-warm-slot"
# Taints the DaemonSet controller makes every daemon pod tolerate (NoExecute and NoSchedule
# node-condition taints): a NotReady node keeps its warmer, the pod is just not Ready.
DAEMON_TOLERATED = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable",
                    "node.kubernetes.io/disk-pressure", "node.kubernetes.io/memory-pressure",
                    "node.kubernetes.io/pid-pressure", "node.kubernetes.io/unschedulable")
# The agent's periods, compressed as the demo's rounds compress a reconcile interval.
AGENT_PERIODS = {"FLEETCACHE_NODE_AGENT_INTERVAL": "1", "FLEETCACHE_NODE_STATUS_INTERVAL": "1",
                 "FLEETCACHE_NODE_RECHECK_SECONDS": "5", "FLEETCACHE_NODE_SLOT_POLL_SECONDS": "0.5"}
PROBE_PERIOD = 1.0  # seconds between readiness probes of one container (periodSeconds: 30)
AGENT_COMMAND = ["fleetcache-agent"]


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
    ready: bool = True

    def host(self, path: str) -> Path:
        """A path on the node, as the directory standing in for it."""
        return self.disk / path.lstrip("/")

    def manifest(self) -> dict:
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name, "labels": dict(self.labels)},
                "spec": {"taints": [dict(t) for t in self.taints]},
                "status": {"capacity": {"ephemeral-storage": str(self.capacity_bytes)},
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


def expression_matches(expression: Mapping, labels: Mapping[str, str]) -> bool:
    """One NodeSelectorRequirement against a node's labels, as the scheduler reads it."""
    key, operator = expression.get("key"), expression.get("operator")
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


def template_hash(template: Mapping) -> str:
    """pod-template-hash: a changed template is a new generation of pods."""
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def expand(value: str, env: Mapping[str, str]) -> str:
    """$(VAR) references in command, args and env, expanded as the kubelet does ($$ escapes)."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), value)


class Unmountable(Exception):
    """A volume the kubelet cannot set up yet (FailedMount): the pod waits and retries."""


@lru_cache(maxsize=None)
def agent_flags(subcommand: str) -> frozenset[str]:
    """The options a fleetcache-agent subcommand takes."""
    from fleetcache.agent.cli import main_group

    command = main_group.commands.get(subcommand)
    return frozenset(o for p in (command.params if command else ()) for o in p.opts)


def run_probe(command: list[str]) -> bool:
    """An exec probe: `fleetcache-agent ...` runs the agent's own command in this process
    (exit 0 = ready; a Python start per probe of every pod would cost more CPU than the
    copies); any other command cannot run here and counts as passing."""
    if command[:1] != AGENT_COMMAND:
        return True
    from fleetcache.agent.cli import main_group

    try:
        return main_group.main(args=command[1:], prog_name="fleetcache-agent",
                               standalone_mode=False) in (0, None)
    except (Exception, SystemExit):  # noqa: BLE001 - a probe that errors fails, as exit != 0
        return False


@dataclass
class Container:
    """One container of a pod: a real agent process when its command is fleetcache-agent
    (anything else, the engine, only counts as started)."""

    spec: dict
    argv: list[str] | None  # the process to run, None for an image this machine cannot run
    env: dict[str, str]
    mounts: dict[str, str]  # mountPath -> host directory
    termination_log: Path
    log: Path
    process: subprocess.Popen | None = None
    probed_at: float = float("-inf")
    ready: bool = False
    restarts: int = 0
    not_before: float = 0.0  # CrashLoopBackOff: no restart before this time
    spec_env: dict[str, str] = field(default_factory=dict)  # the env as the pod spec gives it

    @property
    def name(self) -> str:
        return self.spec["name"]

    def start(self) -> None:
        if self.argv is not None:
            self.termination_log.write_text("")
            with self.log.open("ab") as log:
                self.process = subprocess.Popen(self.argv, env=self.env,
                                                stdout=subprocess.DEVNULL, stderr=log)

    def exited(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@dataclass
class NodePod:
    """A pod bound to a node: init containers run to completion in order, then the
    containers run (restartPolicy Always), probed for readiness."""

    name: str
    namespace: str
    node: str
    owner: Key  # its DaemonSet or Deployment
    template_hash: str
    spec: dict  # the pod template's spec
    labels: dict
    directory: Path
    phase: str = "Pending"  # Pending | Running
    message: str = ""  # why it is Pending
    init: list[Container] = field(default_factory=list)
    containers: list[Container] = field(default_factory=list)
    status_files: dict[Path, tuple[Key, bool]] = field(default_factory=dict)  # file -> (ConfigMap, prune)
    labels_file: Path | None = None

    @property
    def ready(self) -> bool:
        return self.phase == "Running" and all(c.ready for c in self.containers)

    def stop(self) -> None:
        for container in self.init + self.containers:
            container.stop()

    def manifest(self) -> dict:
        """The Pod object as `kubectl get pod -o yaml` would show its status."""
        def terminated(c: Container) -> dict:
            code = c.exited()
            if code is None:
                return {"name": c.name, "state": {"running": {}} if c.process else {"waiting": {}}}
            return {"name": c.name, "state": {"terminated": {
                "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "message": c.termination_log.read_text() if c.termination_log.exists() else ""}}}
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "labels": dict(self.labels)},
                "spec": {**self.spec, "nodeName": self.node},
                "status": {"phase": self.phase, "message": self.message,
                           "conditions": [{"type": "Ready",
                                           "status": "True" if self.ready else "False"}],
                           "initContainerStatuses": [terminated(c) for c in self.init],
                           "containerStatuses": [{**terminated(c), "ready": c.ready,
                                                  "restartCount": c.restarts}
                                                 for c in self.containers]}}


# --- a cluster ------------------------------------------------------------------------------


@dataclass
class Pod:
    """One attempt of a Job: a real agent process with its volumes mapped to directories."""

    name: str
    process: subprocess.Popen
    started: float
    termination_log: Path
    progress_file: Path | None
    configmap: Key | None
    claims: tuple[Key, ...] = ()  # the PVCs it mounts


@dataclass
class JobRun:
    attempts: int = 0
    failed: int = 0
    pod: Pod | None = None
    started_at: float = 0.0
    finished: bool = False


class Cluster:
    """A cluster's API objects plus the controllers fleetcache relies on, in a directory."""

    def __init__(self, name: str, root: Path, endpoint_override: str | None = None):
        self.name = name
        self.root = root
        self.endpoint_override = endpoint_override
        self.objects: dict[Key, dict] = {}
        self.jobs: dict[Key, JobRun] = {}
        self.nodes: dict[str, Node] = {}  # none: pods are not placed (the first acts' clusters)
        self.pods: dict[Key, list[NodePod]] = {}  # by DaemonSet or Deployment
        self.pod_serial = 0
        root.mkdir(parents=True, exist_ok=True)

    def volume_dir(self, namespace: str, claim: str) -> Path:
        return self.root / "volumes" / namespace / claim

    def get(self, key: Key) -> dict | None:
        return self.objects.get(key)

    def apply(self, manifest: dict) -> None:
        key = key_of(manifest)
        current = self.objects.get(key)
        applied = copy.deepcopy(manifest)
        if current is not None and "status" in current:
            applied["status"] = current["status"]
        self.objects[key] = applied

    def delete(self, key: Key) -> None:
        gone = self.objects.pop(key, None) or {}
        volume = self.objects.get(("PersistentVolume", "", read.get_path(gone, "spec.volumeName", "")))
        if volume is not None:  # a pre-bound PV (reclaimPolicy Retain): Released, data kept
            volume["status"] = {"phase": "Released"}
        elif key[0] == "PersistentVolumeClaim":  # dynamically provisioned: reclaimPolicy Delete
            shutil.rmtree(self.volume_dir(key[1], key[2]), ignore_errors=True)
        if key[0] == "ConfigMap":
            (self.root / "configmaps" / key[1] / f"{key[2]}.json").unlink(missing_ok=True)
        for pod in list(self.pods.pop(key, [])):
            self.delete_pod(pod)
        run = self.jobs.pop(key, None)
        if run and run.pod and run.pod.process.poll() is None:
            run.pod.process.kill()
            run.pod.process.wait()

    # -- controllers --------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        self.sync_slots()
        for key, obj in list(self.objects.items()):
            kind = key[0]
            if kind == "PersistentVolumeClaim":
                self.bind_claim(key, obj)
            elif kind == "Job":
                self.run_job(key, obj, now)
            elif kind == "Deployment":
                obj["status"] = self.run_deployment(key, obj) if self.nodes else \
                    self.deployment_status(obj)
            elif kind == "DaemonSet":
                obj["status"] = self.run_daemonset(key, obj)
        self.collect_node_output()

    def run_job(self, key: Key, job: dict, now: float) -> None:
        run = self.jobs.setdefault(key, JobRun(started_at=now))
        spec = job["spec"]
        status = job.setdefault("status", {"startTime": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                     time.gmtime())})
        if run.finished:
            return
        if run.pod is None:
            self.start_pod(key, job, run)
        pod = run.pod
        assert pod is not None
        self.copy_progress(pod)
        if now - run.started_at > spec.get("activeDeadlineSeconds", 1e9):
            pod.process.kill()
            pod.process.wait()
            self.finish(job, run, "Failed", "DeadlineExceeded",
                        "Job was active longer than specified deadline")
            return
        code = pod.process.poll()
        if code is None:
            status["active"] = 1
            return
        self.copy_progress(pod)
        status.pop("active", None)
        if code == 0:
            status["succeeded"] = 1
            self.finish(job, run, "Complete", "", "")
            return
        run.failed += 1
        status["failed"] = run.failed
        rule = fail_job_rule(spec, code)
        if rule is not None:
            self.finish(job, run, "Failed", "PodFailurePolicy",
                        f"Container agent for pod {key[1]}/{pod.name} failed with exit code "
                        f"{code} matching FailJob rule at index {rule}")
        elif run.failed > spec.get("backoffLimit", 6):
            self.finish(job, run, "Failed", "BackoffLimitExceeded",
                        "Job has reached the specified backoff limit")
        else:
            run.pod = None  # the Job controller starts a replacement pod on the next tick

    def finish(self, job: dict, run: JobRun, condition: str, reason: str, message: str) -> None:
        run.finished = True
        cond = {"type": condition, "status": "True"}
        if reason:
            cond.update(reason=reason, message=message)
        job["status"]["conditions"] = [cond]

    def start_pod(self, key: Key, job: dict, run: JobRun) -> None:
        run.attempts += 1
        pod_name = f"{key[2]}-{run.attempts}"
        pod_dir = self.root / "pods" / pod_name
        shutil.rmtree(pod_dir, ignore_errors=True)
        pod_dir.mkdir(parents=True)
        pod_spec = job["spec"]["template"]["spec"]
        container = pod_spec["containers"][0]
        mounts = self.mount_volumes(key[1], pod_spec, container, pod_dir)
        args = [translate(arg, mounts) for arg in container.get("args", [])]
        args, progress_file, configmap = self.progress_to_file(args, key[1], pod_dir)
        if self.endpoint_override and "--endpoint" in args:
            args[args.index("--endpoint") + 1] = self.endpoint_override
        termination_log = pod_dir / "termination-log"
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(pod_dir / "home"),
               "TMPDIR": str(mounts.get("/tmp", pod_dir))}
        for item in container.get("env", []):
            env[item["name"]] = translate(item.get("value", ""), mounts)
        (pod_dir / "home").mkdir(exist_ok=True)
        command = [sys.executable, "-c", "from fleetcache.agent.cli import main; main()", *args,
                   "--termination-log", str(termination_log)]
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                                   stderr=(pod_dir / "log").open("wb"))
        volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
        claims = tuple(("PersistentVolumeClaim", key[1], volumes[m["name"]][
            "persistentVolumeClaim"]["claimName"]) for m in container.get("volumeMounts", [])
            if "persistentVolumeClaim" in volumes.get(m["name"], {}))
        run.pod = Pod(pod_name, process, time.monotonic(), termination_log, progress_file,
                      configmap, claims)

    def mount_volumes(self, namespace: str, pod_spec: dict, container: dict, pod_dir: Path
                      ) -> dict[str, str]:
        """mountPath -> host directory: emptyDirs per pod, PVCs per cluster, Secrets as files."""
        volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
        mounts = self.claim_mounts(namespace, pod_spec, container)
        for host in mounts.values():
            Path(host).mkdir(parents=True, exist_ok=True)
        for mount in container.get("volumeMounts", []):
            if mount["mountPath"] in mounts:
                continue
            volume = volumes[mount["name"]]
            host = pod_dir / "volumes" / mount["name"]
            if "secret" in volume:
                secret = self.objects.get(("Secret", namespace, volume["secret"]["secretName"]))
                host.mkdir(parents=True, exist_ok=True)
                for item in volume["secret"].get("items", []):
                    data = (secret or {}).get("data", {}).get(item["key"], "")
                    (host / item["path"]).write_bytes(base64.b64decode(data))
            if "configMap" in volume:
                self.write_configmap_files(namespace, volume["configMap"], host)
            host.mkdir(parents=True, exist_ok=True)
            mounts[mount["mountPath"]] = str(host)
        return mounts

    def write_configmap_files(self, namespace: str, source: Mapping, host: Path) -> None:
        """A Job's configMap volume (the pinned manifest of an S3 or volume source): each data
        key a file, as the kubelet projects it when the pod starts."""
        configmap = self.objects.get(("ConfigMap", namespace, source["name"])) or {}
        host.mkdir(parents=True, exist_ok=True)
        for key, value in (configmap.get("data") or {}).items():
            (host / key).write_text(value)

    def claim_mounts(self, namespace: str, pod_spec: dict, container: dict) -> dict[str, str]:
        """mountPath -> the directory standing in for each mounted PVC."""
        volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
        return {mount["mountPath"]: str(self.volume_dir(
                    namespace, volumes[mount["name"]]["persistentVolumeClaim"]["claimName"]))
                for mount in container.get("volumeMounts", [])
                if "persistentVolumeClaim" in volumes[mount["name"]]}

    def progress_to_file(self, args: list[str], namespace: str, pod_dir: Path
                         ) -> tuple[list[str], Path | None, Key | None]:
        """The agent patches its ConfigMap through the in-cluster API, which this cluster
        does not serve: it writes the same record to a file that is copied into the
        ConfigMap's data instead."""
        if "--progress-configmap" not in args:
            return args, None, None
        at = args.index("--progress-configmap")
        ns, _, name = args[at + 1].partition("/")
        progress_file = pod_dir / "progress.json"
        args = args[:at] + ["--progress-file", str(progress_file)] + args[at + 2:]
        return args, progress_file, ("ConfigMap", ns or namespace, name)

    def copy_progress(self, pod: Pod) -> None:
        if pod.progress_file is None or pod.configmap is None or not pod.progress_file.exists():
            return
        configmap = self.objects.get(pod.configmap)
        if configmap is None:
            return
        try:
            record = json.loads(pod.progress_file.read_text())
        except (OSError, json.JSONDecodeError):
            return  # replaced atomically by the agent; the next tick reads it
        if record.get("usedBytes") is not None and pod.claims:
            record.update(self.claim_usage(pod.claims[0]))
        configmap["data"] = configmap_data(record)

    def claim_usage(self, claim: Key) -> dict[str, int]:
        """What statvfs would say if the PVC were its own filesystem of its requested size:
        every claim here is a directory on one shared filesystem, whose statvfs says
        nothing about one volume."""
        used = files_bytes(self.volume_dir(claim[1], claim[2]))
        requested = read.get_path(self.objects.get(claim, {}), "spec.resources.requests.storage")
        try:
            capacity = quantities.quantity_bytes(requested, "spec.resources.requests.storage")
        except specs.InputError:
            capacity = used
        return {"usedBytes": used, "capacityBytes": max(capacity, used)}

    def deployment_status(self, deployment: dict) -> dict:
        """Available when the engine could start: on Cache delivery the model directory the
        environment names must exist on the mounted volume (a real engine would fail)."""
        pod_spec = deployment["spec"]["template"]["spec"]
        container = pod_spec["containers"][0]
        env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
        replicas = deployment["spec"].get("replicas", 1)
        if env.get("FLEETCACHE_DELIVERY") == "cache":
            mounts = self.claim_mounts(deployment["metadata"]["namespace"], pod_spec, container)
            model_dir = Path(translate(env.get("FLEETCACHE_MODEL", ""), mounts))
            if not (model_dir / "config.json").is_file():
                return {"replicas": replicas, "unavailableReplicas": replicas, "conditions": [
                    {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable",
                     "message": f"the engine cannot find {env.get('FLEETCACHE_MODEL')}"}]}
        return {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas,
                "updatedReplicas": replicas, "observedGeneration": 1,
                "conditions": [{"type": "Available", "status": "True",
                                "reason": "MinimumReplicasAvailable"}]}

    # -- nodes (design/simulation.md "Nodes") ----------------------------------------------------
    def add_node(self, name: str, labels: Mapping[str, str] | None = None, *,
                 control_plane: bool = False, capacity: str = "1Ti",
                 filesystems: Iterable[str] = (), taints: Iterable[dict] = ()) -> Node:
        """A node joins: a control-plane node carries the role label and its NoSchedule
        taint, as kubeadm sets them; `filesystems` are host paths with a disk of their own."""
        all_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                      **(labels or {})}
        all_taints = [dict(t) for t in taints]
        if control_plane:
            all_labels[CONTROL_PLANE_ROLE] = ""
            all_taints.append({"key": CONTROL_PLANE_ROLE, "effect": "NoSchedule"})
        node = Node(name, self.root / "nodes" / name, all_labels, all_taints,
                    quantities.quantity_bytes(capacity, "capacity"), tuple(filesystems))
        for path in ("/", *node.filesystems):
            node.host(path).mkdir(parents=True, exist_ok=True)
        self.nodes[name] = node
        self.objects[("Node", "", name)] = node.manifest()
        return node

    def remove_node(self, name: str) -> None:
        """The Node object is deleted (a scaled-in or lost machine); PodGC deletes its pods."""
        self.nodes.pop(name, None)
        self.objects.pop(("Node", "", name), None)
        for pods in self.pods.values():
            for pod in [p for p in pods if p.node == name]:
                self.delete_pod(pod)

    def label_node(self, name: str, labels: Mapping[str, str | None]) -> None:
        """`kubectl label node NAME k=v k-`."""
        node = self.nodes[name]
        for key, value in labels.items():
            if value is None:
                node.labels.pop(key, None)
            else:
                node.labels[key] = value
        self.objects[("Node", "", name)] = node.manifest()

    def set_node_ready(self, name: str, ready: bool) -> None:
        self.nodes[name].ready = ready
        self.objects[("Node", "", name)] = self.nodes[name].manifest()

    def delete_pod(self, pod: NodePod) -> None:
        pod.stop()
        if pod in self.pods.get(pod.owner, []):
            self.pods[pod.owner].remove(pod)
        self.objects.pop(("Pod", pod.namespace, pod.name), None)

    def bind_claim(self, key: Key, claim: dict) -> None:
        """A claim with volumeName binds to that PV when the PV's claimRef, class and capacity
        allow it (the PV controller's static binding); any other claim is provisioned."""
        volume_name = read.get_path(claim, "spec.volumeName")
        if not volume_name:
            self.volume_dir(key[1], key[2]).mkdir(parents=True, exist_ok=True)
            claim["status"] = {"phase": "Bound"}
            return
        volume = self.objects.get(("PersistentVolume", "", volume_name))
        ref = read.get_path(volume, "spec.claimRef") or {}
        try:
            fits = quantities.quantity_bytes(read.get_path(volume, "spec.capacity.storage"), "capacity") \
                >= quantities.quantity_bytes(read.get_path(claim, "spec.resources.requests.storage"),
                                      "request")
        except specs.InputError:
            fits = False
        if volume is None or not fits or (ref and (ref.get("namespace"), ref.get("name")) !=
                                          (key[1], key[2])) \
                or read.get_path(volume, "spec.storageClassName", "") != \
                read.get_path(claim, "spec.storageClassName", ""):
            claim["status"] = {"phase": "Pending"}
            return
        volume["status"] = {"phase": "Bound"}
        claim["status"] = {"phase": "Bound", "accessModes": volume["spec"].get("accessModes", []),
                           "capacity": dict(volume["spec"].get("capacity", {}))}

    def slots_dir(self, namespace: str) -> Path:
        return self.root / "slots" / namespace

    def sync_slots(self) -> None:
        """The warm-slot Leases as flock'ed files (node-warm --slots-dir): one file per Lease,
        gone with it; each Lease shows the holder its file names."""
        wanted: dict[str, dict[str, dict]] = {}
        for (kind, namespace, name), lease in self.objects.items():
            match = SLOT_LEASE.match(name)
            labels = lease.get("metadata", {}).get("labels") or {}
            if kind == "Lease" and match and labels.get(SLOT_LABEL) == "true":
                wanted.setdefault(namespace, {})[f"slot-{match.group(1)}"] = lease
        for namespace in set(wanted) | {p.name for p in (self.root / "slots").glob("*")}:
            directory = self.slots_dir(namespace)
            directory.mkdir(parents=True, exist_ok=True)
            leases = wanted.get(namespace, {})
            for slot in directory.glob("slot-*"):
                if slot.name not in leases:
                    slot.unlink()
            for slot, lease in leases.items():
                path = directory / slot
                path.touch()
                holder = path.read_text().strip()
                lease.setdefault("spec", {})["holderIdentity"] = holder or None

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
            self.run_pod(pod)
        ready = sum(1 for pod in pods if pod.ready)
        return {"desiredNumberScheduled": len(eligible), "currentNumberScheduled": len(pods),
                "updatedNumberScheduled": len(pods), "numberMisscheduled": 0,
                "numberReady": ready, "numberAvailable": ready,
                "numberUnavailable": len(eligible) - ready, "observedGeneration": 1}

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
                pod.node, pod.message = self.schedule(pod)
            if pod.node:
                self.run_pod(pod)
        updated = [pod for pod in pods if pod.template_hash == digest]
        if sum(1 for pod in updated if self.available(pod)) >= replicas:
            for pod in [pod for pod in pods if pod.template_hash != digest]:
                self.delete_pod(pod)
        available = min(replicas, sum(1 for pod in pods if self.available(pod)))
        status = {"replicas": len(pods), "readyReplicas": available,
                  "availableReplicas": available, "updatedReplicas": len(updated),
                  "observedGeneration": 1}
        if available < replicas:
            why = next((pod.message or self.engine_problem(pod) or f"pod {pod.name} is not ready"
                        for pod in updated if not self.available(pod)), "")
            status.update(unavailableReplicas=replicas - available, conditions=[
                {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable",
                 "message": why}])
        else:
            status["conditions"] = [{"type": "Available", "status": "True",
                                     "reason": "MinimumReplicasAvailable"}]
        return status

    def available(self, pod: NodePod) -> bool:
        return pod.ready and not self.engine_problem(pod)

    def schedule(self, pod: NodePod) -> tuple[str, str]:
        """(node, "") or ("", the scheduler's FailedScheduling message). Among the nodes
        that pass every filter the highest preferred-affinity score wins, then the name."""
        why: dict[str, int] = {}
        fits = []
        for name, node in sorted(self.nodes.items()):
            reason = "" if node.ready else "node(s) were not ready"
            reason = reason or ("" if tolerates(pod.spec, node) else "node(s) had untolerated taint")
            reason = reason or ("" if pod_fits(pod.spec, node) else
                                "node(s) didn't match Pod's node affinity/selector")
            reason = reason or self.volume_conflict(pod, node)
            if reason:
                why[reason] = why.get(reason, 0) + 1
            else:
                fits.append((-preference(pod.spec, node), name))
        if fits:
            return min(fits)[1], ""
        return "", (f"0/{len(self.nodes)} nodes are available: " +
                    ", ".join(f"{n} {r}" for r, n in sorted(why.items())) + ".")

    def volume_conflict(self, pod: NodePod, node: Node) -> str:
        """The VolumeBinding filter: claims bound, their PVs' node affinity admits the node."""
        for volume in pod.spec.get("volumes", []):
            claim_name = read.get_path(volume, "persistentVolumeClaim.claimName")
            if not claim_name:
                continue
            claim = self.objects.get(("PersistentVolumeClaim", pod.namespace, claim_name))
            if read.get_path(claim, "status.phase") != "Bound":
                return "pod has unbound immediate PersistentVolumeClaims"
            pv = self.objects.get(("PersistentVolume", "", read.get_path(claim, "spec.volumeName",
                                                                        "")))
            if pv is not None and not selector_matches(
                    read.get_path(pv, "spec.nodeAffinity.required"), node):
                return "node(s) had volume node affinity conflict"
        return ""

    def engine_problem(self, pod: NodePod) -> str:
        """Why the engine would not start: the model directory its environment names (through
        the pod's mounts and the link `select` wrote) lacks config.json."""
        if pod.phase != "Running" or not pod.containers:
            return ""
        engine = pod.containers[0]
        if engine.env.get("FLEETCACHE_DELIVERY") not in ("cache", "node"):
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

    def run_pod(self, pod: NodePod) -> None:
        """The kubelet's loop for one pod: mount (retried until it works), init containers in
        order, then the containers, restarted when they exit, probed for readiness."""
        node = self.nodes[pod.node]
        if not pod.init and not pod.containers:
            try:
                self.set_up(pod, node)
            except Unmountable as err:
                pod.message = str(err)
                return
        self.refresh_config_volumes(pod)
        for container in pod.init:
            if container.argv is None:
                continue
            code = container.exited()
            if container.process is None or code not in (None, 0):
                self.restart(container)
            if container.exited() != 0:
                pod.message = "PodInitializing"
                return
        pod.phase, pod.message = "Running", ""
        for container in pod.containers:
            if container.argv is not None and (container.process is None or
                                               container.exited() is not None):
                container.ready = False
                self.restart(container)
            self.probe(container, node)

    def restart(self, container: Container) -> None:
        """Started now, or after CrashLoopBackOff's doubling delay (compressed to half-seconds)."""
        if container.process is not None:
            if time.monotonic() < container.not_before:
                return
            container.restarts += 1
            container.not_before = time.monotonic() + min(0.5 * 2 ** container.restarts, 30.0)
        container.start()

    def probe(self, container: Container, node: Node) -> None:
        """The readiness probe's exec command every PROBE_PERIOD seconds; no probe: ready
        while running. A NotReady node's pods are not ready."""
        command = read.get_path(container.spec, "readinessProbe.exec.command")
        running = container.argv is None or container.exited() is None
        if not (command and running and node.ready):
            container.ready = running and node.ready and not command
        elif time.monotonic() - container.probed_at >= PROBE_PERIOD:
            container.probed_at = time.monotonic()
            container.ready = run_probe([translate(expand(part, container.spec_env),
                                                   container.mounts) for part in command])

    @staticmethod
    def agent_argv(command: list[str]) -> list[str] | None:
        """The process for a container command: the agent runs from this checkout; any other
        image cannot run here."""
        if command[:1] != AGENT_COMMAND:
            return None
        return [sys.executable, "-c", "from fleetcache.agent.cli import main; main()",
                *command[1:]]

    def set_up(self, pod: NodePod, node: Node) -> None:
        """Volumes to host directories, then each container's process (Unmountable: retry)."""
        volumes = {v["name"]: self.volume_host(pod, v, node) for v in pod.spec.get("volumes", [])}
        pod.init = [self.container(pod, spec, node, volumes)
                    for spec in pod.spec.get("initContainers", [])]
        pod.containers = [self.container(pod, spec, node, volumes)
                          for spec in pod.spec.get("containers", [])]

    def volume_host(self, pod: NodePod, volume: dict, node: Node) -> Path:
        name = volume["name"]
        if "persistentVolumeClaim" in volume:
            claim_name = volume["persistentVolumeClaim"]["claimName"]
            claim = self.objects.get(("PersistentVolumeClaim", pod.namespace, claim_name))
            if read.get_path(claim, "status.phase") != "Bound":
                raise Unmountable(f"persistentvolumeclaim {claim_name!r} is not bound")
            pv = self.objects.get(("PersistentVolume", "", read.get_path(claim, "spec.volumeName",
                                                                        "")))
            if pv is None:
                directory = self.volume_dir(pod.namespace, claim_name)
                directory.mkdir(parents=True, exist_ok=True)
                return directory
            if not selector_matches(read.get_path(pv, "spec.nodeAffinity.required"), node):
                raise Unmountable("node(s) had volume node affinity conflict")
            return self.host_path(node, read.get_path(pv, "spec.hostPath", {}) or {}, name)
        if "hostPath" in volume:
            return self.host_path(node, volume["hostPath"], name)
        directory = pod.directory / "volumes" / name
        directory.mkdir(parents=True, exist_ok=True)
        if "secret" in volume:
            secret = self.objects.get(("Secret", pod.namespace, volume["secret"]["secretName"]))
            for item in volume["secret"].get("items", []):
                data = (secret or {}).get("data", {}).get(item["key"], "")
                (directory / item["path"]).write_bytes(base64.b64decode(data))
        if "configMap" in volume:
            configmap = ("ConfigMap", pod.namespace, volume["configMap"]["name"])
            if configmap not in self.objects and not volume["configMap"].get("optional"):
                raise Unmountable(f"configmap {configmap[2]!r} not found")
        return directory

    @staticmethod
    def host_path(node: Node, source: Mapping, volume: str) -> Path:
        """hostPath on the node: type Directory must exist (the kubelet's type check),
        DirectoryOrCreate is created."""
        path = node.host(source.get("path", "/"))
        if source.get("type") == "Directory" and not path.is_dir():
            raise Unmountable(f"MountVolume.SetUp failed for volume {volume!r}: hostPath type "
                              f"check failed: {source.get('path')} is not a directory")
        path.mkdir(parents=True, exist_ok=True)
        return path

    def refresh_config_volumes(self, pod: NodePod) -> None:
        """configMap volumes follow their ConfigMap (the kubelet's periodic sync), each file
        replaced atomically."""
        for volume in pod.spec.get("volumes", []):
            source = volume.get("configMap")
            if source is None:
                continue
            data = (self.objects.get(("ConfigMap", pod.namespace, source["name"])) or {}
                    ).get("data") or {}
            items = source.get("items") or [{"key": k, "path": k} for k in data]
            directory = pod.directory / "volumes" / volume["name"]
            for item in items:
                if item["key"] in data:
                    target = directory / item["path"]
                    if not target.exists() or target.read_text() != data[item["key"]]:
                        tmp = target.with_name(f".{target.name}.tmp")
                        tmp.write_text(data[item["key"]])
                        os.replace(tmp, target)

    def container(self, pod: NodePod, spec: dict, node: Node, volumes: dict[str, Path]
                  ) -> Container:
        """A container's process: $(VAR) expanded, paths under a mount rewritten to the host
        directory, and the in-cluster APIs the agent would call replaced by their file
        stand-ins (status ConfigMap, slot Leases, Node labels)."""
        mounts = {m["mountPath"]: str(volumes[m["name"]] / m.get("subPath", "")).rstrip("/")
                  for m in spec.get("volumeMounts", [])}
        fields = {"spec.nodeName": node.name, "metadata.name": pod.name,
                  "metadata.namespace": pod.namespace, "spec.serviceAccountName":
                  pod.spec.get("serviceAccountName", "default")}
        spec_env: dict[str, str] = {}
        for item in spec.get("env", []):
            value = expand(item.get("value", ""), spec_env) if "value" in item else \
                fields.get(read.get_path(item, "valueFrom.fieldRef.fieldPath", ""), "")
            spec_env[item["name"]] = value
        (pod.directory / "home").mkdir(exist_ok=True)
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(pod.directory / "home"),
               "TMPDIR": str(pod.directory), **AGENT_PERIODS,
               "FLEETCACHE_MOUNTINFO": str(node.mountinfo()),
               **{k: translate(v, mounts) for k, v in spec_env.items()}}
        termination_log = pod.directory / f"{spec['name']}.termination-log"
        command = [expand(part, spec_env) for part in
                   [*spec.get("command", []), *spec.get("args", [])]]
        argv = self.agent_argv([translate(part, mounts) for part in command])
        if argv is not None:
            argv = self.stand_ins(pod, node, argv)
            subcommand = command[1] if len(command) > 1 else ""
            if "--termination-log" in agent_flags(subcommand):
                argv += ["--termination-log", str(termination_log)]
        return Container(spec, argv, env, mounts, termination_log,
                         pod.directory / f"{spec['name']}.log", spec_env=spec_env)

    def stand_ins(self, pod: NodePod, node: Node, argv: list[str]) -> list[str]:
        """This cluster serves no API: the status ConfigMap becomes a file merged into the
        ConfigMap's data every tick, the slot Leases flock'ed files, the Node's labels a file
        merged into the Node."""
        argv = list(argv)
        prune = "--prune-selector" in argv
        for flag in ("--prune-selector", "--pruner-lease"):  # the cluster prunes, below
            if flag in argv:
                at = argv.index(flag)
                del argv[at:at + 2]
        if "--status-configmap" in argv:
            at = argv.index("--status-configmap")
            namespace, _, name = argv[at + 1].partition("/")
            status_file = self.root / "configmaps" / (namespace or pod.namespace) / f"{name}.json"
            argv[at:at + 2] = ["--status-file", str(status_file)]
            pod.status_files[status_file] = (("ConfigMap", namespace or pod.namespace, name),
                                             prune)
        if "--slots-namespace" in argv:
            at = argv.index("--slots-namespace")
            argv[at:at + 2] = ["--slots-dir", str(self.slots_dir(argv[at + 1]))]
        if "node-label" in argv and "--labels-file" not in argv:
            pod.labels_file = pod.directory / "labels.json"
            pod.labels_file.write_text(json.dumps(node.labels, sort_keys=True))
            argv += ["--labels-file", str(pod.labels_file)]
        return argv

    def collect_node_output(self) -> None:
        """What the agents wrote through their stand-ins, back into the API objects: status
        records merged into their ConfigMap's data per node (records of nodes without a pod
        pruned when the warmer asked for pruning), node-cache labels into the Node; and the
        Pod objects, as `kubectl get pods` would show them."""
        writers: dict[Path, tuple[Key, bool, set[str]]] = {}
        for pods in self.pods.values():
            for pod in pods:
                for status_file, (configmap, prune) in pod.status_files.items():
                    writers.setdefault(status_file, (configmap, prune, set()))[2].add(pod.node)
                node = self.nodes.get(pod.node)
                if pod.labels_file is not None and node is not None:
                    labels = read_json_file(pod.labels_file)
                    if isinstance(labels, dict):
                        self.label_node(node.name, {
                            **{k: None for k in node.labels if k.startswith(NODE_CACHE_LABEL_PREFIX)},
                            **{k: v for k, v in labels.items()
                               if k.startswith(NODE_CACHE_LABEL_PREFIX) and isinstance(v, str)}})
                self.objects[("Pod", pod.namespace, pod.name)] = pod.manifest()
        for status_file, (key, prune, nodes) in writers.items():
            configmap = self.objects.get(key)
            records = read_json_file(status_file)
            if configmap is None or not isinstance(records, dict):
                continue
            data = dict(configmap.get("data") or {})
            if prune:
                data = {k: v for k, v in data.items() if k in nodes}
                records = {k: v for k, v in records.items() if k in nodes}
            configmap["data"] = {**data, **configmap_data(records)}

    def running_pods(self) -> int:
        return sum(1 for run in self.jobs.values()
                   if run.pod is not None and run.pod.process.poll() is None)

    def stop(self) -> None:
        for key in list(self.jobs):
            self.delete(key)
        for pods in list(self.pods.values()):
            for pod in list(pods):
                self.delete_pod(pod)


def read_json_file(path: Path) -> Any:
    """A JSON file an agent replaces atomically; None when absent or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def translate(value: str, mounts: dict[str, str]) -> str:
    """A path inside the container, as the host directory it is mounted from."""
    for mount_path in sorted(mounts, key=len, reverse=True):
        if value == mount_path or value.startswith(mount_path.rstrip("/") + "/"):
            return mounts[mount_path] + value[len(mount_path):]
    return value


def fail_job_rule(job_spec: dict, code: int) -> int | None:
    """Index of the podFailurePolicy FailJob rule matching `code`, as the Job controller
    evaluates it (rules in order, first match wins)."""
    for index, rule in enumerate((job_spec.get("podFailurePolicy") or {}).get("rules", [])):
        on_codes = rule.get("onExitCodes")
        if not on_codes:
            continue
        values = on_codes.get("values", [])
        hit = code in values if on_codes.get("operator") == "In" else code not in values
        if hit:
            return index if rule.get("action") == "FailJob" else None
    return None


# --- provider-kubernetes ------------------------------------------------------------------


class Provider:
    """Objects to clusters and back, honouring management policies and references."""

    def __init__(self, clusters: dict[str, Cluster], control_plane_secrets: Callable[[], list]):
        self.clusters = clusters
        self.secrets = control_plane_secrets
        self._cel: dict[str, Any] = {}

    def cluster_of(self, obj: dict) -> Cluster | None:
        return self.clusters.get(read.get_path(obj, "spec.providerConfigRef.name", ""))

    def apply(self, obj: dict) -> None:
        cluster = self.cluster_of(obj)
        if cluster is None:
            return
        manifest = copy.deepcopy(obj["spec"]["forProvider"]["manifest"])
        for ref in obj["spec"].get("references", []) or []:
            self.patch_from(ref, manifest)
        policies = set(obj["spec"].get("managementPolicies") or ["*"])
        exists = cluster.get(key_of(manifest)) is not None
        if not exists and ({"*", "Create"} & policies):
            cluster.apply(manifest)
        elif exists and ({"*", "Update"} & policies):
            cluster.apply(manifest)

    def patch_from(self, ref: dict, manifest: dict) -> None:
        source = ref.get("patchesFrom") or {}
        for secret in self.secrets():
            meta = secret.get("metadata", {})
            if (secret.get("kind") == source.get("kind") and meta.get("name") == source.get("name")
                    and meta.get("namespace") == source.get("namespace")):
                value = read.get_path(secret, source.get("fieldPath", ""))
                if value is not None:
                    target = manifest
                    *parents, last = ref.get("toFieldPath", source["fieldPath"]).split(".")
                    for part in parents:
                        target = target.setdefault(part, {})
                    target[last] = value

    def delete(self, obj: dict) -> None:
        cluster = self.cluster_of(obj)
        policies = set(obj["spec"].get("managementPolicies") or ["*"])
        if cluster is not None and ({"*", "Delete"} & policies):
            cluster.delete(key_of(obj["spec"]["forProvider"]["manifest"]))

    def observe(self, obj: dict) -> dict:
        observed = copy.deepcopy(obj)
        cluster = self.cluster_of(obj)
        remote = cluster.get(key_of(obj["spec"]["forProvider"]["manifest"])) if cluster else None
        if remote is None:
            observed["status"] = {"conditions": [SYNCED, NOT_READY]}
            return observed
        remote = copy.deepcopy(remote)
        if remote.get("kind") == "Secret":
            remote.pop("data", None)  # provider-kubernetes --sanitize-secrets
        readiness = obj["spec"].get("readiness") or {}
        ready = True
        if readiness.get("policy") == "DeriveFromCelQuery":
            ready = self.cel(readiness["celQuery"], remote)
        observed["status"] = {"atProvider": {"manifest": remote},
                              "conditions": [SYNCED, READY if ready else NOT_READY]}
        return observed

    def cel(self, query: str, remote: dict) -> bool:
        import celpy

        program = self._cel.get(query)
        if program is None:
            env = celpy.Environment()
            program = self._cel[query] = env.program(env.compile(query))
        try:
            return bool(program.evaluate({"object": celpy.json_to_cel(remote)}))
        except Exception:  # noqa: BLE001 - CEL errors (missing fields) mean not ready, as in the provider
            return False


# --- the control plane --------------------------------------------------------------------


@dataclass
class Event:
    kind: str
    name: str
    message: str


@dataclass
class ControlPlane:
    """The API server and Crossplane: XRs, their composed resources, and reconciles."""

    pipeline: Callable[..., rendering.Rendered]
    compositions: dict[str, dict]
    schemas: dict
    provider: Provider
    xrs: dict[Key, dict] = field(default_factory=dict)
    composed: dict[Key, dict[str, dict]] = field(default_factory=dict)
    others: dict[Key, dict] = field(default_factory=dict)  # Secrets, ProviderConfigs
    events: list[Event] = field(default_factory=list)
    deleting: set[Key] = field(default_factory=set)  # refused by a Usage, replayed later

    def apply(self, resource: dict) -> None:
        key = key_of(resource)
        if resource["kind"] in XR_KINDS:
            current = self.xrs.get(key)
            admitted = xrds.admit(copy.deepcopy(resource), self.schemas)
            if current is not None:
                admitted["status"] = current.get("status", {})
            self.xrs[key] = admitted
        else:
            self.others[key] = copy.deepcopy(resource)

    def secrets(self) -> list[dict]:
        return [r for r in self.others.values() if r.get("kind") == "Secret"]

    def required_pool(self) -> list[dict]:
        return list(self.xrs.values()) + self.secrets()

    def delete(self, key: Key) -> str:
        """`kubectl delete` of a composite. As Crossplane's Usage webhook does, it is
        refused while a Usage is `of` it (the refusal is returned, "" when deleted); with
        replayDeletion the refused deletion is retried at every reconcile until it goes."""
        holders = sorted(k[2] for k, usage in self.others.items() if k[0] == "Usage"
                         and read.get_path(usage, "spec.of.kind") == key[0]
                         and read.get_path(usage, "spec.of.resourceRef.name") == key[2]
                         and k[1] == key[1])
        if holders:
            self.deleting.add(key)
            return (f"This resource is in-use by {len(holders)} usage(s), including the Usage "
                    f"{holders[0]!r}")
        self.deleting.discard(key)
        self.xrs.pop(key, None)
        for child in self.composed.pop(key, {}).values():
            self.delete_composed(child)
        return ""

    def reconcile_all(self) -> None:
        """One pass, parents before children, so a composite created in this pass (a
        hydration, a replica) is reconciled in it too, as Crossplane's watch would."""
        for key in sorted(self.deleting):
            self.delete(key)
        for kind in XR_KINDS:
            for key in sorted(k for k in self.xrs if k[0] == kind):
                if key in self.xrs:
                    self.reconcile(key)

    def observed_for(self, key: Key) -> list[dict]:
        observed = []
        for resource_name, resource in self.composed.get(key, {}).items():
            if resource["kind"] in XR_KINDS:
                current = self.xrs.get(key_of(resource), resource)
            elif resource["kind"] == "Object":
                current = self.provider.observe(resource)
            else:
                current = self.others.get(key_of(resource), resource)
            current = copy.deepcopy(current)
            current.setdefault("metadata", {}).setdefault("annotations", {})[
                rendering.RESOURCE_NAME_ANNOTATION] = resource_name
            observed.append(current)
        return observed

    def reconcile(self, key: Key) -> None:
        xr = self.xrs[key]
        rendered = self.pipeline(xr, self.compositions[key[0]], self.observed_for(key),
                                 self.required_pool())
        if rendered.fatal:
            self.events.append(Event(key[0], key[2], rendered.fatal[0]))
            return
        xr["status"] = rendered.composite.get("status", {})
        desired = {}
        for resource in rendered.resources:
            name = resource["metadata"]["annotations"][rendering.RESOURCE_NAME_ANNOTATION]
            desired[name] = resource
            self.apply_composed(resource)
        for name, gone in self.composed.get(key, {}).items():
            if name not in desired or key_of(desired[name]) != key_of(gone):
                self.delete_composed(gone)
        self.composed[key] = desired

    def apply_composed(self, resource: dict) -> None:
        if resource["kind"] == "Object":
            self.provider.apply(resource)
        else:
            self.apply(resource)

    def delete_composed(self, resource: dict) -> None:
        key = key_of(resource)
        if resource["kind"] == "Object":
            self.provider.delete(resource)
        elif resource["kind"] in XR_KINDS:
            self.xrs.pop(key, None)  # a composed composite: deleted with its parent
            for child in self.composed.pop(key, {}).values():
                self.delete_composed(child)
        else:
            self.others.pop(key, None)

    def of_kind(self, kind: str) -> list[dict]:
        return [xr for (k, _, _), xr in sorted(self.xrs.items()) if k == kind]


def step(control: ControlPlane, clusters: Iterable[Cluster]) -> float:
    """One round: every composite reconciles, then every cluster's controllers act.
    Returns the monotonic time the clusters acted at."""
    control.reconcile_all()
    now = time.monotonic()
    for cluster in clusters:
        cluster.tick(now)
    return now


def files_bytes(directory: Path) -> int:
    """Bytes in the files under a directory; symlinks (hf-cache snapshots) are not counted,
    so a blob two snapshots share counts once. A running agent renames and deletes part
    files meanwhile: what vanishes between listing and stat is not counted."""
    total = 0
    for parent, _, names in os.walk(directory):
        for name in names:
            try:
                status = os.lstat(os.path.join(parent, name))
            except FileNotFoundError:
                continue
            if stat.S_ISREG(status.st_mode):
                total += status.st_size
    return total


def kubectl_table(rows: list[list[str]]) -> list[str]:
    """Rows aligned in columns, as `kubectl get` prints them (indented for the demo)."""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip()
            for row in rows]


def all_text(resources: Iterable[dict]) -> str:
    return json.dumps(list(resources), sort_keys=True)


# --- time -----------------------------------------------------------------------------------


class Clock:
    """The composers' `now` in a simulation: wall-clock time plus whatever the story skips
    (a TTL of hours passes in one call of `advance`)."""

    def __init__(self) -> None:
        self.skipped = datetime.timedelta()

    def now(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.timezone.utc) + self.skipped

    def advance(self, by: datetime.timedelta) -> None:
        self.skipped += by


@contextlib.contextmanager
def function_server(clock: Clock) -> Iterator[str]:
    """The real FunctionRunner over real gRPC on loopback, in this process so that its
    clock is the simulation's; yields its address. `rendering.function_process` is the
    same server as its own process, for stories that need no clock."""
    address = f"127.0.0.1:{rendering.free_port()}"
    loop = asyncio.new_event_loop()
    servers: list[grpc.aio.Server] = []

    async def start() -> None:
        server = grpc.aio.server(options=rendering.GRPC_OPTIONS)
        grpcv1.add_FunctionRunnerServiceServicer_to_server(FunctionRunner(clock.now), server)
        server.add_insecure_port(address)
        await server.start()
        servers.append(server)

    thread = threading.Thread(target=loop.run_forever, name="function-server", daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(30)
    try:
        yield address
    finally:
        asyncio.run_coroutine_threadsafe(servers[0].stop(grace=None), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
