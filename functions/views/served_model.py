"""The model a ModelDeployment serves, as compose-model-deployment reads it from its
ModelCache (status.resolved, spec.source, spec.placement) and the cache's
ModelCacheHydrations (each target cluster's standing, its claim, its node tier), and what a
replica is given of it: spec.cache, the claim and the model's directory it mounts
(`Model.cache_mount`), or while it waits, spec.hydration (`Model.waiting_on`). While the
cache rolls a new commit out in waves (status.rollout), a cluster its rollout keeps on other
content is read against that content (`held_content`, `held_report`).
The cache's OCI artifact, which replicas on clusters that mount image volumes mount instead of
its volume, is read here too (`mountable_artifact`).

compose-model-cache and compose-model-cache-hydration write what is read here; every value
read is input, cut to size or read as absent when it is not what it should be."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from fleetcache import messages, reasons, shapes
from fleetcache.apis import specs
from fleetcache.functions import naming, protocol, read
from fleetcache.functions.k8s import agent_job
from fleetcache.functions.views import model_cache as model_cache_view
from fleetcache.functions.views import placement
from fleetcache.functions.views.hydration import ClusterReport, pinned_to, report_of
from fleetcache.functions.views.model_replica import FLAT, ImageMount
from fleetcache.functions.views.node_tier import NodeTier
from fleetcache.functions.views.placement import Target
from fleetcache.volume import flat_commit_path, hf_snapshot_path


def hydration_status(row: ClusterReport) -> dict:
    """A Wait or Fail replica's spec.hydration: where the cache stands on its cluster (what
    the hydration says is input here: its phase, reason and message are cut to size)."""
    return {"phase": messages.clipped(row.phase, 32), "bytesDone": max(0, row.bytes_done),
            "bytesTotal": max(0, row.bytes_total), "reason": reasons.reason_or_empty(row.reason),
            "message": messages.clipped(row.message, messages.MESSAGE_LIMIT)}


@dataclass(frozen=True)
class Files:
    """How the cache's files sit on the claim a replica mounts (design/sources.md "Layout,
    and what engines get"): a Hugging Face cache (Hub, S3 layout HfCache), or flat, at their
    paths: an existing volume's subPath, served in place from the user's claim, or an S3
    prefix fetched with layout Flat to its commit's directory on the cache volume."""

    flat: bool = False
    in_place: bool = False  # an existing volume: replicas mount the user's claim
    claim: str = ""  # spec.source.volume.claimName
    sub_path: str = ""  # spec.source.volume.subPath, without slashes at its ends

    @classmethod
    def of(cls, cache: Mapping, outcome: protocol.Outcome) -> Files:
        """From the ModelCache's spec.source (read, never trusted: a subPath that climbs out
        of the claim reads as its root, with a warning)."""
        volume = read.mapping_at(cache, "spec.source.volume")
        if not volume:
            return cls(flat=FLAT in (read.get_path(cache, "spec.source.s3.layout"),
                                     read.get_path(cache, "spec.source.oci.layout")))
        claim, sub_path = text_at(volume, "claimName"), text_at(volume, "subPath").strip("/")
        if ".." in sub_path.split("/") or not sub_path.isprintable() \
                or any(c.isspace() for c in sub_path):
            outcome.warnings.append(f"ModelCache spec.source.volume.subPath {messages.shown(sub_path)} "
                                    "is not a path inside the claim; replicas read its root")
            sub_path = ""
        return cls(True, True, read.name_or_empty(claim), sub_path)

    @property
    def name(self) -> str:
        """What replicas call a model served in place (model.repo): it has no repository."""
        return messages.clipped("/".join(p for p in ("volume", self.claim, self.sub_path) if p), 200)

    def model_path(self, mount: str, repo: str, commit: str) -> str:
        """FLEETCACHE_MODEL: the commit's snapshot, the commit's flat directory (never
        changed once published, so the replica sees its own commit), or the volume's files."""
        if not self.flat:
            return hf_snapshot_path(mount, repo, commit)
        if not self.in_place:
            return flat_commit_path(mount, commit)
        return f"{mount.rstrip('/')}/{self.sub_path}" if self.sub_path else mount


@dataclass(frozen=True)
class Artifact:
    """What an image volume of the cache mounts: a reference pinned by digest, and the commit
    whose files it holds."""

    reference: str
    commit: str

    def mount(self, cache: str) -> dict:
        """An Image replica's spec.image."""
        return ImageMount(cache, self.reference, self.commit).as_spec()


