"""The fleet mirrors (spec.distribution.mirror): which mirror each cluster reads, who
publishes a commit to it, and who waits.

A cluster's mirror is the regions[] entry whose region equals its FleetCluster's label
regionLabel, else the default mirror (s3), else none: that cluster reads the origin. The
clusters sharing a mirror are a group, and each group has one writer per commit, chosen
deterministically by compose-model-cache (contract §A, §D): the first Ready cluster of the
group by name whose hydration of the resolved commit has not Failed and that the rollout's
waves let start (a canary must not wait for a publisher in a later wave); it fetches from the
origin and publishes every verified blob, then the manifest. Every other cluster of the
group is composed only once its group's mirror is published (the publisher Ready on the
resolved commit), so the origin is read once per mirror. A failed publisher hands over to
the next name of its group. Readers trust nothing: they verify every byte against the
manifest digest latched at resolve.

The OCI mirror (spec.distribution.mirror.oci, never beside s3 or regions: the XRD refuses
it) is one group of every target: its publisher pushes the commit as a ModelPack artifact to
`<repository>/<artifact_name(the source's repo)>`, and only its hydration names the push
Secret, so the credentials reach the publishing cluster alone; readers read anonymously.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetcache import reasons
from fleetcache.functions import read
from fleetcache.functions.decisions import sources
from fleetcache.functions.k8s import job_mounts

PUBLISHER, READER = "Publisher", "Reader"
DEFAULT_REGION = ""  # the group of the default mirror (spec.distribution.mirror.s3)
DEFAULT_REGION_LABEL = "topology.kubernetes.io/region"
FIELD = "spec.distribution.mirror"


_NOT_IN_COMPONENT = re.compile(r"[^a-z0-9._-]+")
_SEPARATORS_AT_ENDS = re.compile(r"^[._-]+|[._-]+$")
_SEPARATOR_RUN = re.compile(r"[._-]{2,}")


def artifact_name(repo: str) -> str:
    """The artifact's repository below spec.distribution.mirror.oci.repository, from the
    source's repo name (Source.repo: `Org/Name`, `s3/<bucket>/<prefix>`, `oci/<host>/<path>`):
    lowercased, each component cut to the distribution grammar's characters, a run of
    separators made one `-`, empty components dropped. The same repo always names the same
    artifact repository; its tag tells commits and patterns apart."""
    parts = []
    for part in repo.lower().split("/"):
        part = _SEPARATORS_AT_ENDS.sub("", _SEPARATOR_RUN.sub("-", _NOT_IN_COMPONENT.sub("-", part)))
        if part:
            parts.append(part)
    return "/".join(parts) or "model"


def push_secret(ref: Mapping, field: str) -> job_mounts.SecretRef:
    """The OCI mirror's push Secret: its Docker config JSON mounted as the agent's config.json."""
    return job_mounts.SecretRef(ref["name"], ((ref.get("key", job_mounts.DOCKER_CONFIG_KEY),
                                               sources.REGISTRY_CONFIG_FILE),),
                                sources.MIRROR_CREDENTIALS_MOUNT_PATH, field)


@dataclass(frozen=True)
class Location:
    """One mirror of the spec: where it is, and the spec path that names it (messages)."""

    region: str  # DEFAULT_REGION for s3 and oci
    s3: dict
    path: str  # e.g. spec.distribution.mirror.regions[1].s3
    oci: dict | None = None  # spec.distribution.mirror.oci (then s3 is empty)

    @property
    def bucket(self) -> str:
        return str(self.s3.get("bucket", ""))

    @property
    def repository(self) -> str:
        return str((self.oci or {}).get("repository", ""))

    @property
    def described(self) -> str:
        return f"repository {self.repository}" if self.oci is not None else f"bucket {self.bucket}"

    @property
    def secret(self) -> job_mounts.SecretRef | None:
        if self.oci is not None:
            ref = self.oci.get("pushSecretRef")
            return push_secret(ref, f"{self.path}.pushSecretRef") if isinstance(ref, Mapping) else None
        ref = self.s3.get("credentialsSecretRef")
        return sources.credentials(ref, sources.MIRROR_CREDENTIALS_MOUNT_PATH,
                                   f"{self.path}.credentialsSecretRef") \
            if isinstance(ref, Mapping) else None

    def holds(self, hydration: Any) -> bool:
        """The hydration was composed for this mirror (a cluster that moved to another
        region published elsewhere)."""
        if self.oci is not None:
            composed = read.get_path(hydration, "spec.mirror.oci.repository")
            return isinstance(composed, str) and composed.startswith(f"{self.repository}/")
        composed = read.mapping_at(hydration, "spec.mirror.s3")
        return composed.get("bucket") == self.bucket \
            and composed.get("prefix") == self.s3.get("prefix")


def locations(spec: Mapping | None) -> list[Location]:
    """Every mirror the spec names: the default one first, then regions[] in spec order."""
    if not spec:
        return []
    if isinstance(spec.get("oci"), Mapping):
        return [Location(DEFAULT_REGION, {}, f"{FIELD}.oci", dict(spec["oci"]))]
    found = [Location(DEFAULT_REGION, dict(spec["s3"]), f"{FIELD}.s3")] \
        if isinstance(spec.get("s3"), Mapping) else []
    for index, entry in enumerate(spec.get("regions") or ()):
        found.append(Location(str(entry["region"]), dict(entry["s3"]),
                              f"{FIELD}.regions[{index}].s3"))
    return found


def location_for(spec: Mapping, labels: Mapping[str, str]) -> Location | None:
    """The mirror a cluster with these FleetCluster labels reads; None: the origin."""
    value = labels.get(spec.get("regionLabel") or DEFAULT_REGION_LABEL)
    mirrors = locations(spec)
    regional = next((m for m in mirrors if m.region != DEFAULT_REGION and m.region == value),
                    None)
    return regional or next((m for m in mirrors if m.region == DEFAULT_REGION), None)


@dataclass(frozen=True)
class Candidate:
    """A target cluster as the mirror decision sees it."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    ready: bool = True  # only a Ready cluster can be composed, so only it can publish
    hydration: dict | None = None  # its observed hydration pinned to the commit, if any
    may_start: bool = True  # the rollout's waves let it start on the commit (decisions/waves.py)


