"""The agent's flags: the check each value must pass, and the option sets several commands share.

A value that fails its check is InvalidConfiguration (15) naming the flag (`bad`), raised
before anything is fetched or written. The shapes themselves (commits, digests, bucket
names, quantities) are the contract's (fleetcache.shapes, fleetcache.quantity).
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Literal, overload
from urllib.parse import urlsplit

import click

from fleetcache import quantity, reasons
from fleetcache.agent.errors import AgentError, os_reason
from fleetcache.agent.mirror import ORIGIN
from fleetcache.shapes import OCI_HOST, OCI_REPOSITORY, S3_BUCKET, SHA256_HEX, is_resolved_commit
from fleetcache.volume import OCI_REPO

DEFAULT_ENDPOINT = "https://huggingface.co"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
_S3_REPO = re.compile(rf"s3/{S3_BUCKET.pattern}(?:/[\w.=+-]+)*")
_REPO = re.compile(r"(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*")
DEST_FIX = "pass a directory (in a cluster, the cache volume's mount path)"


def bad(flag: str, why: str) -> AgentError:
    return AgentError(reasons.InvalidConfiguration, f"{flag}: {why}")


def parse_quantity(value: str) -> float:
    """A Kubernetes quantity (`200Mi`, `1G`, `500k`) as bytes per second."""
    try:
        rate = quantity.parse(value)
    except quantity.QuantityError:
        rate = Decimal(0)
    if rate < 1:
        raise bad("--bandwidth", f"{value!r} is not a positive Kubernetes quantity like 200Mi or 1G")
    return float(rate)


def check_repo(repo: str) -> str:
    """ORG/NAME on the Hub, or the name an S3 source's files are kept under (`s3/<bucket>/<prefix>`), or an OCI
    source's (`oci/<host>/<repository>`)."""
    if not (_REPO.fullmatch(repo) or _S3_REPO.fullmatch(repo) or OCI_REPO.fullmatch(repo)) or ".." in repo:
        raise bad("--repo", f"{repo!r} is not ORG/NAME")
    return repo


def check_revision(revision: str, flag: str = "--revision") -> str:
    parts = revision.split("/")
    if not revision or any(p in ("", ".", "..") for p in parts) or "\\" in revision or "\0" in revision \
            or any(c.isspace() for c in revision):
        raise bad(flag, f"{revision!r} is not a branch, tag or commit")
    return revision


def check_dest(dest: str) -> Path:
    """The volume root must be a directory, or not exist yet below one (the agent creates it).
    An empty value is refused rather than read as the working directory."""
    if not dest:
        raise bad("--dest", f"is empty: {DEST_FIX}")
    path = Path(dest)
    try:
        for existing in (path, *path.parents):
            if existing.exists() or existing.is_symlink():
                if not existing.is_dir():
                    raise bad("--dest", f"{str(existing)!r} is not a directory: {DEST_FIX}")
                return path
    except OSError as err:  # a name too long, a directory it may not search
        raise bad("--dest", f"cannot look up {str(path)!r}: {os_reason(err)}: {DEST_FIX}") from None
    return path


def make_dest(path: Path) -> None:
    """--dest of a command that writes, created (with its parents) before its first write, so
    a path the agent cannot use is refused by name."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise bad("--dest", f"cannot create {str(path)!r}: {os_reason(err)}: pass a directory the agent can "
                            "create and write (in a cluster, the cache volume's mount path)") from None


def check_endpoint(endpoint: str) -> str:
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.query:
        raise bad("--endpoint", "must be an http(s) URL without credentials or query")
    return endpoint


def need_repo(repo: str | None, otherwise: str = "or --s3-bucket for an S3 source") -> str:
    """--repo, which a command requires unless `otherwise` (another flag) names the content."""
    if repo is None:
        raise bad("--repo", f"missing: give ORG/NAME ({otherwise})")
    return repo


def no_hub_repo(repo: str | None) -> None:
    if repo is not None:
        raise bad("--repo", "not with --s3-bucket: an S3 source is named by its bucket and prefix")


def one_source(repo: str | None, s3_bucket: str | None, oci_reference: str | None,
               volume_manifest: str | None = None) -> None:
    """An OCI reference names the whole source: no Hub repo, S3 bucket or volume manifest beside it."""
    for flag, value in (("--repo", repo), ("--s3-bucket", s3_bucket), ("--manifest-file", volume_manifest)):
        if oci_reference is not None and value is not None:
            raise bad(flag, "not with --oci-reference: give one source (an OCI reference names the registry, "
                            "repository and tag or digest)")


def oci_only(oci_reference: str | None, registry_config: str | None, plain_http: bool) -> None:
    if oci_reference is None:
        for flag, given in (("--registry-config", registry_config is not None), ("--plain-http", plain_http)):
            if given:
                raise bad(flag, "only with --oci-reference")


def check_oci_repository(value: str) -> tuple[str, str]:
    """--mirror-oci-repository: HOST[:PORT]/REPOSITORY as the XRD's pattern admits it, split."""
    host, _, repository = value.partition("/")
    if not OCI_HOST.fullmatch(host) or not OCI_REPOSITORY.fullmatch(repository):
        raise bad("--mirror-oci-repository", f"{value!r} is not HOST[:PORT]/REPOSITORY (a registry host, then "
                                             "lowercase components joined by /; no tag or digest)")
    return host, repository


