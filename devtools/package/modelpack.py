"""ModelPack artifacts pushed by hand: what the OCI tests and the demo's OCI act put in a
registry, with the distribution API (POST an upload, PUT it with its digest, PUT the
manifest), never with the agent's registry client, the code they exercise.

    pusher = Pusher("127.0.0.1:5000")                       # a loopback_registry's host
    digest = pusher.push_modelpack("models/tiny", "v1", FILES)  # the manifest's digest

`push_sim_image` pushes a container image the simulated kubelet pulls and runs (its size and
executables in its config's labels).

A ModelPack here is one `.raw` layer per file, its path in the layer annotation
`org.<flavor>.model.filepath` (modelpack/model-spec `specs-go/v1/mediatype.go`,
`annotations.go`; flavor `cncf`, or `cnai`, the older media types modctl still writes)."""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.request
from collections.abc import Iterable
from http.client import HTTPResponse

from fleetcache.devtools.package.oci import tar_bytes
from fleetcache.devtools.simulation.node_images import EXECUTABLES_LABEL, SIZE_LABEL

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
EMPTY_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
TIMEOUT = 30.0


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def descriptor(media_type: str, data: bytes, annotations: dict | None = None) -> dict:
    found = {"mediaType": media_type, "digest": sha256(data), "size": len(data)}
    return {**found, "annotations": annotations} if annotations else found


def modelpack_layers(files: dict[str, bytes], flavor: str = "cncf") -> list[tuple[dict, bytes]]:
    """One `.raw` layer per file, its path in the `org.<flavor>.model.filepath` annotation."""
    return [(descriptor(f"application/vnd.{flavor}.model.weight.v1.raw", data,
                        {f"org.{flavor}.model.filepath": path}), data) for path, data in files.items()]


def modelpack_config(flavor: str = "cncf") -> tuple[str, bytes]:
    return (f"application/vnd.{flavor}.model.config.v1+json",
            json.dumps({"descriptor": {"name": "tiny"}, "modelfs": {"type": "layers"}}).encode())


def manifest_of(layers: list[tuple[dict, bytes]], config: tuple[str, bytes]) -> bytes:
    body = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": descriptor(config[0], config[1]),
            "layers": [d for d, _ in layers]}
    return json.dumps(body, indent=1).encode()


class Pusher:
    """Pushes to, and reads back from, the registry at `host` over plain HTTP; with
    `users`, as the first of them (basic auth)."""

    def __init__(self, host: str, users: dict[str, str] | None = None):
        self.host = host
        self.users = users or {}

    def call(self, method: str, path: str, data: bytes | None = None,
             headers: dict | None = None) -> HTTPResponse:
        url = path if path.startswith("http") else f"http://{self.host}{path}"
        request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
        if self.users:
            user, password = next(iter(self.users.items()))
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        return urllib.request.urlopen(request, timeout=TIMEOUT)

    def push_blob(self, repository: str, data: bytes) -> str:
        digest = sha256(data)
        with self.call("POST", f"/v2/{repository}/blobs/uploads/") as started:
            location = started.headers["Location"]
        if not location.startswith("http"):
            location = f"http://{self.host}{location}"
        joiner = "&" if "?" in location else "?"
        self.call("PUT", f"{location}{joiner}digest={digest}", data,
                  {"Content-Type": "application/octet-stream"}).close()
        return digest

    def push_manifest(self, repository: str, reference: str, body: bytes, media_type: str = OCI_MANIFEST) -> str:
        with self.call("PUT", f"/v2/{repository}/manifests/{reference}", body,
                       {"Content-Type": media_type}) as answer:
            stored = answer.headers["Docker-Content-Digest"]
        if stored != sha256(body):
            raise RuntimeError(f"{self.host}/{repository}: the registry stored the manifest as {stored}, "
                               f"pushed as {sha256(body)}")
        return stored

    def push_image(self, repository: str, tag: str, layers: list[tuple[dict, bytes]],
                   config: tuple[str, bytes] = (EMPTY_CONFIG, b"{}")) -> str:
        """Push the blobs and the manifest; the manifest's digest."""
        for _, data in layers:
            self.push_blob(repository, data)
        self.push_blob(repository, config[1])
        return self.push_manifest(repository, tag, manifest_of(layers, config))

    def push_modelpack(self, repository: str, tag: str, files: dict[str, bytes], flavor: str = "cncf") -> str:
        return self.push_image(repository, tag, modelpack_layers(files, flavor), modelpack_config(flavor))

    def push_sim_image(self, repository: str, tag: str, *, size: int, executables: Iterable[str],
                       entrypoint: Iterable[str] = ()) -> str:
        """A container image for the simulated kubelet: one tiny layer, and a config whose
        labels say the bytes it stands for and the executables it can run
        (devtools/simulation/node_images.py); the manifest's digest."""
        layer = tar_bytes([("etc/sim-image", f"{repository}:{tag}\n".encode())])
        config = json.dumps({
            "architecture": "amd64", "os": "linux",
            "config": {"Labels": {SIZE_LABEL: str(size), EXECUTABLES_LABEL: ",".join(executables)},
                       **({"Entrypoint": list(entrypoint)} if entrypoint else {})},
            "rootfs": {"type": "layers", "diff_ids": [sha256(layer)]}}, sort_keys=True).encode()
        return self.push_image(repository, tag, [(descriptor(OCI_LAYER, layer), layer)],
                               (EMPTY_CONFIG, config))

    def manifest(self, repository: str, reference: str) -> tuple[str, dict]:
        """A stored manifest, read by hand: its digest and body."""
        with self.call("GET", f"/v2/{repository}/manifests/{reference}", headers={"Accept": OCI_MANIFEST}) as got:
            body = got.read()
        return sha256(body), json.loads(body)

    def blob(self, repository: str, digest: str) -> bytes:
        with self.call("GET", f"/v2/{repository}/blobs/{digest}") as got:
            return got.read()