@dataclass(frozen=True)
class Group:
    """The target clusters sharing one mirror, and its writer for the commit."""

    location: Location
    clusters: tuple[str, ...]  # in name order
    publisher: str  # "" when no cluster of the group can publish
    published: bool

    @property
    def region(self) -> str:
        return self.location.region

    def as_status(self) -> dict:
        where = {"repository": self.location.repository} if self.location.oci is not None else {}
        return {"region": self.region, "bucket": self.location.bucket, **where,
                "publisher": self.publisher, "published": self.published,
                "clusters": len(self.clusters)}


@dataclass(frozen=True)
class Mirror:
    commit: str
    on_missing: str
    groups: tuple[Group, ...]  # the mirrors targets use: the default one first, then by region
    artifact: str = ""  # the OCI mirror's artifact name below its repository (artifact_name)

    def group_of(self, cluster: str) -> Group | None:
        return next((g for g in self.groups if cluster in g.clusters), None)

    @property
    def publisher(self) -> str:
        """The default mirror's publisher, else the first group's (status.mirror.publisher
        keeps its meaning for a single mirror)."""
        return self.groups[0].publisher if self.groups else ""

    @property
    def published(self) -> bool:
        return bool(self.groups) and all(g.published for g in self.groups)

    def as_status(self) -> dict:
        return {"publisher": self.publisher, "published": self.published,
                "commit": self.commit, "groups": [g.as_status() for g in self.groups]}

    def waits(self, cluster: str) -> bool:
        """A reader is not composed before its own group's mirror holds the commit."""
        group = self.group_of(cluster)
        return group is not None and not group.published and cluster != group.publisher

    def for_hydration(self, cluster: str, observed_role: Any) -> dict | None:
        """The hydration's spec.mirror (None: it reads the origin); a hydration already
        pinned keeps its role (its Job is immutable, and a reader turned publisher would
        only upload what is there)."""
        group = self.group_of(cluster)
        if group is None:
            return None
        role = observed_role if observed_role in (PUBLISHER, READER) \
            else PUBLISHER if cluster == group.publisher else READER
        oci = group.location.oci
        if oci is not None:  # the push Secret goes to the publisher alone
            where = {"repository": f"{group.location.repository}/{self.artifact}",
                     "plainHTTP": bool(oci.get("plainHTTP", False)),
                     **({"pushSecretRef": dict(oci["pushSecretRef"])}
                        if role == PUBLISHER and oci.get("pushSecretRef") else {})}
            return {"oci": where, "onMissing": self.on_missing, "role": role}
        return {"s3": dict(group.location.s3), "onMissing": self.on_missing, "role": role}

    def waiting_message(self, cluster: str) -> str:
        group = self.group_of(cluster)
        if group is None:
            return ""
        mirror = f"the mirror of region {group.region}" if group.region \
            else "the default mirror"
        where = f"{mirror} ({group.location.path}, {group.location.described})"
        if not group.publisher:
            return reasons.with_remedy(f"no cluster can publish {self.commit[:10]} to {where}: "
                                   "every target's hydration there failed", reasons.HydrationFailed)
        return (f"waiting for {group.publisher} to publish {self.commit[:10]} to {where}; "
                "this cluster then reads that mirror, not the origin")


