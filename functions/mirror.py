"""The fleet mirror (spec.distribution.mirror): who publishes a commit and who waits.

One writer per commit, chosen deterministically by compose-model-cache (contract §D): the
publisher is the first target cluster by name whose hydration of the resolved commit has not
Failed; it fetches from the origin and publishes every verified blob, then the manifest.
Every other cluster's hydration is composed only once the mirror is published (the
publisher Ready on the resolved commit), so the origin is read once per fleet. A failed
publisher hands over to the next name. Readers trust nothing: they verify every byte against
the manifest digest latched at resolve.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from fleetcache.functions import kit, sources

PUBLISHER, READER = "Publisher", "Reader"


@dataclass(frozen=True)
class Mirror:
    spec: dict  # spec.distribution.mirror: {s3, onMissing}
    commit: str
    publisher: str  # "" when every target's hydration failed
    published: bool

    def as_status(self) -> dict:
        return {"publisher": self.publisher, "published": self.published, "commit": self.commit}

    def role_of(self, cluster: str) -> str:
        return PUBLISHER if cluster == self.publisher else READER

    def waits(self, cluster: str) -> bool:
        """A reader is not composed before the mirror holds the commit."""
        return not self.published and cluster != self.publisher

    def for_hydration(self, cluster: str, observed_role: Any) -> dict:
        """The hydration's spec.mirror; a hydration already pinned keeps its role (its Job
        is immutable, and a reader turned publisher would only upload what is there)."""
        role = observed_role if observed_role in (PUBLISHER, READER) else self.role_of(cluster)
        return {**self.spec, "role": role}

    @property
    def waiting_message(self) -> str:
        if not self.publisher:
            return kit.with_remedy("no cluster can publish the mirror copy of "
                                   f"{self.commit[:10]}: every target's hydration failed",
                                   "HydrationFailed")
        return (f"waiting for {self.publisher} to publish {self.commit[:10]} to the fleet "
                "mirror (spec.distribution.mirror); this cluster then reads the mirror, not "
                "the origin")


def decide(spec: dict | None, commit: str, clusters: list[tuple[str, dict | None]],
           latched: Any) -> Mirror | None:
    """clusters: the target clusters in name order that can hydrate (Ready), with their
    observed hydration pinned to `commit` (None if none). None when no mirror is set."""
    if not spec:
        return None
    latched = latched if isinstance(latched, Mapping) else {}
    was_published = latched.get("commit") == commit and latched.get("published") is True
    publisher = next((name for name, hydration in clusters
                      if kit.get_path(hydration, "status.phase") != "Failed"), "")
    published = was_published or any(
        kit.get_path(h, "status.phase") == "Ready"
        and kit.get_path(h, "spec.mirror.role") == PUBLISHER for _, h in clusters)
    return Mirror(dict(spec), commit, publisher, published)


def args(mirror_spec: Mapping) -> list[str]:
    """The fetch flags of a hydration's spec.mirror (contract §C)."""
    location = mirror_spec["s3"]
    flags = sources.s3_args("--mirror", location)
    if location.get("credentialsSecretRef"):
        flags += ["--mirror-credentials-dir", sources.MIRROR_CREDENTIALS_MOUNT_PATH]
    return flags + ["--mirror-role", str(mirror_spec.get("role", READER)).lower(),
                    "--mirror-on-missing", str(mirror_spec.get("onMissing", "Origin")).lower()]


def secret(mirror_spec: Mapping | None) -> sources.SecretRef | None:
    ref = kit.get_path(mirror_spec, "s3.credentialsSecretRef")
    return sources.credentials(ref, sources.MIRROR_CREDENTIALS_MOUNT_PATH,
                               "spec.distribution.mirror.s3.credentialsSecretRef") \
        if isinstance(ref, Mapping) else None
