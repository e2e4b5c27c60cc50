"""`image-status`, the doing: read the keeper pods and their events, write the summary
(agent/image_summary.py plans it), every few seconds.

In a cluster it lists the pods by label selector and the namespace's Pod events, and merge-patches
key `status.json` of the status ConfigMap, every pass, so a ConfigMap recreated or overwritten
meanwhile has it back within one interval. The
simulation's stand-ins: a JSON file of `{"pods": [...], "events": [...]}` the simulation writes, and
a status file `{"status.json": "<summary>"}` replaced whole each pass.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from fleetcache.agent.cli_options import bad
from fleetcache.agent.disk import write_atomic
from fleetcache.agent.image_summary import summarize

log = logging.getLogger("fleetcache.agent")

STATUS_KEY = "status.json"
INTERVAL_ENV = "FLEETCACHE_IMAGE_STATUS_INTERVAL"  # seconds between passes (10)
DEFAULT_INTERVAL = 10.0


def as_dicts(objects: list) -> list[dict]:
    """The client's objects as the API serves them (camelCase JSON)."""
    from kubernetes.client import ApiClient

    return ApiClient().sanitize_for_serialization(objects)


class ApiPods:
    def __init__(self, core, namespace: str, selector: str):
        self.core, self.namespace, self.selector = core, namespace, selector

    def read(self) -> tuple[list, list]:
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=self.selector).items
        events = self.core.list_namespaced_event(self.namespace, field_selector="involvedObject.kind=Pod").items
        return as_dicts(pods), as_dicts(events)


class FilePods:
    """The simulation's stand-in: the pods and events it wrote last."""

    def __init__(self, path: Path):
        self.path = path

    def read(self) -> tuple[list, list]:
        try:
            listed = json.loads(self.path.read_text())
        except (OSError, ValueError) as err:
            raise bad("--pods-file", f"cannot read {str(self.path)!r} ({type(err).__name__})") from None
        if not isinstance(listed, dict):
            raise bad("--pods-file", f'{str(self.path)!r} is not a JSON object {{"pods": [...], "events": [...]}}')
        return listed.get("pods") or [], listed.get("events") or []


class ConfigMapStatus:
    def __init__(self, core, namespace: str, name: str):
        self.core, self.namespace, self.name = core, namespace, name

    def write(self, summary: str) -> None:
        self.core.patch_namespaced_config_map(self.name, self.namespace, {"data": {STATUS_KEY: summary}})


class FileStatus:
    def __init__(self, path: Path):
        self.path = path

    def write(self, summary: str) -> None:
        write_atomic(self.path, (json.dumps({STATUS_KEY: summary}, sort_keys=True) + "\n").encode(), durable=False)


class Reporter:
    """One pass reads, plans and writes; a pass that fails is logged and the next one tries again."""

    def __init__(self, pods: Any, status: Any):
        self.pods, self.status = pods, status

    def once(self) -> str:
        pods, events = self.pods.read()
        summary = summarize(pods, events).as_json()
        self.status.write(summary)
        return summary

    def safely(self) -> None:
        try:
            self.once()
        except Exception as err:  # noqa: BLE001 - an API outage or a file not written yet: the next pass retries
            status = getattr(err, "status", None)
            log.warning("could not report the image status (%s%s); retrying", type(err).__name__,
                        f" {status}" if status else "")
