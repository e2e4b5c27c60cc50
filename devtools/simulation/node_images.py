"""Each node's container images, as its container runtime and the kubelet's image manager keep
them (design/simulation.md, "Engine images"): an image pulled from the registry its reference
names, with the credentials the kubelet found in the pod's pull secrets (manifest, config and
layers, each checked against its digest), and kept with its size, names and times; pulls one at
a time per node (the kubelet's serializeImagePulls) at the node's bandwidth on the simulation's
clock; garbage collected as image_gc_manager.go does; listed as
`node.status.images` as nodestatus/setters.go does.

What an image can run and how big it stands for being are its config labels (`SIZE_LABEL`,
`EXECUTABLES_LABEL`; devtools/package/modelpack.py `Pusher.push_sim_image` pushes such an
image). Only loopback registries are pulled from: there is no other network here, so an image of
any other registry (the engines' `vllm/vllm-openai`, the agent's image) stands for one the node
already has and runs what it is asked to."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from fleetcache import shapes
from fleetcache.devtools.simulation.registry_pulls import (
    ANONYMOUS,
    MANIFEST_TYPES,
    PullError,
    checked_blob,
    digest_of,
    get,
)

SIZE_LABEL = "dev.fleetcache.sim.size"  # bytes the image stands for (its layers are tiny)
EXECUTABLES_LABEL = "dev.fleetcache.sim.executables"  # comma-separated names on its $PATH
LOOPBACK_HOSTS = ("127.", "localhost", "[::1]")
# The kubelet's image GC policy at its defaults (KubeletConfiguration imageGCHighThresholdPercent,
# imageGCLowThresholdPercent, imageMinimumGCAge) and period (kubelet.go ImageGCPeriod).
HIGH_THRESHOLD_PERCENT = 85
LOW_THRESHOLD_PERCENT = 80
MIN_AGE_SECONDS = 120.0
GC_PERIOD_SECONDS = 300.0
NODE_STATUS_MAX_IMAGES = 50  # --node-status-max-images
MAX_NAMES_PER_IMAGE = 5  # nodestatus.MaxNamesPerImageInNodeStatus


class RemoveRefused(Exception):
    """The runtime refuses to remove an image a container of a present pod mounts."""


def pullable(reference: str) -> bool:
    """Whether the simulation pulls `reference` (a loopback registry) or takes it as present."""
    parts = shapes.oci_reference_parts(reference)
    return parts is not None and parts[0].startswith(LOOPBACK_HOSTS)


def names_of(reference: str) -> tuple[str, str | None, str | None]:
    """(repository with host, tag, digest): a reference without either is tag `latest`."""
    parts = shapes.oci_reference_parts(reference)
    if parts is None:
        raise PullError(f'failed to pull image "{reference}": invalid reference format')
    host, repository, tag, digest = parts
    return f"{host}/{repository}", tag or (None if digest else "latest"), digest


@dataclass
class Image:
    """One image in a node's store, known by its ID (the config digest), as the runtime lists it."""

    id: str
    repo_digests: list[str]
    repo_tags: list[str]
    size: int
    executables: frozenset[str]
    entrypoint: list[str]
    cmd: list[str]
    first_detected: float
    last_used: float = float("-inf")  # never seen in use


@dataclass
class Pull:
    """A pull under way: it finishes at `done_at` (queued behind the node's earlier pulls)."""

    reference: str
    started_at: float
    done_at: float
    image: Image