def mirrored_reference(artifact: Any) -> str:
    """status.resolved.artifact as a reference pinned by digest ("" when it is none): its
    reference, or its repository and digest."""
    reference, digest = read.get_path(artifact, "reference"), read.get_path(artifact, "digest")
    if model_cache_view.is_pinned_reference(reference):
        return str(reference)
    parts = shapes.oci_reference_parts(f"{reference}@{digest}")
    return f"{reference}@{digest}" if parts is not None and shapes.is_oci_digest(digest) else ""


def whole_layers(manifest: Any) -> bool:
    """Every file of a pinned OCI manifest is a whole layer (no member of a tar layer: those
    carry an offset in their blob), so a runtime mounting the artifact puts each file at its
    path."""
    entries = model_cache_view.read_manifest(manifest)
    return entries is not None and all("offset" not in entry for entry in entries)


def mountable_artifact(cache: Any) -> Artifact | None:
    """The artifact a ModelCache's replicas can mount for its resolved commit: the mirror's
    ModelPack artifact first (published by the fleet, one layer per file), else the OCI
    source's resolved reference when its files are whole layers; None otherwise. A cache with
    an OCI mirror mounts only the mirror's artifact: mounting the source until it is published
    would pull the origin once per image-volume cluster and then again from the mirror, and
    would leave an image-volume publisher nothing to publish."""
    resolved = read.mapping_at(cache, "status.resolved")
    commit = resolved.get("commit")
    if not shapes.is_resolved_commit(commit):
        return None
    mirrored = mirrored_reference(resolved.get("artifact"))
    if mirrored:
        return Artifact(mirrored, commit)
    if read.mapping_at(cache, "spec.distribution.mirror.oci"):
        return None
    source = resolved.get("reference")
    if read.mapping_at(cache, "spec.source.oci") and model_cache_view.is_pinned_reference(source) \
            and whole_layers(resolved.get("manifest")):
        return Artifact(str(source), commit)
    return None


def volume_name(hydration: Any) -> str:
    """The claim a cluster's hydration says it filled or verified (status.volumeName: the
    cache PVC, or the user's claim of an existing volume); "" unless it is a claim name."""
    return read.name_or_empty(read.get_path(hydration, "status.volumeName"))


@dataclass(frozen=True)
class Content:
    """A commit and the manifest digest that says which of its files: what a hydration is
    pinned to, and what replicas serve."""

    commit: str
    manifest_digest: str


@dataclass(frozen=True)
class Model:
    """What the replicas load, and where the cache stands on each of its clusters."""

    repo: str
    revision: str
    commit: str
    cache_name: str | None = None
    cache_found: bool = False
    targets: Mapping[str, ClusterReport] = field(default_factory=dict)
    manifest_digest: str = ""
    node_tiers: Mapping[str, NodeTier] = field(default_factory=dict)  # clusters on tier Node
    files: Files = Files()
    volumes: Mapping[str, str] = field(default_factory=dict)  # cluster -> status.volumeName
    # An engine can load the model from its source: a Hub repo. An S3 prefix or a volume's
    # own files are nothing an engine loads by name, so where the table says Source, Wait.
    from_source: bool = True
    # Clusters the cache's rollout in waves keeps on other content than the resolved one
    # (their wave has not started, or the rollout rolled them back): targets[] reads them
    # against that content, and their replicas serve it.
    held: Mapping[str, Content] = field(default_factory=dict)
    # The cache's OCI artifact (design/image-volumes.md) and the clusters that mount image
    # volumes (spec.features.imageVolumes): there, replicas of that commit mount the artifact.
    artifact: Artifact | None = None
    image_clusters: frozenset[str] = frozenset()
    # cluster -> a replica's spec.engineImage where the cache keeps the engine's image
    # (functions/decisions/engine_image.py).
    engine_images: Mapping[str, dict] = field(default_factory=dict)

    def content_on(self, cluster: str) -> Content:
        """The content replicas on the cluster serve once it is Ready there: the content its
        hydration is held on, else the resolved one."""
        return self.held.get(cluster) or Content(self.commit, self.manifest_digest)

    def cache_mount(self, cluster: str, commit: str, mount: str = agent_job.CACHE_MOUNT_PATH) -> dict:
        """A Cache replica's spec.cache: the claim the cluster's hydration filled or verified
        and the model's directory of one commit inside it (a Node replica's fallback: the
        same claim at its own mount path). Without a hydration's word, the claim the source
        names: the user's own, else the cache PVC."""
        volume = self.volumes.get(cluster) or self.files.claim \
            or naming.cache_volume_name(self.cache_name or "")
        mounted = {"modelCacheName": self.cache_name, "volumeName": volume, "mountPath": mount,
                   "snapshotPath": self.files.model_path(mount, self.repo, commit),
                   "commit": commit}
        if self.files.flat:
            mounted["layout"] = FLAT
        return mounted

    def waiting_on(self, namespace: str, cluster: str) -> dict:
        """A Wait or Fail replica's spec.hydration; with no ModelCache, why nothing runs."""
        if self.cache_found and cluster not in self.targets:  # waits: nothing loads its source
            return {"phase": "Pending", "reason": reasons.NotACacheTarget, "message": (
                f"cluster {cluster} is not a target of ModelCache {namespace}/"
                f"{self.cache_name}, whose source no engine loads by name (an S3 prefix or "
                "an existing volume), so nothing runs there: add the cluster to the "
                "ModelCache's spec.placement")}
        if self.cache_found:
            return hydration_status(self.targets[cluster])
        return {"phase": "Pending", "reason": reasons.ModelCacheNotFound, "message": reasons.with_remedy(
            f"ModelCache {namespace}/{self.cache_name} does not exist and no model was served "
            "before, so there is nothing to load", reasons.ModelCacheNotFound)}

    def as_status(self) -> dict:
        out = {"repo": self.repo, "revision": self.revision, "commit": self.commit}
        if self.cache_name:
            out["modelCacheName"] = self.cache_name
        return out


