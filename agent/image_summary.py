"""Where a cache's engine images stand on its nodes, from the keeper pods and their events: planning
only, no API (agent/image_reporter.py lists the pods and writes the summary).

Pods and events are dicts as the API serves them (camelCase; the client's objects through
`ApiClient().sanitize_for_serialization`). A pod not yet scheduled (no `spec.nodeName`) counts
nowhere; of several pods on one node (a DaemonSet rolling its pods) the newest not being deleted
speaks for it. A node is ready when its keeper pod is Ready; failed when a `pull-<i>` init container
waits on a pull error (ErrImagePull, ImagePullBackOff, InvalidImageName, ErrImageNeverPull: the
kubelet's reason and message) or its command exited non-zero (CommandFailed, also while it waits in
CrashLoopBackOff after such an exit), or, for a pod of image volumes that has started no container,
when the newest pull event on it is a failure (Failed: ErrImagePull, BackOff: ImagePullBackOff);
otherwise it is pulling. An image is ready on a node when its `pull-<i>` exited 0 there, or, as an
image volume `image-<i>`, when the pod is Ready.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from fleetcache import reasons
from fleetcache.messages import clipped

PULL_PREFIX = "pull-"
VOLUME_PREFIX = "image-"
PULL_ERRORS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
CRASH_LOOP = "CrashLoopBackOff"
EVENT_REASONS = {"Failed": "ErrImagePull", "BackOff": "ImagePullBackOff"}  # the kubelet's event → its wait reason
MESSAGE_LIMIT = 120


@dataclass(frozen=True)
class Failure:
    node: str
    reason: str
    message: str

    def as_dict(self) -> dict:
        return {"node": self.node, "reason": self.reason, "message": self.message}


@dataclass
class Summary:
    desired: int = 0
    ready: int = 0
    pulling: int = 0
    failed: int = 0
    ready_nodes: dict[str, int] = field(default_factory=dict)  # by image, in the order the pods list them
    first_failure: Failure | None = None

    def as_dict(self) -> dict:
        return {"desired": self.desired, "ready": self.ready, "pulling": self.pulling, "failed": self.failed,
                "images": [{"image": image, "readyNodes": n} for image, n in self.ready_nodes.items()],
                "firstFailure": self.first_failure.as_dict() if self.first_failure else None}

    def as_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value) -> list:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _index(name: str, prefix: str) -> int | None:
    rest = name[len(prefix):] if isinstance(name, str) and name.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else None


def _ready(pod: dict) -> bool:
    conditions = _list(_dict(pod.get("status")).get("conditions"))
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _pulls(pod: dict) -> list[tuple[str, str]]:
    """(container name, image) of each `pull-<i>` init container, in index order."""
    found = [(c.get("name"), str(c.get("image") or "")) for c in _list(_dict(pod.get("spec")).get("initContainers"))
             if _index(c.get("name", ""), PULL_PREFIX) is not None]
    return sorted(found, key=lambda pair: _index(pair[0], PULL_PREFIX) or 0)


def _volumes(pod: dict) -> list[str]:
    """The reference of each `image-<i>` image volume, in index order."""
    found = [(v.get("name"), str(_dict(v.get("image")).get("reference") or ""))
             for v in _list(_dict(pod.get("spec")).get("volumes"))
             if _index(v.get("name", ""), VOLUME_PREFIX) is not None and isinstance(v.get("image"), dict)]
    return [reference for _, reference in sorted(found, key=lambda pair: _index(pair[0], VOLUME_PREFIX) or 0)]


def _statuses(pod: dict, key: str) -> dict[str, dict]:
    return {s.get("name"): s for s in _list(_dict(pod.get("status")).get(key))}


def _exit_code(terminated: dict) -> int | None:
    code = terminated.get("exitCode")
    return code if isinstance(code, int) else None


def _pull_failure(name: str, image: str, status: dict) -> tuple[str, str] | None:
    """The reason and message of a `pull-<i>` that failed, or None."""
    state, last = _dict(status.get("state")), _dict(status.get("lastState"))
    waiting, terminated = _dict(state.get("waiting")), _dict(state.get("terminated"))
    if waiting.get("reason") in PULL_ERRORS:
        return str(waiting["reason"]), clipped(str(waiting.get("message") or ""), MESSAGE_LIMIT)
    if not terminated and waiting.get("reason") == CRASH_LOOP:
        terminated = _dict(last.get("terminated"))
    code = _exit_code(terminated)
    if code:
        said = str(terminated.get("message") or terminated.get("reason") or "").strip()
        return reasons.CommandFailed, f"{name} ({image}) exited {code}: {clipped(said, MESSAGE_LIMIT)}"
    return None


def _started_a_container(pod: dict) -> bool:
    return any(_dict(s.get("state")).get("running") or _dict(s.get("state")).get("terminated")
               for key in ("initContainerStatuses", "containerStatuses")
               for s in _statuses(pod, key).values())


def _event_time(event: dict) -> str:
    """RFC 3339 times in UTC sort as strings; an event carries one of these."""
    series = _dict(event.get("series"))
    return str(series.get("lastObservedTime") or event.get("lastTimestamp") or event.get("eventTime")
               or _dict(event.get("metadata")).get("creationTimestamp") or "")


def _volume_failure(pod: dict, events: list[dict]) -> tuple[str, str] | None:
    """The newest pull event on a pod of image volumes that started no container, if it is a failure."""
    meta = _dict(pod.get("metadata"))
    mine = [e for e in events if _dict(e.get("involvedObject")).get("kind") == "Pod"
            and _dict(e.get("involvedObject")).get("name") == meta.get("name")
            and _dict(e.get("involvedObject")).get("uid") in (None, meta.get("uid"))
            and "pull" in str(e.get("message") or "").lower()]
    if not mine or _started_a_container(pod):
        return None
    newest = max(mine, key=_event_time)
    reason = EVENT_REASONS.get(str(newest.get("reason")))
    return (reason, clipped(str(newest.get("message") or ""), MESSAGE_LIMIT)) if reason else None


def _failure(pod: dict, events: list[dict]) -> tuple[str, str] | None:
    statuses = _statuses(pod, "initContainerStatuses")
    for name, image in _pulls(pod):
        failed = _pull_failure(name, image, statuses.get(name, {}))
        if failed:
            return failed
    return _volume_failure(pod, events) if _volumes(pod) else None


def _speaking_pods(pods: list[dict]) -> dict[str, dict]:
    """The pod that speaks for each node: the newest one not being deleted (a DaemonSet rolling its pods)."""
    ranked: dict[str, tuple[tuple[bool, str, str], dict]] = {}
    for pod in pods:
        node = _dict(pod.get("spec")).get("nodeName")
        if not isinstance(node, str) or not node:
            continue
        meta = _dict(pod.get("metadata"))
        rank = (not meta.get("deletionTimestamp"), str(meta.get("creationTimestamp") or ""), str(meta.get("name")))
        if node not in ranked or rank > ranked[node][0]:
            ranked[node] = (rank, pod)
    return {node: pod for node, (_, pod) in sorted(ranked.items())}


def summarize(pods: list, events: list) -> Summary:
    """The summary of the keeper pods (see the module docstring); total over malformed input."""
    events = _list(events)
    summary = Summary()
    for node, pod in _speaking_pods(_list(pods)).items():
        summary.desired += 1
        ready = _ready(pod)
        statuses = _statuses(pod, "initContainerStatuses")
        for name, image in _pulls(pod):
            done = _dict(_dict(statuses.get(name, {}).get("state")).get("terminated"))
            summary.ready_nodes[image] = summary.ready_nodes.get(image, 0) + (_exit_code(done) == 0)
        for reference in _volumes(pod):
            summary.ready_nodes[reference] = summary.ready_nodes.get(reference, 0) + ready
        failed = None if ready else _failure(pod, events)
        if ready:
            summary.ready += 1
        elif failed:
            summary.failed += 1
            if summary.first_failure is None:  # nodes come in name order
                summary.first_failure = Failure(node, *failed)
        else:
            summary.pulling += 1
    return summary
