"""The node agent's two containers (design/node-tier.md §3.5): `node-prepare` and `node-label`.

`prepare` is the only privileged code of the node tier and needs one capability, CHOWN: it
creates `<root>/<ns>/<cache>` for every placed cache, owned by the warmer's uid 65532, with
`.fleetcache/node-check.json {dedicated, sizeBytes, freeBytes}`, and deletes cache directories
the keep-list no longer holds, or holds as removed longer than afterRemoval ago (chowned back to
root first, so nothing owned by a tenant's uid survives mid-delete). It never touches anything
outside --root: names must be DNS labels, and a symlink anywhere on the way is refused.

`label` (non-root, no capabilities) sets `node-cache.fleetcache.dev/<k>=<commit>` on its own node
for each placed cache whose node copy has a valid node-ready.json, and removes the labels of
caches no longer ready or placed. The key comes from the directory's path, never from the
marker's content; only keys under that prefix are ever touched.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
from datetime import UTC, datetime
from pathlib import Path

from fleetcache import reasons
from fleetcache.agent.disk import fsync_dir, write_atomic
from fleetcache.agent.errors import AgentError
from fleetcache.agent.node_plan import (
    LABEL_PREFIX,
    OWNER_UID,
    Kept,
    label_patch,
    parse_keep,
    plan_prepare,
)
from fleetcache.agent.node_warm import CHECK_FILE, READY_FILE, has_snapshot, read_json, state_file
from fleetcache.shapes import is_dns_label, is_resolved_commit
from fleetcache.volume import STATE_DIR

log = logging.getLogger("fleetcache.agent")

MOUNTINFO_ENV = "FLEETCACHE_MOUNTINFO"  # a mountinfo file to read instead of /proc/self/mountinfo


def read_keep(path: Path) -> dict[tuple[str, str], Kept] | None:
    """The keep-list, or None (act on nothing) when it is missing or invalid: a ConfigMap volume not
    populated yet must never read as "keep nothing" and delete every cache on the node."""
    try:
        return parse_keep(json.loads(path.read_text()))
    except (OSError, ValueError) as err:
        log.warning("keep-list %s unusable (%s); changing nothing", path, err)
        return None


# -- prepare -------------------------------------------------------------------------------------

def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040 ...)."""
    return field.encode().decode("unicode_escape") if "\\" in field else field


def is_dedicated(root: Path) -> bool:
    """True when `root` is a mount point whose mounted root is its filesystem's root (per mountinfo):
    a disk of its own, not a directory of the node's root filesystem. In a container the hostPath is
    always a bind mount; field 4 is then the host directory within its filesystem, "/" only for a
    filesystem mounted exactly there."""
    real = os.path.realpath(root)
    dedicated = False
    try:
        lines = Path(os.environ.get(MOUNTINFO_ENV, "/proc/self/mountinfo")).read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        fields = line.split(" ")
        if len(fields) > 4 and _unescape(fields[4]) == real:
            dedicated = _unescape(fields[3]) == "/"  # the last mount on a path is the one seen
    return dedicated


def _is_plain_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except FileNotFoundError:
        return False


def cache_dir(root: Path, ns: str, cache: str) -> Path | None:
    """`<root>/<ns>/<cache>` when both levels are real directories (no symlink on the way), else None."""
    return root / ns / cache if _is_plain_dir(root / ns) and _is_plain_dir(root / ns / cache) else None


def present_dirs(root: Path) -> dict[str, set[str]]:
    """`<ns>/<cache>` directories under root; symlinks and non-DNS names are never the agent's."""
    present: dict[str, set[str]] = {}
    for ns in sorted(os.listdir(root)):
        if is_dns_label(ns) and _is_plain_dir(root / ns):
            present[ns] = {c for c in os.listdir(root / ns) if is_dns_label(c) and _is_plain_dir(root / ns / c)}
    return present


class Chowner:
    """chown when running as root; otherwise say once per process that ownership is left alone
    (tests, laptops, the simulation)."""

    warned = False

    def __init__(self):
        self.root = os.geteuid() == 0
        if not self.root and not Chowner.warned:
            Chowner.warned = True
            log.warning("not running as root: directories keep the agent's own uid (no chown)")

    def __call__(self, path: Path, uid: int) -> None:
        if self.root:
            os.chown(path, uid, uid, follow_symlinks=False)


def _chown_tree(path: Path, chown: Chowner) -> None:
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            chown(Path(dirpath) / name, 0)
    chown(path, 0)


