"""The kubelet of a simulated cluster's nodes: a pod's volumes set up as host directories,
each container's image pulled onto its node (node_images), its init containers run in order
(a sidecar kept running once its startup probe passed), its containers run as real agent
processes or as their image's commands (restarted with a backoff) and probed for readiness,
the Pod objects written as `kubectl get pods` would show them, the kubelet's Events about
them, and each node's image GC (design/simulation.md, "Nodes" and "Engine images")."""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import TypeVar

from fleetcache.devtools.simulation.api import Objects
from fleetcache.devtools.simulation.clock import Clock
from fleetcache.devtools.simulation.images import ImageStore
from fleetcache.devtools.simulation.node_images import GC_PERIOD_SECONDS, GcResult, Image, names_of, pullable
from fleetcache.devtools.simulation.nodes import Node
from fleetcache.devtools.simulation.pods import Container, NodePod, Program, Unmountable
from fleetcache.devtools.simulation.registry_pulls import ANONYMOUS, PullError, basic_auth
from fleetcache.devtools.simulation.scheduling import selector_matches
from fleetcache.devtools.simulation.standins import StandIns
from fleetcache.devtools.simulation.storage import Volumes, translate
from fleetcache.functions import read

# The agent's periods, compressed as the demo's rounds compress a reconcile interval.
AGENT_PERIODS = {"FLEETCACHE_NODE_AGENT_INTERVAL": "1", "FLEETCACHE_NODE_STATUS_INTERVAL": "1",
                 "FLEETCACHE_NODE_RECHECK_SECONDS": "5", "FLEETCACHE_NODE_SLOT_POLL_SECONDS": "0.5",
                 "FLEETCACHE_IMAGE_STATUS_INTERVAL": "1"}
PROBE_PERIOD = 1.0  # seconds between readiness probes of one container (periodSeconds: 30)
AGENT_COMMAND = ["fleetcache-agent"]
# The kubelet's image pull backoff (kubelet.go: flowcontrol.NewBackOff(backOffPeriod 10 s,
# MaxImageBackOff 300 s)), on the simulation's clock.
PULL_BACKOFF_SECONDS = 10.0
PULL_BACKOFF_MAX_SECONDS = 300.0
# The pull secrets MakeDockerKeyring reads (pkg/credentialprovider/secrets/secrets.go): type -> data key.
DOCKER_CONFIG_KEYS = {"kubernetes.io/dockerconfigjson": ".dockerconfigjson", "kubernetes.io/dockercfg": ".dockercfg"}

Pulled = TypeVar("Pulled")


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


def default_pull_policy(reference: str) -> str:
    """The API server's default imagePullPolicy: Always for `:latest` or no tag, else
    IfNotPresent (pkg/apis/core/v1/defaults.go SetDefaults_Container)."""
    return "Always" if names_of(reference)[1] == "latest" else "IfNotPresent"


def registry_key(location: str) -> str:
    """A keyring's key for a docker config entry, as BasicDockerKeyring.Add makes it: the
    location without its scheme, a trailing /v1/ or /v2/, or a trailing slash."""
    key = location.split("://", 1)[-1]
    for suffix in ("/v2/", "/v1/"):
        key = key.removesuffix(suffix)
    return key.rstrip("/")


def docker_config_entry(entry: Mapping) -> dict[str, str]:
    """An entry's credentials as headers: its `auth` (base64 user:password, padded or not)
    wins over its username and password (pkg/credentialprovider/config.go
    DockerConfigEntry.UnmarshalJSON, decodeDockerConfigFieldAuth)."""
    field = entry.get("auth") or ""
    if not field:
        return basic_auth(entry.get("username", ""), entry.get("password", ""))
    user, colon, password = base64.b64decode(field + "=" * (-len(field) % 4)).decode().partition(":")
    if not colon:
        raise ValueError("unable to parse auth field, must be formatted as base64(username:password)")
    return basic_auth(user, password)


