"""Names and labels of what fleetcache composes: the API group, label keys, child names
that are DNS labels on every cluster, and digests that make a name deterministic."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from crossplane.function.resource import child_name as sdk_child_name

from fleetcache import shapes
from fleetcache.apis.specs import InputError

GROUP = "fleetcache.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MODEL_CACHE = f"{GROUP}/model-cache"
LABEL_CLUSTER = f"{GROUP}/cluster"


def child_name(*parts: str) -> str:
    """A DNS-label-safe (<= 63 chars), deterministic child name, via the SDK.

    Parts that are not already DNS labels are cleaned; then a digest of the original parts
    is appended too, so two names that clean to the same text ("a.b" and "a-b", or two
    unicode names) never share a child (a PVC, a Job) on a cluster.
    """
    cleaned = [dns_safe(p) for p in parts]
    if cleaned != [str(p) for p in parts]:
        cleaned.append(short_digest(*(str(p) for p in parts), length=6))
    return sdk_child_name(*cleaned)


def dns_safe(text: str) -> str:
    """Lowercase RFC 1123 label characters only, so odd input never yields an invalid name."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", str(text).lower()).strip("-")
    return cleaned or "x"


def label_value(text: str) -> str:
    """A valid label value (<= 63 chars): the text itself when it is one, else a cleaned,
    hashed form (object names may be 253 characters, label values only 63)."""
    text = str(text)
    if shapes.is_label_value(text):
        return text
    return child_name(text)


def object_name(value: Any, field_path: str) -> str:
    """A Kubernetes object name (RFC 1123 subdomain, <= 253 chars), or InputError."""
    if not isinstance(value, str) or not value:
        raise InputError(f"{field_path} is required: the name of a Kubernetes object")
    if not shapes.is_object_name(value):
        shown = value if len(value) <= 80 else value[:77] + "..."
        raise InputError(f"{field_path}: {shown!r} is not a Kubernetes object name (lowercase "
                         "letters, digits, '-' and '.', at most 253 characters)")
    return value


def cache_volume_name(model_cache: str) -> str:
    """The PVC name of a ModelCache's volume: the same on every cluster."""
    return child_name(model_cache, "cache")


def short_digest(*parts: str, length: int = 10) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:length]



def canonical(value: Any) -> Any:
    """Sort every map so the same input always yields the same bytes out."""
    if isinstance(value, Mapping):
        return {str(k): canonical(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value


def digest_of(value: Any) -> str:
    return hashlib.sha256(json.dumps(canonical(value), sort_keys=True).encode()).hexdigest()
