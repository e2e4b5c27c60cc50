"""Engine images pinned to digests: each `spec.images[].image` asked of its registry once for the fleet.

A tag is resolved to the digest of the manifest the registry serves for it: a HEAD of
/v2/<repository>/manifests/<tag> with every manifest type accepted (an index stays an index: each
node's runtime picks its own platform from it), its `Docker-Content-Digest`; when the HEAD does
not say, a GET, whose bytes are hashed and must match the header if there is one. A reference by
digest is checked to exist and kept as written.

References are read as the runtimes read them (github.com/distribution/reference normalize.go,
splitDockerDomain): a first component without a dot or a port that is not `localhost` is on
docker.io, a single-component docker.io name is under `library/`. docker.io's API is served at
registry-1.docker.io (containerd remotes/docker/config/hosts.go), and a Docker config names it
`https://index.docker.io/v1/` (the docker CLI's key) or `docker.io`.

Each registry failure keeps its row of the exit-code table (agent/oci.py), with a remedy that
names `spec.images[].image`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from fleetcache import reasons
from fleetcache.agent.errors import AgentError
from fleetcache.agent.hub import RetryPolicy
from fleetcache.agent.oci import (
    MANIFEST_ACCEPT,
    MAX_MANIFEST,
    Credentials,
    OciReference,
    RegistryClient,
    parse_reference,
    read_registry_config,
)
from fleetcache.shapes import OCI_DIGEST

DOCKER_HUB = "docker.io"
DOCKER_HUB_ALIASES = ("docker.io", "index.docker.io", "registry-1.docker.io")
DOCKER_HUB_API = "registry-1.docker.io"
FIELD = "spec.images[].image"

NOT_FOUND = (f"Check {FIELD}: its registry, repository and tag or digest must name an image the registry "
             "holds (a digest the registry garbage-collected is gone: give a tag or a digest it keeps).")
UNAUTHORIZED = (f"The registry of {FIELD} wants credentials: name a Docker config Secret in "
                "spec.images[].pullSecretRef (kubectl create secret docker-registry) whose credentials for that "
                "host may pull the repository (resolve-images reads it as --registry-config).")
UNREACHABLE = (f"The registry of {FIELD} could not be reached (resets, timeouts, 5xx) after retries; the Job "
               "retries on its own. Check the cluster's egress to that host.")
SLOW_DOWN = f"The registry of {FIELD} asked the agent to slow down (429); the Job retries on its own."
UNTRUSTED = (f"The registry of {FIELD}, or a proxy before it, served a manifest that is not what it says it is; "
             "check that host and any mirror or proxy between the cluster and it.")
REMEDIES: dict[str, str] = {reasons.SourceNotFound: NOT_FOUND, reasons.AuthFailed: UNAUTHORIZED,
            reasons.SourceUnreachable: UNREACHABLE, reasons.RateLimited: SLOW_DOWN,
            reasons.DigestMismatch: UNTRUSTED, reasons.InvalidSource: UNTRUSTED}


@dataclass(frozen=True)
class ImagePin:
    image: str  # as written in spec.images[].image
    digest: str  # sha256:<hex>

    def as_record(self) -> dict:
        return {"image": self.image, "digest": self.digest}


def normalized(image: str) -> str:
    """`image` with the registry and repository the runtimes read into it (see the module docstring)."""
    first, slash, rest = image.partition("/")
    if not slash or ("." not in first and ":" not in first and first != "localhost" and first == first.lower()):
        first, rest = DOCKER_HUB, image
    if first == "index.docker.io":
        first = DOCKER_HUB
    if first == DOCKER_HUB and "/" not in rest.split("@")[0].rsplit(":", 1)[0]:
        rest = "library/" + rest
    return f"{first}/{rest}"


def image_reference(image: str) -> OciReference:
    """The reference an image names, refused naming --image; docker.io's is served by its API host."""
    ref = parse_reference(normalized(image), flag="--image")
    if ref.registry == DOCKER_HUB:
        return OciReference(DOCKER_HUB_API, ref.repository, ref.tag, ref.digest)
    return ref


def image_credentials(configs: Sequence[str], ref: OciReference) -> Credentials | None:
    """The registry's credentials from the first Docker config that has any for its host (one per
    pull secret the images name), docker.io's under any of its names (the docker CLI's key
    `https://index.docker.io/v1/` reads as index.docker.io)."""
    hosts = DOCKER_HUB_ALIASES if ref.registry == DOCKER_HUB_API else (ref.registry,)
    return next((found for config in configs for host in hosts
                 if (found := read_registry_config(config, host))), None)


def _digest_of(client: RegistryClient, name: str, what: str) -> str:
    """HEAD the manifest; when the registry does not name its digest, GET it and hash the bytes."""
    url = f"{client.base}/manifests/{name}"
    head = client.request("HEAD", url, {"Accept": MANIFEST_ACCEPT})
    said = head.headers.get("Docker-Content-Digest", "")
    if name.startswith("sha256:") or OCI_DIGEST.fullmatch(said):
        return name if name.startswith("sha256:") else said
    got = client.request("GET", url, {"Accept": MANIFEST_ACCEPT})
    raw = got.data
    if len(raw) > MAX_MANIFEST:
        raise AgentError(reasons.InvalidSource, f"{what}: {len(raw)} bytes, more than a manifest may be")
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    said = got.headers.get("Docker-Content-Digest", "")
    if said and said != digest:
        raise AgentError(reasons.DigestMismatch, f"{what}: the registry says {said} but served bytes whose digest "
                                                 f"is {digest}")
    return digest


def pin(image: str, client: RegistryClient) -> ImagePin:
    """The digest `image` names now; a registry failure names the image and `spec.images[].image`."""
    ref = client.reference
    what = f"image {image}"
    try:
        return ImagePin(image, client.policy.run(lambda: _digest_of(client, ref.name, what), what))
    except AgentError as err:
        if err.reason not in REMEDIES:
            raise
        raise AgentError(err.reason, f"{what}: {err.what}", REMEDIES[err.reason]) from None


def image_client(image: str, configs: Sequence[str], plain_http: bool, policy: RetryPolicy, timeout: float,
                 on_secret) -> RegistryClient:
    """A client for the image's repository; its credentials, and every token it receives, go to
    `on_secret` to be kept out of every line."""
    ref = image_reference(image)
    client = RegistryClient(ref, image_credentials(configs, ref), plain_http, policy, pool_size=1, timeout=timeout,
                            on_secret=on_secret)
    on_secret(client.secrets)
    return client
