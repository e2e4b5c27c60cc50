"""The in-cluster APIs a node pod's agent would call, which a simulated cluster does not
serve, as files: the status ConfigMap a file every warmer merges its record into, the
warm-slot Leases flock'ed files, the Node's labels a file, the image reporter's pods and
events a file it reads and its summary a file it writes; each tick carries what the agents
wrote back into the API objects, and the API objects the reporter reads into its file
(design/simulation.md, "Nodes", "Engine images")."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from fleetcache.agent.progress import configmap_data
from fleetcache.devtools.simulation.api import Key, Objects
from fleetcache.devtools.simulation.nodes import Node
from fleetcache.devtools.simulation.pods import NodePod, PodsFile
from fleetcache.functions import read

NODE_CACHE_LABEL_PREFIX = "node-cache.fleetcache.dev/"  # the only labels node-label may set
SLOT_LEASE = re.compile(r"node-warm-slot-(\d+)$")
SLOT_LABEL = "fleetcache.dev/node-warm-slot"


class StandIns:
    """One cluster's file stand-ins, under its `configmaps/` and `slots/` directories;
    `label_node` is how node-cache labels reach the Node."""

    def __init__(self, root: Path, objects: Objects, nodes: Mapping[str, Node],
                 label_node: Callable[[str, Mapping[str, str | None]], None]):
        self.root = root
        self.objects = objects
        self.nodes = nodes
        self.label_node = label_node

    def status_file(self, namespace: str, name: str) -> Path:
        return self.root / "configmaps" / namespace / f"{name}.json"

    def slots_dir(self, namespace: str) -> Path:
        return self.root / "slots" / namespace

    def forget(self, key: Key) -> None:
        """A deleted ConfigMap takes its status file with it."""
        if key[0] == "ConfigMap":
            self.status_file(key[1], key[2]).unlink(missing_ok=True)

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
            for slot_name, lease in leases.items():
                path = directory / slot_name
                path.touch()
                holder = path.read_text().strip()
                lease.setdefault("spec", {})["holderIdentity"] = holder or None

    def rewrite(self, pod: NodePod, node: Node, argv: list[str]) -> list[str]:
        """This cluster serves no API: the status ConfigMap becomes a file merged into the
        ConfigMap's data every tick, the slot Leases flock'ed files, the Node's labels a file
        merged into the Node."""
        argv = list(argv)
        prune = "--prune-selector" in argv
        for flag in ("--prune-selector", "--pruner-lease"):  # the cluster prunes, in collect
            if flag in argv:
                at = argv.index(flag)
                del argv[at:at + 2]
        if "--status-configmap" in argv:
            at = argv.index("--status-configmap")
            namespace, _, name = argv[at + 1].partition("/")
            status_file = self.status_file(namespace or pod.namespace, name)
            argv[at:at + 2] = ["--status-file", str(status_file)]
            pod.status_files[status_file] = (("ConfigMap", namespace or pod.namespace, name),
                                             prune)
        if "--slots-namespace" in argv:
            at = argv.index("--slots-namespace")
            argv[at:at + 2] = ["--slots-dir", str(self.slots_dir(argv[at + 1]))]
        if "image-status" in argv and "--configmap" in argv:  # its summary replaces the keys it names
            at = argv.index("--configmap")
            namespace, _, name = argv[at + 1].partition("/")
            status_file = self.status_file(namespace or pod.namespace, name)
            argv[at:at + 2] = ["--status-file", str(status_file)]
            pod.summary_files[status_file] = ("ConfigMap", namespace or pod.namespace, name)
        if "image-status" in argv and "--pods-file" not in argv:
            namespace = argv[argv.index("--namespace") + 1] if "--namespace" in argv else pod.namespace
            selector = argv[argv.index("--selector") + 1] if "--selector" in argv else ""
            pod.pods_file = PodsFile(pod.directory / "pods.json", namespace, dict(
                term.partition("=")[::2] for term in selector.split(",") if term))
            argv += ["--pods-file", str(pod.pods_file.path)]
        if "node-label" in argv and "--labels-file" not in argv:
            pod.labels_file = pod.directory / "labels.json"
            pod.labels_file.write_text(json.dumps(node.labels, sort_keys=True))
            argv += ["--labels-file", str(pod.labels_file)]
        return argv

    def collect(self, pods: Iterable[NodePod]) -> None:
        """What the agents wrote through their stand-ins, back into the API objects: status
        records merged into their ConfigMap's data per node (records of nodes without a pod
        pruned when the warmer asked for pruning), node-cache labels into the Node."""
        writers: dict[Path, tuple[Key, bool, set[str]]] = {}
        for pod in pods:
            for status_file, (configmap_key, prune) in pod.status_files.items():
                writers.setdefault(status_file, (configmap_key, prune, set()))[2].add(pod.node)
            node = self.nodes.get(pod.node)
            if pod.labels_file is not None and node is not None:
                labels = read_json_file(pod.labels_file)
                if isinstance(labels, dict):
                    self.label_node(node.name, {
                        **{k: None for k in node.labels if k.startswith(NODE_CACHE_LABEL_PREFIX)},
                        **{k: v for k, v in labels.items()
                           if k.startswith(NODE_CACHE_LABEL_PREFIX) and isinstance(v, str)}})
        for pod in pods:
            for status_file, key in pod.summary_files.items():
                configmap, summary = self.objects.get(key), read_json_file(status_file)
                if configmap is not None and isinstance(summary, dict):
                    configmap["data"] = {**(configmap.get("data") or {}), **configmap_data(summary)}
            if pod.pods_file is not None:
                self.write_pods_file(pod.pods_file)
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


    def write_pods_file(self, query: PodsFile) -> None:
        """What image-status would list: the namespace's Pods its selector matches (as the API
        serves them) and the Events about Pods there, written atomically."""
        pods = [obj for (kind, ns, _), obj in sorted(self.objects.items())
                if kind == "Pod" and ns == query.namespace and all(
                    (obj["metadata"].get("labels") or {}).get(k) == v for k, v in query.selector.items())]
        events = [obj for (kind, ns, _), obj in sorted(self.objects.items())
                  if kind == "Event" and ns == query.namespace
                  and read.get_path(obj, "involvedObject.kind") == "Pod"]
        tmp = query.path.with_name(f".{query.path.name}.tmp")
        tmp.write_text(json.dumps({"pods": pods, "events": events}, sort_keys=True))
        os.replace(tmp, query.path)


def read_json_file(path: Path) -> Any:
    """A JSON file an agent replaces atomically; None when absent or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
