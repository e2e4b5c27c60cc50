"""The kubelet of a simulated cluster's nodes: a pod's volumes set up as host directories,
its init containers run in order, its containers run as real agent processes (restarted
with a backoff) and probed for readiness, and the Pod objects written as `kubectl get pods`
would show them (design/simulation.md, "Nodes")."""

from __future__ import annotations

import base64
import os
import re
import sys
import time
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path

from fleetcache.devtools.simulation.api import Objects
from fleetcache.devtools.simulation.images import ImageStore, PullError
from fleetcache.devtools.simulation.nodes import Node
from fleetcache.devtools.simulation.pods import Container, NodePod, Unmountable
from fleetcache.devtools.simulation.scheduling import selector_matches
from fleetcache.devtools.simulation.standins import StandIns
from fleetcache.devtools.simulation.storage import Volumes, translate
from fleetcache.functions import read

# The agent's periods, compressed as the demo's rounds compress a reconcile interval.
AGENT_PERIODS = {"FLEETCACHE_NODE_AGENT_INTERVAL": "1", "FLEETCACHE_NODE_STATUS_INTERVAL": "1",
                 "FLEETCACHE_NODE_RECHECK_SECONDS": "5", "FLEETCACHE_NODE_SLOT_POLL_SECONDS": "0.5"}
PROBE_PERIOD = 1.0  # seconds between readiness probes of one container (periodSeconds: 30)
AGENT_COMMAND = ["fleetcache-agent"]


def expand(value: str, env: Mapping[str, str]) -> str:
    """$(VAR) references in command, args and env, expanded as the kubelet does ($$ escapes)."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), value)


@cache
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


def agent_argv(command: list[str]) -> list[str] | None:
    """The process for a container command: the agent runs from this checkout; any other
    image cannot run here."""
    if command[:1] != AGENT_COMMAND:
        return None
    return [sys.executable, "-c", "from fleetcache.agent.cli import main; main()",
            *command[1:]]


def host_path(node: Node, source: Mapping, volume: str) -> Path:
    """hostPath on the node: type Directory must exist (the kubelet's type check),
    DirectoryOrCreate is created."""
    path = node.host(source.get("path", "/"))
    if source.get("type") == "Directory" and not path.is_dir():
        raise Unmountable(f"MountVolume.SetUp failed for volume {volume!r}: hostPath type "
                          f"check failed: {source.get('path')} is not a directory")
    path.mkdir(parents=True, exist_ok=True)
    return path


class Kubelet:
    """Every node's kubelet at once: it runs the pods bound to a node of `nodes`."""

    def __init__(self, objects: Objects, nodes: Mapping[str, Node], volumes: Volumes,
                 stand_ins: StandIns):
        self.objects = objects
        self.nodes = nodes
        self.volumes = volumes
        self.stand_ins = stand_ins
        self.images = ImageStore(volumes.root / "images")  # the runtime's, shared by the nodes here

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

    def report(self, pods: Iterable[NodePod]) -> None:
        """The Pod objects, as `kubectl get pods` would show them."""
        for pod in pods:
            self.objects[("Pod", pod.namespace, pod.name)] = pod.manifest()

    @staticmethod
    def restart(container: Container) -> None:
        """Started now, or after CrashLoopBackOff's doubling delay (compressed to half-seconds)."""
        if container.process is not None:
            if time.monotonic() < container.not_before:
                return
            container.restarts += 1
            container.not_before = time.monotonic() + min(0.5 * 2 ** container.restarts, 30.0)
        container.start()

    @staticmethod
    def probe(container: Container, node: Node) -> None:
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
                directory = self.volumes.volume_dir(pod.namespace, claim_name)
                directory.mkdir(parents=True, exist_ok=True)
                return directory
            if not selector_matches(read.get_path(pv, "spec.nodeAffinity.required"), node):
                raise Unmountable("node(s) had volume node affinity conflict")
            return host_path(node, read.get_path(pv, "spec.hostPath", {}) or {}, name)
        if "hostPath" in volume:
            return host_path(node, volume["hostPath"], name)
        if "image" in volume:
            try:
                return self.images.mount(volume["image"]["reference"])
            except PullError as err:
                raise Unmountable(str(err)) from err
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
        argv = agent_argv([translate(part, mounts) for part in command])
        if argv is not None:
            argv = self.stand_ins.rewrite(pod, node, argv)
            subcommand = command[1] if len(command) > 1 else ""
            if "--termination-log" in agent_flags(subcommand):
                argv += ["--termination-log", str(termination_log)]
        return Container(spec, argv, env, mounts, termination_log,
                         pod.directory / f"{spec['name']}.log", spec_env=spec_env)