@dataclass
class GcResult:
    """What one image GC pass did: bytes freed, image IDs removed, the runtime's refusals."""

    freed: int = 0
    removed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class NodeImages:
    """One node's image store and the pulls under way into it."""

    def __init__(self, bandwidth: int, capacity: int):
        """`bandwidth`: bytes a second a pull gets; `capacity`: the image filesystem's bytes."""
        self.bandwidth = bandwidth
        self.capacity = capacity
        self.images: dict[str, Image] = {}
        self.pulls: dict[str, Pull] = {}
        self.busy_until = float("-inf")  # serialized pulls: the next starts after this
        self.last_gc = float("-inf")

    def find(self, reference: str) -> Image | None:
        """The image a reference names here: by digest, else by tag."""
        repository, tag, digest = names_of(reference)
        name = f"{repository}@{digest}" if digest else f"{repository}:{tag}"
        return next((image for image in self.images.values()
                     if name in (image.repo_digests if digest else image.repo_tags)), None)

    def used_bytes(self) -> int:
        return sum(image.size for image in self.images.values())

    def pull(self, reference: str, now: float, auth: Mapping[str, str] = ANONYMOUS) -> Pull:
        """The pull of `reference`, started if none is under way: the registry is read now with
        `auth` (the pull's credentials as headers; PullError when it cannot be read), the bytes
        take size / bandwidth after the pulls queued before it. A pull under way is joined,
        whatever `auth`: the credentials go to the fetch that starts it."""
        if reference in self.pulls:
            return self.pulls[reference]
        image = fetch(reference, now, auth)
        started = max(now, self.busy_until)
        self.busy_until = started + image.size / self.bandwidth
        self.pulls[reference] = Pull(reference, now, self.busy_until, image)
        return self.pulls[reference]

    def finish(self, pull: Pull) -> Image:
        """A finished pull becomes an image of the store, its tag moved to it."""
        del self.pulls[pull.reference]
        pulled = pull.image
        for image in self.images.values():
            image.repo_tags = [t for t in image.repo_tags if t not in pulled.repo_tags]
        kept = self.images.get(pulled.id)
        if kept is None:
            self.images[pulled.id] = pulled
            return pulled
        kept.repo_tags = sorted({*kept.repo_tags, *pulled.repo_tags})
        kept.repo_digests = sorted({*kept.repo_digests, *pulled.repo_digests})
        return kept

    def add_volume_image(self, reference: str, image_id: str, size: int, now: float) -> Image:
        """An image volume's image, pulled through the runtime's store like any image."""
        repository, tag, digest = names_of(reference)
        image = self.images.setdefault(image_id, Image(image_id, [], [], size, frozenset(), [], [], now))
        if digest:
            image.repo_digests = sorted({*image.repo_digests, f"{repository}@{digest}"})
        if tag:
            image.repo_tags = sorted({*image.repo_tags, f"{repository}:{tag}"})
        return image

    def garbage_collect(self, now: float, in_use: set[str], mounted: set[str]) -> GcResult:
        """GarbageCollect: at or over the high threshold, free down to the low one (freeSpace):
        images by lastUsed then firstDetected, in-use ones (lastUsed = now) ending the pass,
        younger than MinAge skipped, a removal the runtime refuses (an image a present pod
        mounts as a volume) counted as an error and passed over."""
        for image_id in in_use & set(self.images):
            self.images[image_id].last_used = now  # detectImages
        available = self.capacity - self.used_bytes()
        result = GcResult()
        if 100 - available * 100 // self.capacity < HIGH_THRESHOLD_PERCENT:
            return result
        to_free = self.capacity * (100 - LOW_THRESHOLD_PERCENT) // 100 - available
        for image in sorted(self.images.values(), key=lambda i: (i.last_used, i.first_detected)):
            if image.last_used >= now:
                break
            if now - image.first_detected < MIN_AGE_SECONDS:
                continue
            if image.id in mounted:
                result.errors.append(f'remove image "{image.id}": image is in use by a container')
                continue
            del self.images[image.id]
            result.removed.append(image.id)
            result.freed += image.size
            if result.freed >= to_free:
                break
        return result

    def status_images(self) -> list[dict]:
        """node.status.images: largest first, at most 50, each its digests then tags (at most 5)."""
        ordered = sorted(self.images.values(), key=lambda i: -i.size)[:NODE_STATUS_MAX_IMAGES]
        return [{"names": [*i.repo_digests, *i.repo_tags][:MAX_NAMES_PER_IMAGE], "sizeBytes": i.size}
                for i in ordered]


def fetch(reference: str, now: float, auth: Mapping[str, str]) -> Image:
    """The image `reference` names, read from its registry (plain HTTP, each request with `auth`:
    none, anonymous): the manifest (checked against the digest asked for), the config, every
    layer (each checked)."""
    repository, tag, digest = names_of(reference)
    host, _, path = repository.partition("/")
    base = f"http://{host}/v2/{path}"
    body = get(reference, f"{base}/manifests/{digest or tag}", {"Accept": MANIFEST_TYPES, **auth})
    manifest_digest = digest_of(body)
    if digest and manifest_digest != digest:
        raise PullError(f'failed to pull image "{reference}": manifest digest mismatch')
    try:
        manifest = json.loads(body)
        blobs = [manifest["config"], *(manifest.get("layers") or [])]
        config = json.loads(checked_blob(reference, base, blobs[0]["digest"], auth)).get("config") or {}
        for layer in blobs[1:]:
            checked_blob(reference, base, layer["digest"], auth)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise PullError(f'failed to pull image "{reference}": not an image manifest ({err})') from err
    labels = config.get("Labels") or {}
    size = int(labels.get(SIZE_LABEL) or sum(int(b.get("size", 0)) for b in blobs))
    executables = frozenset(x.strip() for x in labels.get(EXECUTABLES_LABEL, "").split(",") if x.strip())
    return Image(blobs[0]["digest"], [f"{repository}@{manifest_digest}"],
                 [f"{repository}:{tag}"] if tag else [], size, executables,
                 list(config.get("Entrypoint") or []), list(config.get("Cmd") or []), now)