def check_commit(commit: str, flag: str = "--commit") -> str:
    """A resolved commit: a Hub commit, or an S3, OCI or volume pin."""
    if not is_resolved_commit(commit):
        raise bad(flag, f"{commit!r} is not a 40-hex commit (or s3-, oci- or vol- and 40 hex)")
    return commit


@overload
def check_digest(digest: str | None, required: Literal[True] = ...) -> str: ...


@overload
def check_digest(digest: str | None, required: bool) -> str | None: ...


def check_digest(digest: str | None, required: bool = True) -> str | None:
    """--manifest-digest: the sha256 resolve pinned, as 64 hex."""
    if (digest is not None or required) and not SHA256_HEX.fullmatch(digest or ""):
        raise bad("--manifest-digest", f"{digest!r} is not a 64-hex sha256")
    return digest


def check_seconds(flag: str, value: str | None) -> float | None:
    try:
        seconds = None if value is None else float(value)
    except ValueError:
        seconds = -1.0
    if seconds is not None and seconds <= 0:
        raise bad(flag, f"{value!r} is not a positive number of seconds")
    return seconds


def globs(patterns) -> list[str] | None:
    """--allow or --ignore as the selection takes it: None when the flag was not given."""
    return list(patterns) if patterns else None


# -- option sets ------------------------------------------------------------------------------

COMMON = [
    click.option("--endpoint", default=DEFAULT_ENDPOINT, show_default=True),
    click.option("--repo", help="ORG/NAME on the Hub (not with --s3-bucket)"),
    click.option("--revision", default="main", show_default=True),
    click.option("--token-file"),
    click.option("--allow", multiple=True, help="glob, repeatable (huggingface_hub allow_patterns)"),
    click.option("--ignore", multiple=True, help="glob, repeatable (huggingface_hub ignore_patterns)"),
    click.option("--progress-file"),
    click.option("--progress-configmap", help="NAMESPACE/NAME"),
    click.option("--termination-log", default=DEFAULT_TERMINATION_LOG, show_default=True),
]
S3 = [
    click.option("--s3-bucket", help="the source is this S3 bucket instead of the Hub"),
    click.option("--s3-prefix", default="", help="the folder in the bucket (no leading /)"),
    click.option("--s3-region", default="us-east-1", show_default=True),
    click.option("--s3-endpoint", help="an S3-compatible endpoint URL"),
    click.option("--credentials-dir", help="a mounted Secret with files AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
]
OCI = [
    click.option("--oci-reference", help="the source is this OCI artifact or image: HOST/REPOSITORY:TAG or "
                                         "HOST/REPOSITORY@sha256:HEX"),
    click.option("--registry-config", help="a Docker config JSON (a pull secret's .dockerconfigjson) with the "
                                           "registry's credentials"),
    click.option("--plain-http", is_flag=True, help="talk to the registry over http (a registry on loopback)"),
]
MIRROR = [
    click.option("--mirror-bucket", help="the fleet mirror's S3 bucket"),
    click.option("--mirror-oci-repository", help="the fleet mirror's OCI repository (HOST/REPOSITORY) to publish "
                                                 "the commit to as a ModelPack artifact, or read it from"),
    click.option("--mirror-registry-config", help="a Docker config JSON with credentials for the mirror registry"),
    click.option("--mirror-plain-http", is_flag=True, help="talk to the mirror registry over http"),
    click.option("--mirror-prefix", default="fleetcache", show_default=True),
    click.option("--mirror-region", default="us-east-1", show_default=True),
    click.option("--mirror-endpoint"),
    click.option("--mirror-credentials-dir"),
    click.option("--mirror-role", help="publisher | reader"),
    click.option("--mirror-on-missing", default=ORIGIN, show_default=True, help="origin | fail"),
]


def with_options(options):
    def apply(fn):
        for option in reversed(options):
            fn = option(fn)
        return fn
    return apply
