"""The shapes a name, a label, a commit or a digest must have: each written once, for the
function, the agent and the developer tools alike. Every pattern is used with `fullmatch`."""

from __future__ import annotations

import re
from typing import Any, TypeGuard

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # RFC 1123 label: a namespace, a Service
DNS_LABEL_MAX = 63
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")  # an object name
DNS_SUBDOMAIN_MAX = 253
LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")  # a label key's name part
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
LABEL_VALUE_MAX = 63
GIT_COMMIT = re.compile(r"[0-9a-f]{40}")  # a Hub commit, and a git blob's sha1
# What status.resolved.commit may be: a Hub commit, or an S3, OCI or volume pin
# (design/sources.md); safe as a path component.
RESOLVED_COMMIT = re.compile(r"((s3|oci|vol)-)?[0-9a-f]{40}")
S3_COMMIT = re.compile(r"s3-[0-9a-f]{40}")  # an S3 source's pin alone
# An OCI reference as spec.source.oci.reference takes it, written once from its parts: the
# registry host always (a name with a dot or a port, or localhost, as Docker tells a host from
# a path; no Docker Hub shorthand), the repository in the distribution spec's grammar, then a
# tag or a digest (no "latest" assumed). The agent parses with the same parts
# (oci_reference_parts); the XRDs' pattern is OCI_REFERENCE's, anchored (apis/patterns.py).
OCI_HOST = re.compile(
    r"[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)+(:[0-9]{1,5})?"
    r"|localhost(:[0-9]{1,5})?|[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?:[0-9]{1,5}")
OCI_REPOSITORY = re.compile(r"[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)*")
OCI_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
OCI_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
OCI_REFERENCE = re.compile(
    rf"({OCI_HOST.pattern})/{OCI_REPOSITORY.pattern}(:{OCI_TAG.pattern}|@{OCI_DIGEST.pattern})")
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# An engine image as a pod names it (ModelCache spec.images[].image): the registry host may be
# left out (docker.io), as the runtimes read it; the XRD's CEL also requires a tag or a digest.
ENGINE_IMAGE = re.compile(r"[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)+"
                          r"(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[a-f0-9]{64})?")
S3_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")  # an S3 bucket name; ".." in it is refused separately


def is_dns_label(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and len(value) <= DNS_LABEL_MAX and DNS_LABEL.fullmatch(value) is not None


def is_object_name(value: Any) -> TypeGuard[str]:
    """An RFC 1123 subdomain of at most 253 characters: what most Kubernetes objects are named."""
    return isinstance(value, str) and len(value) <= DNS_SUBDOMAIN_MAX \
        and DNS_SUBDOMAIN.fullmatch(value) is not None


def is_label_value(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and len(value) <= LABEL_VALUE_MAX and LABEL_VALUE.fullmatch(value) is not None


def is_resolved_commit(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and RESOLVED_COMMIT.fullmatch(value) is not None


def is_sha256(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and SHA256_HEX.fullmatch(value) is not None


def is_oci_digest(value: Any) -> TypeGuard[str]:
    """A registry blob's digest: sha256:<64 hex> (the only algorithm the agent reads)."""
    return isinstance(value, str) and OCI_DIGEST.fullmatch(value) is not None


def oci_reference_parts(value: Any) -> tuple[str, str, str | None, str | None] | None:
    """(host[:port], repository, tag, digest) of a reference OCI_REFERENCE matches, else None:
    split after the match, where each separator can only be where the grammar puts it (the
    first "/" ends the host; a repository has no ":" or "@")."""
    if not isinstance(value, str) or OCI_REFERENCE.fullmatch(value) is None:
        return None
    name, at, digest = value.partition("@")
    host, _, rest = name.partition("/")
    if at:
        return host, rest, None, digest
    repository, _, tag = rest.rpartition(":")
    return host, repository, tag, None


def image_by_digest(image: str, digest: str) -> str:
    """The image's repository pinned by digest, as every node pulls it: its tag (after the
    last "/", so a registry port stays) and any digest it named replaced by `digest`."""
    name = image.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}@{digest}"
