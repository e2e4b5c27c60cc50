"""The fleet mirror in an OCI registry: the verified commit published once as a ModelPack artifact,
and read back by the other clusters (design/oci.md, "Publish once").

Planning (`plan_artifact`, pure: no network, no disk) decides the artifact from the fetched
entries and each file's sha256: one raw layer per file (media types of modelpack/model-spec
`specs-go/v1/mediatype.go`, the path in `org.opencontainers.image.title` and
`org.cncf.model.filepath`, so agent/oci_source.py and ModelPack tools read it as a source), layers
sorted by path, a config recording the source, commit and manifest digest. Nothing in it varies
between runs, so every publisher of one content makes the same manifest digest, and a re-push is a
no-op. A Hub file known by its git sha1 keeps that digest in `org.fleetcache.digest`: the fleet's
manifest digest is over it, and a reader needs it to check the artifact.

Doing (`OciStore`) pushes the plan by digest (HEAD each blob, upload only what is absent, the
config, then the manifest by its digest, then the tag: the manifest digest's 64 hex, so a
registry's garbage collection of untagged manifests keeps it, and two caches of one repository
with other patterns do not share it) and reads it back: the manifest by that tag, accepted only
when its layers hash to the resolved manifest digest; each file's bytes are ranged GETs of its
layer, verified by the engine like origin bytes.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from dataclasses import dataclass
from typing import Any

from fleetcache import reasons
from fleetcache.agent.errors import AgentError
from fleetcache.agent.oci import OCI_MANIFEST, RegistryClient
from fleetcache.agent.plan import written_entry
from fleetcache.agent.sources import parallel
from fleetcache.manifest import SHA256, Entry, manifest_digest
from fleetcache.shapes import OCI_DIGEST

log = logging.getLogger("fleetcache.agent")

ARTIFACT_TYPE = "application/vnd.cncf.model.manifest.v1+json"
CONFIG_TYPE = "application/vnd.cncf.model.config.v1+json"
WEIGHT, WEIGHT_CONFIG = "application/vnd.cncf.model.weight.v1.raw", "application/vnd.cncf.model.weight.config.v1.raw"
DOC, CODE = "application/vnd.cncf.model.doc.v1.raw", "application/vnd.cncf.model.code.v1.raw"
TITLE, FILEPATH, DIGEST = "org.opencontainers.image.title", "org.cncf.model.filepath", "org.fleetcache.digest"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".onnx", ".h5", ".msgpack", ".ckpt")
DOC_SUFFIXES = (".md", ".txt", ".rst")


def media_type(path: str) -> str:
    """The ModelPack raw layer type of a file, by its name (what modctl decides by, too)."""
    name = path.rpartition("/")[2].lower()
    if name.endswith(WEIGHT_SUFFIXES):
        return WEIGHT
    if name.endswith(DOC_SUFFIXES) or name.startswith(("license", "readme")):
        return DOC
    if name.endswith(".py"):
        return CODE
    return WEIGHT_CONFIG


def tag_of(digest: str) -> str:
    """The artifact's tag: the fleet manifest digest (64 hex, a valid tag)."""
    return digest


@dataclass(frozen=True)
class Layer:
    entry: Entry
    sha256: str  # the blob's digest, sha256:<hex>

    @property
    def descriptor(self) -> dict:
        annotations = {TITLE: self.entry.path, FILEPATH: self.entry.path}
        if self.entry.algo != SHA256:
            annotations[DIGEST] = f"{self.entry.algo}:{self.entry.digest}"
        return {"mediaType": media_type(self.entry.path), "digest": self.sha256, "size": self.entry.size,
                "annotations": annotations}


@dataclass(frozen=True)
class Artifact:
    """What a publisher pushes: the layers (one per file), the config blob and the manifest."""

    layers: tuple[Layer, ...]
    config: bytes
    manifest: bytes

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.manifest).hexdigest()

    @property
    def config_digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.config).hexdigest()

    def blobs(self) -> dict[str, Layer]:
        """Each blob once (two files of the same bytes share one)."""
        return {layer.sha256: layer for layer in self.layers}


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def plan_artifact(source: str, commit: str, digest: str, layers: list[Layer]) -> Artifact:
    """The ModelPack artifact of a verified commit (see the module docstring): deterministic."""
    ordered = tuple(sorted(layers, key=lambda layer: layer.entry.path))
    config = _canonical({
        "descriptor": {"name": source, "revision": commit},
        "modelfs": {"type": "layers", "diffIds": [layer.sha256 for layer in ordered]},
        "config": {},
        "fleetcache": {"source": source, "commit": commit, "manifestDigest": digest},
    })
    manifest = _canonical({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "digest": "sha256:" + hashlib.sha256(config).hexdigest(),
                   "size": len(config)},
        "layers": [layer.descriptor for layer in ordered],
        "annotations": {"org.fleetcache.manifestDigest": digest, "org.fleetcache.commit": commit},
    })
    return Artifact(ordered, config, manifest)


