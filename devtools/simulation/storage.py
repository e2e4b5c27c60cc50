"""A simulated cluster's storage: PVCs bound to directories (provisioned, or pre-bound to a
hostPath PV), what statvfs would say of each, and container paths as the host directories
they are mounted from."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from fleetcache.apis import specs
from fleetcache.devtools.simulation.api import Key, Objects
from fleetcache.functions import quantities, read


class Volumes:
    """The PV controller and the provisioner: every claim a directory under the cluster's
    `volumes/`, or, with volumeName, the PV it names."""

    def __init__(self, root: Path, objects: Objects):
        self.root = root
        self.objects = objects

    def volume_dir(self, namespace: str, claim: str) -> Path:
        return self.root / "volumes" / namespace / claim

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

    def release(self, key: Key, gone: dict) -> None:
        """A deleted claim: a pre-bound PV (reclaimPolicy Retain) is Released with its data
        kept; a provisioned one (reclaimPolicy Delete) goes with its directory."""
        volume = self.objects.get(("PersistentVolume", "", read.get_path(gone, "spec.volumeName", "")))
        if volume is not None:
            volume["status"] = {"phase": "Released"}
        elif key[0] == "PersistentVolumeClaim":
            shutil.rmtree(self.volume_dir(key[1], key[2]), ignore_errors=True)

    def claim_mounts(self, namespace: str, pod_spec: dict, container: dict) -> dict[str, str]:
        """mountPath -> the directory standing in for each mounted PVC."""
        volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
        return {mount["mountPath"]: str(self.volume_dir(
                    namespace, volumes[mount["name"]]["persistentVolumeClaim"]["claimName"]))
                for mount in container.get("volumeMounts", [])
                if "persistentVolumeClaim" in volumes[mount["name"]]}

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


def translate(value: str, mounts: dict[str, str]) -> str:
    """A path inside the container, as the host directory it is mounted from."""
    for mount_path in sorted(mounts, key=len, reverse=True):
        if value == mount_path or value.startswith(mount_path.rstrip("/") + "/"):
            return mounts[mount_path] + value[len(mount_path):]
    return value