def write_check(directory: Path, root: Path, chown: Chowner) -> None:
    st = os.statvfs(root)
    state = directory / STATE_DIR
    state.mkdir(exist_ok=True)
    chown(state, OWNER_UID)
    check = {"dedicated": is_dedicated(root), "sizeBytes": st.f_blocks * st.f_frsize,
             "freeBytes": st.f_bavail * st.f_frsize}
    write_atomic(state / CHECK_FILE, json.dumps(check, sort_keys=True).encode())


def prepare(root: Path, keep_file: Path, now: datetime | None = None) -> dict:
    """One pass: create placed caches' directories, delete expired ones; returns what it did."""
    if not _is_plain_dir(root):
        raise AgentError(reasons.InvalidConfiguration, f"--root {root} is not a directory (or is a symlink): pass "
                                                 "the node cache path as mounted")
    kept = read_keep(keep_file)
    if kept is None:
        return {"created": [], "deleted": []}
    chown = Chowner()
    plan = plan_prepare(kept, present_dirs(root), now or datetime.now(UTC))
    for ns, cache in plan.delete:
        target = root / ns / cache
        _chown_tree(target, chown)  # back to root first: nothing of the tenant's uid survives mid-delete
        shutil.rmtree(target)
        fsync_dir(root / ns)
        log.info("deleted %s/%s", ns, cache)
    for ns in plan.delete_namespaces:
        try:
            (root / ns).rmdir()
        except OSError as err:
            log.warning("left %s in place (%s)", ns, type(err).__name__)
    for ns, cache in plan.create:
        if (root / ns).is_symlink() or (root / ns / cache).is_symlink() or (root / ns).is_file():
            log.warning("refusing %s/%s: a symlink on the way", ns, cache)
            continue
        (root / ns).mkdir(mode=0o755, exist_ok=True)
        (root / ns / cache).mkdir(mode=0o755, exist_ok=True)
        chown(root / ns / cache, OWNER_UID)
        fsync_dir(root / ns)
        log.info("created %s/%s", ns, cache)
    for (ns, cache), row in sorted(kept.items()):  # every placed cache's check is kept current
        if row.since is None and (directory := cache_dir(root, ns, cache)):
            write_check(directory, root, chown)
    return {"created": [f"{ns}/{c}" for ns, c in plan.create], "deleted": [f"{ns}/{c}" for ns, c in plan.delete]}


# -- label ---------------------------------------------------------------------------------------

def ready_caches(root: Path, kept: dict[tuple[str, str], Kept]) -> dict[tuple[str, str], str]:
    """Placed caches whose node copy says it is ready: a valid commit in node-ready.json and its
    snapshot directory present (the label attracts replicas; `select` still checks on the node)."""
    ready = {}
    for (ns, cache), row in kept.items():
        directory = cache_dir(root, ns, cache)
        if row.since is not None or directory is None:
            continue
        marker = read_json(state_file(directory, READY_FILE))
        commit = marker.get("commit") if isinstance(marker, dict) else None
        if is_resolved_commit(commit) and has_snapshot(directory, commit):
            ready[(ns, cache)] = commit
    return ready


class NodeLabels:
    """The node's labels through CoreV1Api (read_node, patch_node; injectable)."""

    def __init__(self, api, node: str):
        self.api, self.node = api, node

    def current(self) -> dict[str, str]:
        return dict(self.api.read_node(self.node).metadata.labels or {})

    def apply(self, patch: dict[str, str | None]) -> None:
        self.api.patch_node(self.node, {"metadata": {"labels": patch}})


class FileLabels:
    """The simulation's stand-in: a JSON {key: value} file instead of the Node object."""

    def __init__(self, path: Path):
        self.path = path

    def current(self) -> dict[str, str]:
        labels = read_json(self.path)
        return labels if isinstance(labels, dict) else {}

    def apply(self, patch: dict[str, str | None]) -> None:
        labels = self.current()
        for key, value in patch.items():
            if value is None:
                labels.pop(key, None)
            else:
                labels[key] = value
        write_atomic(self.path, json.dumps(labels, sort_keys=True, indent=1).encode(), durable=False)


def label(root: Path, keep_file: Path, labels) -> dict[str, str | None]:
    """One pass; returns the patch applied (empty when the labels already match)."""
    kept = read_keep(keep_file)
    if kept is None:
        return {}
    patch = label_patch(labels.current(), ready_caches(root, kept))
    if patch:
        labels.apply(patch)
        log.info("node labels under %s: %s", LABEL_PREFIX, json.dumps(patch, sort_keys=True))
    return patch
