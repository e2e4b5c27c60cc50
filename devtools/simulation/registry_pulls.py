"""How a simulated container runtime reads a registry (the distribution API, plain HTTP: the
tests' registries are on loopback): one GET, anonymous or with the pull's credentials, and a blob
checked against its digest. Both of a node's stores pull this way, its images (node_images) and
its image volumes (images)."""

from __future__ import annotations

import base64
import hashlib
import types
import urllib.error
import urllib.request
from collections.abc import Mapping

MANIFEST_TYPES = ", ".join((
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json"))
TIMEOUT = 30.0
ANONYMOUS: Mapping[str, str] = types.MappingProxyType({})  # a pull without credentials


class PullError(Exception):
    """What the runtime answers a pull it cannot do; the kubelet shows it as ErrImagePull."""


def basic_auth(username: str, password: str) -> dict[str, str]:
    """The header a pull's credentials (CRI AuthConfig username, password) give each request:
    the answer to a registry's Basic challenge, sent up front (the tests' registries, htpasswd
    without a token server, want it on every request)."""
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def get(reference: str, url: str, headers: Mapping[str, str]) -> bytes:
    """One GET; without an Authorization header, as a runtime without credentials for the
    registry makes it."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=dict(headers)),
                                    timeout=TIMEOUT) as answer:
            return answer.read()
    except urllib.error.HTTPError as err:
        detail = f"{err.code} {err.reason}"
    except (OSError, ValueError) as err:
        detail = str(err)
    raise PullError(f'failed to pull image "{reference}": {detail} (GET {url})')


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def checked_blob(reference: str, base: str, digest: str, auth: Mapping[str, str]) -> bytes:
    """The blob `digest` of the repository at `base` (read with the pull's `auth` headers),
    refused unless its bytes hash to it."""
    data = get(reference, f"{base}/blobs/{digest}", auth)
    if digest_of(data) != digest:
        raise PullError(f'failed to pull image "{reference}": blob {digest} does not match its digest')
    return data