def decide(spec: Mapping | None, commit: str, candidates: list[Candidate],
           latched: Any, repo: str = "") -> Mirror | None:
    """candidates: the target clusters in name order; repo: the source's (the OCI mirror
    names its artifact after it). None when no mirror is set."""
    if not spec:
        return None
    members: dict[str, list[Candidate]] = {}
    for candidate in candidates:
        location = location_for(spec, candidate.labels)
        if location is not None:
            members.setdefault(location.path, []).append(candidate)
    groups = []
    for location in sorted(locations(spec), key=lambda m: m.region):
        group = members.get(location.path)
        if not group:
            continue
        publisher = next((c.name for c in group if c.ready and c.may_start and
                          read.get_path(c.hydration, "status.phase") != "Failed"), "")
        published = published_before(latched, commit, location) or any(
            read.get_path(c.hydration, "status.phase") == "Ready"
            and read.get_path(c.hydration, "status.reason") != reasons.ImageVolume  # pushed nothing
            and read.get_path(c.hydration, "spec.mirror.role") == PUBLISHER
            and location.holds(c.hydration) for c in group)
        groups.append(Group(location, tuple(c.name for c in group), publisher, published))
    return Mirror(commit, str(spec.get("onMissing", "Origin")), tuple(groups), artifact_name(repo))


def published_before(latched: Any, commit: str, location: Location) -> bool:
    """status.mirror latched this mirror (its region and bucket) as holding `commit`, so a
    publisher evicted or failing later holds no reader back. A status written before
    regions (no groups) speaks of the default mirror."""
    latched = latched if isinstance(latched, Mapping) else {}
    if latched.get("commit") != commit:
        return False
    rows = latched.get("groups")
    if not isinstance(rows, list):
        return location.region == DEFAULT_REGION and latched.get("published") is True
    return any(isinstance(r, Mapping) and r.get("published") is True
               and r.get("region") == location.region and r.get("bucket") == location.bucket
               and r.get("repository", "") == location.repository for r in rows)


def args(mirror_spec: Mapping) -> list[str]:
    """The fetch flags of a hydration's spec.mirror (contract §C)."""
    role = ["--mirror-role", str(mirror_spec.get("role", READER)).lower(),
            "--mirror-on-missing", str(mirror_spec.get("onMissing", "Origin")).lower()]
    oci = mirror_spec.get("oci")
    if isinstance(oci, Mapping):
        flags = ["--mirror-oci-repository", str(oci["repository"])]
        if oci.get("plainHTTP"):
            flags.append("--mirror-plain-http")
        if oci.get("pushSecretRef"):
            flags += ["--mirror-registry-config",
                      f"{sources.MIRROR_CREDENTIALS_MOUNT_PATH}/{sources.REGISTRY_CONFIG_FILE}"]
        return flags + role
    location = mirror_spec["s3"]
    flags = sources.s3_args("--mirror", location)
    if location.get("credentialsSecretRef"):
        flags += ["--mirror-credentials-dir", sources.MIRROR_CREDENTIALS_MOUNT_PATH]
    return flags + role


def secret(mirror_spec: Mapping | None) -> job_mounts.SecretRef | None:
    """The Secret a hydration's mirror fetch needs (its spec.mirror has one location; an
    OCI mirror's only on the publisher's)."""
    pushed = read.get_path(mirror_spec, "oci.pushSecretRef")
    if isinstance(pushed, Mapping):
        return push_secret(pushed, "spec.distribution.mirror.oci.pushSecretRef")
    ref = read.get_path(mirror_spec, "s3.credentialsSecretRef")
    return sources.credentials(ref, sources.MIRROR_CREDENTIALS_MOUNT_PATH,
                               "spec.distribution.mirror.s3.credentialsSecretRef") \
        if isinstance(ref, Mapping) else None
