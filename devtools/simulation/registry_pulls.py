"""How a simulated container runtime reads a registry (the distribution API, anonymous, plain
HTTP: the tests' registries are on loopback): one GET, and a blob checked against its digest.
Both of a node's stores pull this way, its images (node_images) and its image volumes (images)."""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.request

MANIFEST_TYPES = ", ".join((
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json"))
TIMEOUT = 30.0


class PullError(Exception):
    """What the runtime answers a pull it cannot do; the kubelet shows it as ErrImagePull."""


def get(reference: str, url: str, headers: dict[str, str]) -> bytes:
    """One anonymous GET, as a runtime without credentials for the registry makes it."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT) as answer:
            return answer.read()
    except urllib.error.HTTPError as err:
        detail = f"{err.code} {err.reason}"
    except (OSError, ValueError) as err:
        detail = str(err)
    raise PullError(f'failed to pull image "{reference}": {detail} (GET {url})')


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def checked_blob(reference: str, base: str, digest: str) -> bytes:
    """The blob `digest` of the repository at `base`, refused unless its bytes hash to it."""
    data = get(reference, f"{base}/blobs/{digest}", {})
    if digest_of(data) != digest:
        raise PullError(f'failed to pull image "{reference}": blob {digest} does not match its digest')
    return data
