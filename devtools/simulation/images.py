"""The container runtime's image volumes on a simulated cluster (`volumes[].image`, KEP-4639):
the reference pulled from the registry it names with the distribution API (a GET of the
manifest, then of each blob, each checked against its digest; with the credentials the kubelet
found in the pod's pull secrets), kept by reference, and mounted read-only
(design/simulation.md, "Image volumes").

What is mounted is what CRI-O mounts (server/container_create_linux.go `mountArtifact`,
internal/ociartifact/store.go): an OCI *artifact* (a manifest whose config is not an image
config, or that names an artifactType) is its layers, each blob a file at the path of its
`org.opencontainers.image.title` annotation, else `org.cncf.model.filepath`, a layer with
neither skipped; an *image* is its layers unpacked, in order, into one tree (its rootfs).
Registries are reached over plain HTTP: the tests' registries are on loopback."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from fleetcache import shapes
from fleetcache.devtools.simulation.registry_pulls import (
    ANONYMOUS,
    MANIFEST_TYPES,
    PullError,
    checked_blob,
    digest_of,
    get,
)

IMAGE_CONFIGS = ("", "application/vnd.oci.image.config.v1+json",
                 "application/vnd.docker.container.image.v1+json")
NAME_ANNOTATIONS = ("org.opencontainers.image.title", "org.cncf.model.filepath")


def is_artifact(manifest: dict) -> bool:
    """CRI-O's test (internal/ociartifact/store.go): an image when its config is an image
    config and it names no artifactType; an artifact otherwise."""
    config_type = (manifest.get("config") or {}).get("mediaType", "")
    return bool(manifest.get("artifactType")) or config_type not in IMAGE_CONFIGS


def artifact_path(layer: dict) -> PurePosixPath | None:
    """Where a layer's blob goes in an artifact's mount: its name annotation, joined below the
    mount as securejoin would (no absolute path, nothing above the root); None: not mounted."""
    annotations = layer.get("annotations") or {}
    name = next((annotations[key] for key in NAME_ANNOTATIONS if annotations.get(key)), "")
    parts = [p for p in PurePosixPath(name).parts if p not in ("/", ".", "..")]
    return PurePosixPath(*parts) if parts else None


class ImageStore:
    """The node's image store: each reference pulled once."""

    def __init__(self, root: Path):
        self.root = root

    def mount(self, reference: str, auth: Mapping[str, str] = ANONYMOUS) -> Path:
        """The directory the reference is mounted from, pulled with `auth` (the pull's
        credentials as headers) if not present (pullPolicy IfNotPresent: a reference by digest
        names one content; present, no credentials are asked for); PullError when it cannot be."""
        parts = shapes.oci_reference_parts(reference)
        if parts is None:
            raise PullError(f'failed to pull image "{reference}": invalid reference format')
        host, repository, tag, digest = parts
        # Kept by reference: the kubelet asks whether the reference itself is present, so the
        # same digest in another registry is pulled from that registry.
        target = self.target(reference)
        if target.is_dir():
            return target
        base = f"http://{host}/v2/{repository}"
        body = get(reference, f"{base}/manifests/{digest or tag}", {"Accept": MANIFEST_TYPES, **auth})
        if digest and digest_of(body) != digest:
            raise PullError(f'failed to pull image "{reference}": manifest digest mismatch')
        manifest = json.loads(body)
        self.root.mkdir(parents=True, exist_ok=True)
        self.manifest_file(target).write_bytes(body)
        staging = Path(tempfile.mkdtemp(prefix=".pull-", dir=self.root))
        try:
            artifact = is_artifact(manifest)
            for layer in manifest.get("layers") or []:
                blob = checked_blob(reference, base, layer["digest"], auth)
                if artifact:
                    path = artifact_path(layer)
                    if path is not None:
                        (staging / path).parent.mkdir(parents=True, exist_ok=True)
                        (staging / path).write_bytes(blob)
                else:
                    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:*") as tar:
                        tar.extractall(staging, filter="data")
            for parent, _, names in os.walk(staging):
                for name in names:
                    os.chmod(os.path.join(parent, name), 0o444)  # mounted read-only
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return target

    def target(self, reference: str) -> Path:
        return self.root / reference.replace(":", "_").replace("/", "_").replace("@", "_")

    @staticmethod
    def manifest_file(target: Path) -> Path:
        return target.with_name(f"{target.name}.manifest.json")

    def described(self, reference: str) -> tuple[str, int]:
        """A mounted reference as the runtime's image list shows it: its ID (the config
        digest) and size (config and layers, as the manifest gives them)."""
        manifest = json.loads(self.manifest_file(self.target(reference)).read_bytes())
        blobs = [manifest.get("config") or {}, *(manifest.get("layers") or [])]
        return blobs[0].get("digest", ""), sum(int(b.get("size", 0)) for b in blobs)