def pull_credentials(secrets: Iterable[Mapping], reference: str) -> list[dict[str, str]]:
    """What the pod's keyring (MakeDockerKeyring, then Lookup) holds for `reference`: the
    credentials of every entry of its dockerconfigjson (`{"auths": {KEY: entry}}`) and
    dockercfg (the bare map) Secrets whose key is the image's registry host, or a path prefix
    of its repository, most specific key first (the keyring's reverse-sorted index). Data that
    does not parse fails the pull, as MakeDockerKeyring's error fails PullImage."""
    repository = names_of(reference)[0]
    found: list[tuple[str, dict[str, str]]] = []
    for secret in secrets:
        key = DOCKER_CONFIG_KEYS.get(secret.get("type", ""), "")
        data = (secret.get("data") or {}).get(key)
        if not data:
            continue
        try:
            config = json.loads(base64.b64decode(data))
            auths = (config.get("auths") or {}) if key == ".dockerconfigjson" else config
            found += [(registry_key(location), docker_config_entry(entry)) for location, entry in auths.items()]
        except (ValueError, TypeError, AttributeError) as err:
            name = read.get_path(secret, "metadata.name", "")
            raise PullError(f'failed to pull image "{reference}": secret "{name}": {key}: {err}') from err
    matching = [(k, auth) for k, auth in found if repository == k or repository.startswith(f"{k}/")]
    return [auth for _, auth in sorted(matching, key=lambda match: match[0], reverse=True)]