def read_artifact(body: dict, digest: str) -> tuple[dict[str, str], tuple[Entry, ...], str]:
    """A published artifact's files: (blob by path, entries, "") when its layers hash to `digest`
    with the listing's own function (each path passes the listing's check), else ({}, (), why)."""
    try:
        layers = body["layers"]
        found = []
        for layer in layers:
            if not OCI_DIGEST.fullmatch(layer["digest"]):
                raise KeyError("digest")
            annotations = layer.get("annotations") or {}
            algo, _, value = (annotations.get(DIGEST) or layer["digest"]).partition(":")
            entry = written_entry({"path": annotations[TITLE], "size": layer["size"], "digest": value,
                                   "algo": algo})
            found.append((entry, str(layer["digest"])))
    except (TypeError, KeyError, AttributeError, AgentError):
        return {}, (), "an artifact that is not one raw layer per file, titled by its path"
    entries = tuple(sorted((e for e, _ in found), key=lambda e: e.path))
    if manifest_digest(entries) != digest:
        return {}, (), f"an artifact whose files hash to {manifest_digest(entries)}, not {digest}"
    return {e.path: blob for e, blob in found}, entries, ""


class OciStore:
    """The mirror's side in a registry repository (the client's), for agent/mirror.py."""

    def __init__(self, client: RegistryClient, concurrency: int):
        self.client, self.concurrency = client, concurrency
        self.blobs: dict[str, str] = {}  # path → layer digest, from the published artifact
        self.artifact = ""  # host/repository@sha256:… once pushed or read

    def describe(self, entry: Entry | None = None) -> str:
        ref = self.client.reference
        where = f"oci://{ref.registry}/{ref.repository}"
        return f"{where}@{self.blobs[entry.path]}" if entry and entry.path in self.blobs else where

    def _pinned(self, digest: str) -> str:
        ref = self.client.reference
        return f"{ref.registry}/{ref.repository}@{digest}"

    def published(self, digest: str) -> tuple[tuple[Entry, ...], str]:
        """The artifact tagged with `digest`, checked (read_artifact); its entries, or none and why."""
        try:
            manifest = self.client.manifest(tag_of(digest))
        except AgentError as err:
            if err.reason != reasons.SourceNotFound:
                raise
            return (), f"{self.describe()}:{tag_of(digest)}: no such artifact (the publisher has not finished)"
        blobs, entries, why = read_artifact(manifest.body, digest)
        if entries:
            self.blobs, self.artifact = blobs, self._pinned(manifest.digest)
        return entries, f"{self.describe()}:{tag_of(digest)}: {why}" if why else ""

    def open_range(self, entry: Entry, start: int, end: int, size: int):
        return self.client.open_blob(self.blobs[entry.path], start, end, size)

    def publish(self, layout, entries: tuple[Entry, ...], digest: str, repo: str, commit: str) -> dict:
        """Push the verified commit by digest, uploading only the blobs the registry lacks; then tag it."""
        artifact = plan_artifact(repo, commit, digest, parallel(lambda e: Layer(e, _sha256_of(layout, e)),
                                                                list(entries), self.concurrency))
        if self.client.present("manifests", artifact.digest) is None:
            self._upload(layout, artifact.blobs())
            if self.client.present("blobs", artifact.config_digest) is None:
                config = artifact.config
                self.client.upload_blob(artifact.config_digest, len(config), lambda: io.BytesIO(config))
            self.client.put_manifest(artifact.digest, artifact.manifest, OCI_MANIFEST)
        if self.client.present("manifests", tag_of(digest)) != artifact.digest:
            self.client.put_manifest(tag_of(digest), artifact.manifest, OCI_MANIFEST)
        self.artifact = self._pinned(artifact.digest)
        log.info("published %s", self.artifact)
        return {"artifact": self.artifact}

    def republish(self, layout, entries: tuple[Entry, ...]) -> None:
        """A reader's repair: the blobs of the files that fell back, uploaded again."""
        self._upload(layout, {self.blobs[e.path]: Layer(e, self.blobs[e.path]) for e in entries})

    def record(self) -> dict:
        return {"artifact": self.artifact} if self.artifact else {}

    def _upload(self, layout, blobs: dict[str, Layer]) -> None:
        def upload(layer: Layer) -> None:
            if self.client.present("blobs", layer.sha256) is None:
                path = layout.blob_path(layer.entry)
                self.client.upload_blob(layer.sha256, layer.entry.size, lambda: path.open("rb"))

        parallel(upload, list(blobs.values()), self.concurrency)


def _sha256_of(layout, entry: Entry) -> str:
    """The blob digest of a verified file: its sha256 when the manifest has it, else hashed from the volume
    (a small Hub file known by its git sha1)."""
    if entry.algo == SHA256:
        return "sha256:" + entry.digest
    hasher = hashlib.sha256()
    with layout.blob_path(entry).open("rb") as stream:
        while chunk := stream.read(1 << 20):
            hasher.update(chunk)
    return "sha256:" + hasher.hexdigest()