def rolling_out(cache: Mapping) -> bool:
    """The cache rolls its resolved commit out in waves and has not completed: clusters can be
    held on other content (status.rollout is absent without spec.rollout.waves)."""
    rollout = model_cache_view.RolloutStatus.of(read.get_path(cache, "status.rollout"))
    return rollout is not None and rollout.phase != model_cache_view.COMPLETE


def held_content(hydration: Any, resolved: Mapping) -> Content | None:
    """The content a hydration is pinned to when that is a commit of the resolved repo other
    than the resolved content; None when it is pinned to the resolved content, names no
    commit, or fetches another repository (whose snapshot is another model)."""
    commit = read.get_path(hydration, "spec.commit")
    if hydration is None or pinned_to(hydration, resolved) or not shapes.is_resolved_commit(commit):
        return None
    repo = read.get_path(hydration, "spec.source.huggingFace.repo")
    if repo is not None and repo != resolved.get("repo"):
        return None
    digest = read.get_path(hydration, "spec.manifestDigest")
    return Content(commit, digest if shapes.is_sha256(digest) else "")


def held_report(target: Target, hydration: dict | None, content: Content, repo: str) -> ClusterReport:
    """Where a held cluster stands on the content its hydration is pinned to. Ready only when
    the hydration's status speaks of that content (status.resolved): a hydration re-pinned
    by a rollback reports its old Ready until its composer runs again."""
    pinned = {"commit": content.commit, "manifestDigest": read.get_path(hydration, "spec.manifestDigest")}
    report = report_of(target, hydration, max(0, read.as_int(read.get_path(hydration, "spec.bytes"))),
                       pinned, repo)
    if report.phase == "Ready" and read.get_path(hydration, "status.resolved.commit") != content.commit:
        return replace(report, phase="Pending", bytes_done=0, reason="", message="")
    return report


def text_at(mapping: Mapping, key: str) -> str:
    value = mapping.get(key)
    return value if isinstance(value, str) else ""


def hydrations_by_cluster(cache: str, hydrations: list[Any], resolved: Mapping
                          ) -> dict[str, dict]:
    """Each cluster's hydration of this cache: the one pinned to the resolved content if
    there are two (a rename in flight), else the first by name."""
    found: dict[str, dict] = {}
    for hydration in hydrations:
        cluster = read.get_path(hydration, "spec.clusterName")
        if not isinstance(cluster, str) or not cluster \
                or read.get_path(hydration, "spec.modelCacheName") != cache:
            continue
        held = found.get(cluster)
        rank = (not pinned_to(hydration, resolved),
                str(read.get_path(hydration, "metadata.name") or ""))
        if held is None or rank < (not pinned_to(held, resolved),
                                   str(read.get_path(held, "metadata.name") or "")):
            found[cluster] = hydration
    return found


def cache_targets(cache: Mapping, fleet: list[dict], hydrated: Mapping[str, dict]) -> list[Target]:
    """The ModelCache's target clusters, by its own placement (Pending ones included, which
    have no hydration yet while they wait for a rollout slot). A cache spec its composer
    refuses composes no new hydrations: then the clusters that have one are the targets."""
    try:
        spec = model_cache_view.read_spec(cache.get("spec") if isinstance(cache.get("spec"), dict) else {})
    except specs.InputError:
        views = placement.fleet_by_name(fleet)
        return [Target(name, views.get(name)) for name in sorted(hydrated)]
    return placement.targets(spec["placement"].get("clusterNames"), spec["placement"].get("clusterSelector"), fleet)