def pull_image(reference: str, secrets: Iterable[Mapping], pull: Callable[[Mapping[str, str]], Pulled]) -> Pulled:
    """PullImage (pkg/kubelet/kuberuntime/kuberuntime_image.go): anonymous when the keyring
    holds nothing for the image's registry, else `pull` with each credential in turn until one
    works; none does: the errors, as utilerrors.NewAggregate words them (one: its message)."""
    tries = pull_credentials(secrets, reference)
    if not tries:
        return pull(ANONYMOUS)
    errors: list[str] = []
    for auth in tries:
        try:
            return pull(auth)
        except PullError as err:
            errors.append(str(err))
    distinct = list(dict.fromkeys(errors))
    raise PullError(distinct[0] if len(distinct) == 1 else f"[{', '.join(distinct)}]")


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
                 stand_ins: StandIns, clock: Clock | None = None):
        """`clock`: what image pulls, their backoff and image GC time by (none: the machine's)."""
        self.objects = objects
        self.nodes = nodes
        self.volumes = volumes
        self.stand_ins = stand_ins
        self.clock = clock
        self.images = ImageStore(volumes.root / "images")  # image volumes' content, shared by the nodes
        self.events = 0

    def seconds(self) -> float:
        return self.clock.seconds() if self.clock is not None else time.monotonic()

    def run_pod(self, pod: NodePod) -> None:
        """The kubelet's loop for one pod: mount (retried until it works), init containers in
        order (a sidecar started and its startup probe passed before the next), then the
        containers, each once its image is on the node, restarted when they exit (init
        containers when they fail), probed for readiness."""
        node = self.nodes[pod.node]
        if not pod.init and not pod.containers:
            try:
                self.set_up(pod, node)
            except Unmountable as err:
                pod.message = str(err)
                return
        self.refresh_config_volumes(pod)
        for container in pod.init:
            if not self.keep_running(pod, container, node, restart_always=container.sidecar):
                pod.message = "PodInitializing"
                return
            if container.sidecar:
                self.start_up(container, node)
                if not container.started_up:
                    pod.message = "PodInitializing"
                    return
                self.probe(container, node)
            elif container.exited() != 0:
                pod.message = "PodInitializing"
                return
        pod.phase, pod.message = "Running", ""
        for container in pod.containers:
            self.keep_running(pod, container, node, restart_always=True)
            self.probe(container, node)

    def keep_running(self, pod: NodePod, container: Container, node: Node, *,
                     restart_always: bool) -> bool:
        """Whether the container has been created: started once its image is on the node,
        restarted when it exits (restartPolicy Always) or fails."""
        if not container.started:
            if not self.ensure_image(pod, container, node):
                return False
            container.start()
            return True
        code = container.exited()
        if code is not None and (restart_always or code != 0):
            container.ready = False
            self.restart(container)
        return True

    def ensure_image(self, pod: NodePod, container: Container, node: Node) -> bool:
        """EnsureImageExists (pkg/kubelet/images/image_manager.go) for a container that is not
        the agent: by its imagePullPolicy, the image present, or pulled, or the container waits
        (ContainerCreating while pulling, ErrImagePull, ImagePullBackOff, ErrImageNeverPull),
        each step an Event on the pod in the image manager's words."""
        if container.argv is not None:
            return True
        reference = container.spec.get("image", "")
        now = self.seconds()
        if not pullable(reference):
            container.program = self.program(container, None)
            return True
        try:
            image = node.images.find(reference)
            policy = container.spec.get("imagePullPolicy") or default_pull_policy(reference)
            if policy == "Never" and image is None:
                message = f'Container image "{reference}" is not present with pull policy of Never'
                self.wait(pod, container, "ErrImageNeverPull", message, "Warning")
                return False
            if image is None or policy == "Always":
                if now < container.pull_not_before:
                    self.wait(pod, container, "ImagePullBackOff", f'Back-off pulling image "{reference}"',
                              "Normal", "BackOff")
                    return False
                starting = container.pulling != reference
                secrets = self.pull_secrets(pod, report=starting)
                if starting:
                    container.pulling = reference
                    self.event(pod, "Normal", "Pulling", f'Pulling image "{reference}"')
                pull = pull_image(reference, secrets, lambda auth: node.images.pull(reference, now, auth))
                if now < pull.done_at:
                    container.waiting = ("PodInitializing" if container in pod.init else "ContainerCreating", "")
                    return False
                image = node.images.finish(pull)
                self.event(pod, "Normal", "Pulled", f'Successfully pulled image "{reference}" in '
                           f"{image.size / node.images.bandwidth:.3f}s ({now - pull.started_at:.3f}s "
                           f"including waiting). Image size: {image.size} bytes.")
            else:
                self.event(pod, "Normal", "Pulled", f'Container image "{reference}" already present on machine')
        except PullError as err:
            container.pulling = ""
            container.pull_failures += 1
            container.pull_not_before = now + min(
                PULL_BACKOFF_SECONDS * 2 ** (container.pull_failures - 1), PULL_BACKOFF_MAX_SECONDS)
            container.waiting = ("ErrImagePull", str(err))
            self.event(pod, "Warning", "Failed", f'Failed to pull image "{reference}": {err}')
            return False
        container.pull_failures, container.pulling = 0, ""
        container.image_id = image.id
        container.program = self.program(container, image)
        return True

    def pull_secrets(self, pod: NodePod, *, report: bool) -> list[dict]:
        """getPullSecretsForPod (pkg/kubelet/kubelet_pods.go): the Secrets the pod's
        imagePullSecrets name in its namespace. One missing is left out, the pull going on
        without it; `report`: named in a Warning FailedToRetrieveImagePullSecret event."""
        names = [ref.get("name", "") for ref in pod.spec.get("imagePullSecrets") or [] if ref.get("name")]
        found = {name: self.objects.get(("Secret", pod.namespace, name)) for name in names}
        missing = [name for name, secret in found.items() if secret is None]
        if report and missing:
            self.event(pod, "Warning", "FailedToRetrieveImagePullSecret",
                       f"Unable to retrieve some image pull secrets ({', '.join(missing)}); "
                       "attempting to pull the image may not succeed.")
        return [secret for secret in found.values() if secret is not None]

    def program(self, container: Container, image: Image | None) -> Program:
        """What the runtime would run: the spec's command, else the image's entrypoint; the
        spec's args, else (no command in the spec) the image's cmd (the kubelet's rule)."""
        command = container.spec.get("command") or (image.entrypoint if image else [])
        args = container.spec.get("args")
        if args is None and not container.spec.get("command"):
            args = image.cmd if image else []
        argv = [expand(part, container.spec_env) for part in [*command, *(args or [])]]
        completes = container.init and not container.sidecar
        return Program(argv, image.executables if image else None, completes)

    def wait(self, pod: NodePod, container: Container, reason: str, message: str,
             event_type: str, event_reason: str = "") -> None:
        container.waiting = (reason, message)
        self.event(pod, event_type, event_reason or reason, message)

    def event(self, pod: NodePod, event_type: str, reason: str, message: str) -> None:
        """An Event about the pod from the kubelet, counted up when it repeats (the event
        recorder's correlator)."""
        digest = hashlib.sha256(f"{pod.name}/{reason}/{message}".encode()).hexdigest()[:16]
        key = ("Event", pod.namespace, f"{pod.name}.{digest}")
        stamp = self.timestamp()
        event = self.objects.get(key)
        if event is not None:
            event.update(count=event["count"] + 1, lastTimestamp=stamp)
            return
        self.objects[key] = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": key[2], "namespace": pod.namespace},
            "involvedObject": {"kind": "Pod", "namespace": pod.namespace, "name": pod.name,
                               "apiVersion": "v1"},
            "reason": reason, "message": message, "type": event_type, "count": 1,
            "source": {"component": "kubelet", "host": pod.node},
            "firstTimestamp": stamp, "lastTimestamp": stamp}

    def timestamp(self) -> str:
        now = self.clock.now() if self.clock is not None else datetime.datetime.now(datetime.UTC)
        return now.strftime("%Y-%m-%dT%H:%M:%SZ")

    def start_up(self, container: Container, node: Node) -> None:
        """A sidecar's startupProbe, every PROBE_PERIOD seconds of the clock until it passes
        (none: started once running)."""
        if container.started_up or container.exited() is not None:
            return
        command = read.get_path(container.spec, "startupProbe.exec.command")
        if not command:
            container.started_up = True
        elif self.seconds() - container.probed_at >= PROBE_PERIOD:
            container.probed_at = self.seconds()
            container.started_up = run_probe([translate(expand(part, container.spec_env),
                                                        container.mounts) for part in command])

    def report(self, pods: Iterable[NodePod]) -> None:
        """The Pod objects, as `kubectl get pods` would show them, and the Nodes with the
        images on them; each node's image GC every GC_PERIOD_SECONDS."""
        pods = list(pods)
        for pod in pods:
            self.objects[("Pod", pod.namespace, pod.name)] = pod.manifest()
        for node in self.nodes.values():
            if self.seconds() - node.images.last_gc >= GC_PERIOD_SECONDS:
                self.image_gc(node, pods)
            self.objects[("Node", "", node.name)] = node.manifest()

    def image_gc(self, node: Node, pods: Iterable[NodePod]) -> GcResult:
        """The node's image GC: in use, the image of every container its pods have in the
        runtime (running or exited: GetPods(true)); the images its pods mount as volumes
        the runtime refuses to remove."""
        here = [pod for pod in pods if pod.node == node.name]
        in_use = {c.image_id for pod in here for c in [*pod.init, *pod.containers] if c.image_id}
        mounted = {image_id for pod in here for image_id in pod.volume_images}
        node.images.last_gc = self.seconds()
        return node.images.garbage_collect(self.seconds(), in_use, mounted)

    def restart(self, container: Container) -> None:
        """Started now, or after CrashLoopBackOff's doubling delay (compressed to half-seconds)."""
        if container.started:
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
        running = container.started and container.exited() is None
        if not (command and running and node.ready):
            container.ready = running and node.ready and not command
        elif time.monotonic() - container.probed_at >= PROBE_PERIOD:
            container.probed_at = time.monotonic()
            container.ready = run_probe([translate(expand(part, container.spec_env),
                                                   container.mounts) for part in command])

    def set_up(self, pod: NodePod, node: Node) -> None:
        """Volumes to host directories, then each container's process (Unmountable: retry)."""
        volumes = {v["name"]: self.volume_host(pod, v, node) for v in pod.spec.get("volumes", [])}
        pod.init = [self.container(pod, spec, node, volumes, init=True)
                    for spec in pod.spec.get("initContainers", [])]
        pod.containers = [self.container(pod, spec, node, volumes, init=False)
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
            reference = volume["image"]["reference"]
            try:  # KEP-4639: pulled with the pod's pull secrets, as its containers' images
                directory = pull_image(reference, self.pull_secrets(pod, report=True),
                                       lambda auth: self.images.mount(reference, auth))
            except PullError as err:  # the image manager's event, as for a container's image
                self.event(pod, "Warning", "Failed", f'Failed to pull image "{reference}": {err}')
                raise Unmountable(f"ErrImagePull: {err}") from err
            image_id, size = self.images.described(reference)
            pod.volume_images.add(node.images.add_volume_image(reference, image_id, size,
                                                               self.seconds()).id)
            return directory
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

    def container(self, pod: NodePod, spec: dict, node: Node, volumes: dict[str, Path], *,
                  init: bool) -> Container:
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
                         pod.directory / f"{spec['name']}.log", spec_env=spec_env,
                         clock=self.seconds, init=init,
                         sidecar=init and spec.get("restartPolicy") == "Always")
