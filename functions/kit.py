"""The shared vocabulary of every composer.

Composers are pure functions from a `Request` (plain dicts) to an `Outcome` (plain
dicts); the server translates both to and from protobuf. Everything more than one
composer says — API names, child names, conditions with reasons and remedies,
quantities, label selectors, provider-kubernetes Object wrapping, the agent's pod —
is said once here.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import re
import typing
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from crossplane.function.resource import child_name as sdk_child_name
from fleetcache import __version__, exitcodes, quantity
from pydantic import BaseModel, ValidationError

GROUP = "fleetcache.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
OBJECT_API_VERSION = "kubernetes.m.crossplane.io/v1alpha1"
PROVIDER_CONFIG_KIND = "ClusterProviderConfig"
DEFAULT_AGENT_IMAGE = f"ghcr.io/fleetcache/fleetcache-agent:v{__version__}"
CACHE_MOUNT_PATH = "/var/cache/fleetcache"
TOKEN_MOUNT_PATH = "/var/run/secrets/fleetcache/token"
TOKEN_SECRET_KEY = "token"
GiB = 1024**3
HEADROOM = 1.10

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MODEL_CACHE = f"{GROUP}/model-cache"
LABEL_CLUSTER = f"{GROUP}/cluster"


class InputError(ValueError):
    """Bad user input: the message names the field and the fix. Becomes a fatal result."""


# --- request and outcome -------------------------------------------------------------


@dataclass
class Request:
    """What a composer sees: the composite, composed and required resources, and `now`."""

    composite: dict
    observed: dict[str, dict] = field(default_factory=dict)
    required: dict[str, list[dict]] = field(default_factory=dict)
    now: datetime.datetime = field(
        default_factory=lambda: datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    )

    @property
    def name(self) -> str:
        return str(get_path(self.composite, "metadata.name") or "")

    @property
    def namespace(self) -> str:
        return str(get_path(self.composite, "metadata.namespace") or "")

    @property
    def spec(self) -> dict:
        spec = self.composite.get("spec")
        return spec if isinstance(spec, dict) else {}

    @property
    def status(self) -> dict:
        status = self.composite.get("status")
        return status if isinstance(status, dict) else {}


@dataclass(frozen=True)
class Requirement:
    """A resource the composer needs Crossplane to fetch (by name or all of a kind)."""

    api_version: str
    kind: str
    match_name: str | None = None
    namespace: str | None = None
    match_labels: tuple[tuple[str, str], ...] | None = None


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str = ""


@dataclass
class Outcome:
    """What a composer returns; `ready` of each desired resource is True, False or None."""

    desired: dict[str, tuple[dict, bool | None]] = field(default_factory=dict)
    status: dict = field(default_factory=dict)
    conditions: list[Condition] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    requirements: dict[str, Requirement] = field(default_factory=dict)
    composite_ready: bool | None = None
    fatal: str | None = None

    def compose(self, key: str, resource: dict, ready: bool | None = None) -> None:
        self.desired[key] = (resource, ready)

    def condition(self, type_: str, status: bool | str, reason: str, message: str = "") -> None:
        value = status if isinstance(status, str) else ("True" if status else "False")
        self.conditions.append(Condition(type_, value, reason, message))

    def require(self, key: str, requirement: Requirement) -> None:
        self.requirements[key] = requirement


def carry_over(request: Request, outcome: Outcome, keys: Iterable[str]) -> None:
    """Keep already-composed resources as observed, so a blocked step deletes nothing."""
    for key in keys:
        observed = request.observed.get(key)
        if observed is not None and key not in outcome.desired:
            outcome.compose(key, strip_observed(observed), None)


def strip_observed(resource: dict) -> dict:
    """The desired form of an observed resource: identity and spec, no server fields.

    A remote Secret's data is dropped too: provider-kubernetes writes the values it patched
    in (spec.references) back into the Object's forProvider manifest, and a carried-over
    Object must not copy a token into the function's response. The references patch it
    in again on the cluster.
    """
    meta = mapping_at(resource, "metadata")
    kept_meta = {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta}
    out = {k: v for k, v in resource.items() if k not in ("metadata", "status")}
    out["metadata"] = kept_meta
    manifest = get_path(out, "spec.forProvider.manifest")
    if isinstance(manifest, Mapping) and manifest.get("kind") == "Secret":
        out["spec"] = {**out["spec"], "forProvider": {**out["spec"]["forProvider"], "manifest": {
            k: v for k, v in manifest.items() if k not in ("data", "stringData")}}}
    return out


# --- names and reasons ----------------------------------------------------------------


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


LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_value(text: str) -> str:
    """A valid label value (<= 63 chars): the text itself when it is one, else a cleaned,
    hashed form (object names may be 253 characters, label values only 63)."""
    text = str(text)
    if len(text) <= 63 and LABEL_VALUE.match(text):
        return text
    return child_name(text)


def object_name(value: Any, field_path: str) -> str:
    """A Kubernetes object name (RFC 1123 subdomain, <= 253 chars), or InputError."""
    if not isinstance(value, str) or not value:
        raise InputError(f"{field_path} is required: the name of a Kubernetes object")
    if len(value) > 253 or not DNS_SUBDOMAIN.match(value):
        shown = value if len(value) <= 80 else value[:77] + "..."
        raise InputError(f"{field_path}: {shown!r} is not a Kubernetes object name (lowercase "
                         "letters, digits, '-' and '.', at most 253 characters)")
    return value


def cache_volume_name(model_cache: str) -> str:
    """The PVC name of a ModelCache's volume: the same on every cluster."""
    return child_name(model_cache, "cache")


def short_digest(*parts: str, length: int = 10) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:length]


@dataclass(frozen=True)
class Reason:
    name: str
    remedy: str


REASONS: dict[str, Reason] = {
    r.name: r
    for r in (
        Reason("ClusterNotReady", "Wait for the FleetCluster to become Ready, or check its "
               "ProviderConfig credentials (kubectl describe fleetcluster)."),
        Reason("ClusterNotFound", "Create the FleetCluster, or fix the name in "
               "spec.placement.clusterNames."),
        Reason("NoClusters", "Label FleetClusters to match spec.placement.clusterSelector, "
               "or list them in spec.placement.clusterNames."),
        Reason("TokenSecretMissing", "Create the Secret named by "
               "spec.source.huggingFace.tokenSecretRef in this namespace, with the key it names."),
        Reason("CredentialsSecretMissing", "Create the Secret named by the field in the message "
               "(spec.source.s3.credentialsSecretRef, spec.distribution.mirror.s3 or "
               "regions[].s3 credentialsSecretRef) in this namespace, with the keys it names "
               "(accessKeyIdKey and secretAccessKeyKey, AWS_ACCESS_KEY_ID and "
               "AWS_SECRET_ACCESS_KEY by default), or fix the name."),
        Reason("HydrationFailed", "See the failed clusters' ModelCacheHydration status for the "
               "cause (kubectl get modelcachehydrations)."),
        Reason("DeadlineExceeded", "The agent Job ran longer than spec.job.activeDeadlineSeconds: "
               "raise it, or check the cluster's bandwidth to the endpoint."),
        Reason("BackoffLimitExceeded", "The agent Job failed more often than "
               "spec.job.backoffLimit; read the last progress record and the Job's pod logs."),
        Reason("InvalidSpec", "Fix the field named in the message."),
        Reason("OutsideGrant", "Narrow spec.placement to clusters the ModelCacheGrant covers "
               "(kubectl get modelcachegrant <spec.grantRef.name> -o yaml: spec.clusters), or ask "
               "the platform team for a grant that covers them."),
        Reason("PinningNotAllowed", "Set spec.retention.pinned to false, or ask the platform "
               "team to set spec.allowPinned on the ModelCacheGrant."),
        Reason("OverQuota", "Ask the platform team to raise the ModelCacheGrant's "
               "spec.quota.bytes, or free room: delete ModelCaches naming the grant, or narrow "
               "their spec.placement (kubectl get modelcachegrant shows BUDGET, USED and "
               "PROJECTED)."),
        Reason("ModelCacheNotFound", "Create the ModelCache named by spec.modelCacheRef.name "
               "in this namespace, or fix the name."),
        Reason("MaxReplicasPerCluster", "Raise spec.maxReplicasPerCluster, lower "
               "spec.replicas, or widen spec.placement to more Ready clusters."),
        Reason("AwaitingPrerequisites", "If this persists, check the Synced condition of "
               "those Objects (kubectl get objects -n <namespace>); a token Secret that never "
               "appears usually means the Secret named by tokenSecretRef is missing in this "
               "namespace."),
        Reason("JobNotStarted", "The agent Job exists but has not started: check quota and "
               "admission on the cluster (kubectl describe job)."),
        Reason("VolumeNotBound", "The cache PVC is not Bound: check that the storage class "
               "(spec.storage.storageClassName, else the FleetCluster's "
               "spec.cache.storageClassName) exists, supports the access mode and has "
               "capacity (kubectl describe pvc)."),
        Reason("VolumeNotExpandable", "The cache PVC's storage class cannot grow it to hold the "
               "new commit beside the one replicas still serve: recreate the volume in a "
               "storage class with allowVolumeExpansion: true (spec.storage.storageClassName "
               "on the ModelCache, then delete this ModelCacheHydration), or set "
               "spec.storage.size on the ModelCache large enough for two commits, or delete "
               "this ModelCacheHydration to recreate the volume at the new size."),
        Reason("CapacityLow", "Raise the FleetCluster's spec.cache.capacity or "
               "spec.cache.highWatermark, or remove caches from this cluster (a ModelCache's "
               "placement), or unpin caches no replica needs (spec.retention.pinned) so they can "
               "be evicted."),
        Reason("CapacityAvailable", "None: every hydration on the cluster fits under the high "
               "watermark (or the cluster sets no spec.cache.capacity)."),
        Reason("Evicted", "None needed: the copy was unpinned and unmounted and the cluster was "
               "above its high watermark. Placing a replica of the cache on this cluster warms it "
               "again; pin the ModelCache (spec.retention.pinned) to keep its copies."),
        Reason("LeftPlacement", "None needed: the cluster left the ModelCache's placement, so its "
               "copy only serves what it holds until spec.removal.until; add the cluster to the "
               "placement again to update it."),
        Reason("GrantNotFound", "Ask the platform team for a ModelCacheGrant in this namespace "
               "(kubectl get modelcachegrants) and name it in spec.grantRef.name; until the grant "
               "exists the cache neither resolves nor fans out, and copies it already has keep "
               "serving."),
        Reason("AwaitingGrant", "None: the ModelCacheGrant decides on this spec (and its "
               "resolved size) at its next reconcile; if it lasts, check that "
               "compose-model-cache-grant runs (kubectl describe modelcachegrant)."),
        # The node tier (functions/node_tier.py): status.nodeTier of a hydration, and the
        # ModelCache's Degraded condition.
        Reason("NodeTierNotConfigured", "None if intended: the cache stays on the cluster's "
               "volume there. For node copies, the platform team sets spec.nodeCache on the "
               "FleetCluster (nodeSelector, path, capacityPerNode; design/node-tier.md)."),
        Reason("NodeCacheModeUnsupported", "Node caches from a storage class "
               "(spec.nodeCache.storageClassName) are reserved and not built: remove it from "
               "the FleetCluster and set spec.nodeCache.path to a dedicated filesystem mounted "
               "on every pool node."),
        Reason("NoEligibleNodes", "Label the GPU nodes that should hold copies with the "
               "FleetCluster's spec.nodeCache.optInLabel (default fleetcache.dev/node-cache="
               "enabled), and check that they match spec.nodeCache.nodeSelector "
               "(control-plane nodes never do); give spec.nodeCache.tolerations for their "
               "taints."),
        Reason("NodeTierDegraded", "See the named clusters' ModelCacheHydration "
               "status.nodeTier.firstFailure (kubectl get modelcachehydrations: NODES) and the "
               "warmer pod on that node (kubectl logs ds/<cache>-node-warmer); replicas there "
               "keep reading the cluster volume meanwhile."),
        Reason("VolumeNotShared", "Give the cache volume access mode ReadWriteMany (the "
               "ModelCache's spec.storage.accessMode, else the FleetCluster's "
               "spec.cache.accessMode; an existing PVC keeps its mode: delete this "
               "ModelCacheHydration to recreate it), or set the ModelCache's "
               "spec.storage.tier to Volume."),
        Reason("AwaitingVolumeTier", "None: nodes copy from the cluster's verified volume, "
               "so they start once the hydration's phase is Ready on this commit; see its "
               "reason if that lasts."),
        Reason("NodesWarming", "None: the pool nodes copy from the cluster's volume, at most "
               "spec.nodeCache.maxConcurrentNodes at once per cluster; raise it to go faster."),
        Reason("NodesWarm", "None: every eligible pool node holds the verified commit."),
        # The FleetCluster's node tier (functions/node_capacity.py, node_system.py).
        Reason("NodeCapacityLow", "Raise the FleetCluster's spec.nodeCache.capacityPerNode or "
               "highWatermark (only as far as the pool nodes' disks really hold), remove "
               "tier-Node caches from this cluster or set their spec.storage.tier to Volume, "
               "or unpin node caches no replica needs so they can be evicted; the volume "
               "serves meanwhile."),
        Reason("NodeCapacityAvailable", "None: every tier-Node cache on the cluster fits under "
               "spec.nodeCache.highWatermark of capacityPerNode."),
        Reason("NodeAgentReady", "None: every pool node runs the node agent "
               "(fleetcache-system/fleetcache-node-agent)."),
        Reason("NodeAgentNotReady", "See the node agent's pods on the named cluster (kubectl -n "
               "fleetcache-system get pods -l app.kubernetes.io/component=node-agent): a pod "
               "that cannot mount spec.nodeCache.path means the path is missing on that node "
               "(create the filesystem, or remove the node's opt-in label)."),
        # Sources beyond the Hub and the fleet mirror (functions/sources.py, functions/mirror.py).
        Reason("AwaitingManifest", "None: an S3 or existing-volume source is fetched or verified "
               "against the manifest its ModelCache latched (status.resolved.manifest); if it "
               "lasts, check that the ModelCache is Resolved on this commit (kubectl describe "
               "modelcache)."),
        Reason("WaitingForMirror", "None: the publishing cluster (the ModelCache's "
               "status.mirror.publisher) fetches this commit from the origin and publishes it "
               "to spec.distribution.mirror first; the others then read the mirror. If it "
               "lasts, see the publisher's ModelCacheHydration."),
    )
}
for _row in exitcodes.EXIT_CODES:
    REASONS[_row.reason] = Reason(_row.reason, _row.remedy)


def remedy(reason: str) -> str:
    found = REASONS.get(reason)
    return found.remedy if found else ""


def with_remedy(message: str, reason: str) -> str:
    """A status message that says what happened and then what to do."""
    fix = remedy(reason)
    if not fix or fix.rstrip(".") in message:  # said already (perhaps before a final period)
        return message
    return f"{message.rstrip('.')}. {fix}" if message else fix


def agents_own_words(message: Any, reason: str) -> str:
    """The agent's record message without the table's remedy it ends with: clipping the
    whole would cut the remedy mid-sentence, and `with_remedy` adds it back whole."""
    text = str(message or "")
    fix = remedy(reason)
    return text.replace(fix, "").strip().rstrip(".") if fix else text


SHOWN_LIMIT = 200
MESSAGE_LIMIT = 1024  # a whole message (condition, result, warning): a few shown values


def clipped(text: Any, limit: int = SHOWN_LIMIT) -> str:
    """Free text from input (a record's message, a Job's message) as put into a message:
    cut to `limit` characters, so a message never carries a hostile value whole."""
    text = str(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shown(value: Any, limit: int = SHOWN_LIMIT) -> str:
    """Input quoted in a message: its repr, cut to `limit` characters, so a message never
    echoes a hostile value whole."""
    return clipped(repr(value) if not isinstance(value, (dict, list)) else type(value).__name__,
                   limit)


REASON_SHAPE = re.compile(r"^[A-Z][A-Za-z0-9]{0,63}$")


def reason_or_empty(value: Any) -> str:
    """A reason read from input (the agent's record, a hydration's status) if it has a
    reason's shape (CamelCase, at most 64 characters), else "": a hostile string must not
    become a condition reason the API server refuses."""
    return value if isinstance(value, str) and REASON_SHAPE.match(value) else ""


# --- reading observed state ---------------------------------------------------------------


def get_path(obj: Any, path: str, default: Any = None) -> Any:
    """Read a dotted path from nested dicts; any missing or mistyped step gives `default`."""
    current = obj
    for part in path.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return default
        current = current[part]
    return current


def condition_of(resource: dict | None, type_: str) -> dict:
    """The condition of that type; a conditions value that is not a list reads as none."""
    conditions = get_path(resource, "status.conditions")
    for cond in conditions if isinstance(conditions, list) else ():
        if isinstance(cond, Mapping) and cond.get("type") == type_:
            return dict(cond)
    return {}


def mapping_at(obj: Any, path: str) -> dict:
    """The object at a dotted path; absent or not an object reads as {}."""
    value = get_path(obj, path)
    return value if isinstance(value, dict) else {}


def is_true(resource: dict | None, type_: str) -> bool:
    return condition_of(resource, type_).get("status") == "True"


def remote_manifest(observed_object: dict | None) -> dict:
    """The remote object as provider-kubernetes last saw it (status.atProvider.manifest)."""
    manifest = get_path(observed_object, "status.atProvider.manifest", {})
    return manifest if isinstance(manifest, dict) else {}


INT64_MAX = 2**63 - 1  # the API server's integer (format int64)


def as_int(value: Any, default: int = 0) -> int:
    """Numbers arrive as floats through protobuf Struct and as strings from ConfigMaps;
    anything that is not a number Kubernetes can store (NaN, Infinity, beyond int64, a
    list) is `default`."""
    if isinstance(value, bool):
        return default
    try:
        number = float(value)
        return int(number) if math.isfinite(number) and abs(number) <= INT64_MAX else default
    except (TypeError, ValueError, OverflowError):
        return default


# --- quantities -------------------------------------------------------------------------


def quantity_bytes(value: Any, field_path: str) -> int:
    """Bytes of a Kubernetes quantity (bounded cost, see fleetcache.quantity), or
    InputError naming the field."""
    try:
        parsed = quantity.to_bytes(value)
    except quantity.QuantityError as err:
        raise InputError(f"{field_path}: {shown(value)} {err}; write it like 20Gi or 500G") \
            from err
    if parsed <= 0:
        raise InputError(f"{field_path}: {shown(value)} must be greater than zero")
    return parsed


def volume_size_for(model_bytes: int) -> str:
    """Resolved bytes x 1.10, rounded up to whole GiB (DESIGN.md §3), at least 1Gi."""
    return f"{max(1, math.ceil(model_bytes * HEADROOM / GiB))}Gi"


def human_bytes(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{count}B"


# --- time -------------------------------------------------------------------------------

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # RFC 3339 in UTC, as Kubernetes writes times


def parse_time(value: Any) -> datetime.datetime | None:
    """An RFC 3339 time read from a spec or status, in UTC; None when absent or malformed."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.astimezone(datetime.timezone.utc) if parsed.tzinfo else None


def format_time(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).strftime(TIME_FORMAT)


DURATION_UNITS = {"h": datetime.timedelta(hours=1), "m": datetime.timedelta(minutes=1)}


def duration(value: str) -> datetime.timedelta:
    """A spec duration the XRD's pattern already checked: whole hours (`168h`) or
    minutes (`30m`)."""
    return int(value[:-1]) * DURATION_UNITS[value[-1]]


def hour_of(moment: datetime.datetime) -> str:
    """`moment` truncated to the hour: use is tracked at hour granularity, so a status
    changes at most once an hour for a decision that cannot tell minutes apart."""
    return format_time(moment.replace(minute=0, second=0, microsecond=0))


# --- label selectors --------------------------------------------------------------------

SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def selector_matches(selector: Mapping, labels: Mapping[str, str], field_path: str) -> bool:
    """Kubernetes LabelSelector semantics; an empty selector matches everything."""
    if not isinstance(selector, Mapping):
        raise InputError(f"{field_path}: must be an object with matchLabels/matchExpressions")
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise InputError(f"{field_path}.matchLabels: must map label keys to values")
    for key, value in match_labels.items():
        if labels.get(key) != value:
            return False
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise InputError(f"{field_path}.matchExpressions: must be a list")
    for index, expr in enumerate(expressions):
        where = f"{field_path}.matchExpressions[{index}]"
        if not isinstance(expr, Mapping) or not isinstance(expr.get("key"), str):
            raise InputError(f"{where}: needs a key and an operator")
        key, operator, values = expr["key"], expr.get("operator"), expr.get("values") or []
        if operator not in SELECTOR_OPERATORS:
            raise InputError(f"{where}.operator: {shown(operator)} is not one of "
                             f"{', '.join(SELECTOR_OPERATORS)}")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise InputError(f"{where}.values: {shown(values)} must be a list of label "
                             "values, e.g. [h100, a100]")
        if operator in ("In", "NotIn") and not values:
            raise InputError(f"{where}.values: {operator} needs at least one value")
        if operator in ("Exists", "DoesNotExist") and values:
            raise InputError(f"{where}.values: {operator} takes no values")
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


# --- fleet clusters ---------------------------------------------------------------------


@dataclass(frozen=True)
class FleetClusterView:
    """What other composers need to know of a FleetCluster."""

    name: str
    labels: dict[str, str]
    ready: bool
    provider_config: str
    storage_class: str | None
    access_mode: str
    capacity: int | None
    agent_image: str
    high_watermark: int = 80  # spec.cache.highWatermark, percent
    cache: "ClusterCache | None" = None  # status.cache: None until compose-fleet-cluster wrote it

    @classmethod
    def of(cls, resource: dict) -> "FleetClusterView":
        # Tolerant by design: a malformed FleetCluster is reported by compose-fleet-cluster
        # on the FleetCluster itself; it must not fail every composer that merely reads it.
        # Each field that is malformed reads as absent: the cluster is then not Ready (no
        # providerConfigName) or gets the defaults, never a bad value in a composed PVC or Job.
        spec = mapping_at(resource, "spec")
        provider_config = name_or_empty(get_path(resource, "status.providerConfigName"))
        labels = get_path(resource, "metadata.labels")
        try:
            capacity = quantity_bytes(get_path(spec, "cache.capacity"), "spec.cache.capacity")
        except InputError:
            capacity = None
        access_mode = get_path(spec, "cache.accessMode")
        image = get_path(spec, "agent.image")
        return cls(
            name=name_or_empty(get_path(resource, "metadata.name")),
            labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping)
            else {},
            ready=bool(provider_config) and is_true(resource, "Ready"),
            provider_config=provider_config,
            storage_class=name_or_empty(get_path(spec, "cache.storageClassName")) or None,
            access_mode=access_mode if access_mode in ACCESS_MODES else "ReadWriteMany",
            capacity=capacity,
            agent_image=image if isinstance(image, str) and image and len(image) <= 1024
            and not any(c.isspace() for c in image) else DEFAULT_AGENT_IMAGE,
            high_watermark=watermark(get_path(spec, "cache.highWatermark"), 80),
            cache=ClusterCache.of(get_path(resource, "status.cache")),
        )


def watermark(value: Any, default: int) -> int:
    """A watermark percent as the XRD bounds it (1..95), else the XRD's default."""
    return value if isinstance(value, int) and not isinstance(value, bool) \
        and 1 <= value <= 95 else default


@dataclass(frozen=True)
class ClusterCache:
    """The capacity decisions compose-fleet-cluster publishes in status.cache (namespace/name
    of each hydration), which compose-model-cache-hydration obeys."""

    capacity: int | None  # capacityBytes the decisions were made for; None: no capacity
    used: int
    reserved: int
    admitted: frozenset[str]
    evicted: frozenset[str]

    @classmethod
    def of(cls, cache: Any) -> "ClusterCache | None":
        if not isinstance(cache, Mapping):
            return None

        def keys(name: str) -> frozenset[str]:
            values = cache.get(name)
            return frozenset(v for v in values if isinstance(v, str)) \
                if isinstance(values, list) else frozenset()

        capacity = as_int(cache.get("capacityBytes"), -1)
        return cls(capacity=capacity if capacity > 0 else None,
                   used=max(0, as_int(cache.get("usedBytes"))),
                   reserved=max(0, as_int(cache.get("reservedBytes"))),
                   admitted=keys("admitted"), evicted=keys("evicted"))


def name_or_empty(value: Any) -> str:
    """A Kubernetes object name read from another resource, or "" when it is not one."""
    return value if isinstance(value, str) and len(value) <= 253 and DNS_SUBDOMAIN.match(value) \
        else ""


FLEET_CLUSTERS = Requirement(API_VERSION, "FleetCluster")


def fleet_cluster_requirement(name: str) -> Requirement:
    return Requirement(API_VERSION, "FleetCluster", match_name=name)


# --- provider-kubernetes Objects --------------------------------------------------------

CREATE_ONLY = ("Observe", "Create")
OBSERVE_CREATE_DELETE = ("Observe", "Create", "Delete")


def remote_object(
    name: str,
    namespace: str,
    manifest: dict,
    provider_config: str,
    *,
    management_policies: Iterable[str] | None = None,
    readiness_query: str | None = None,
    references: list[dict] | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict:
    """Wrap a manifest for another cluster in a namespaced provider-kubernetes Object."""
    spec: dict = {
        "forProvider": {"manifest": manifest},
        "providerConfigRef": {"kind": PROVIDER_CONFIG_KIND, "name": provider_config},
    }
    if management_policies is not None:
        spec["managementPolicies"] = list(management_policies)
    if readiness_query:
        spec["readiness"] = {"policy": "DeriveFromCelQuery", "celQuery": readiness_query}
    if references:
        spec["references"] = references
    metadata: dict = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": OBJECT_API_VERSION, "kind": "Object", "metadata": metadata, "spec": spec}


def namespace_manifest(namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}


def token_secret_object(
    name: str, remote_name: str, namespace: str, provider_config: str,
    token_ref: Mapping, labels: Mapping[str, str],
) -> dict:
    """The token Secret on a remote cluster, its value patched in by provider-kubernetes
    from the XR's own Secret (spec.references.patchesFrom), so the token never appears in
    any composed spec, status or function response."""
    manifest = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": remote_name, "namespace": namespace, "labels": dict(labels)},
        "type": "Opaque",
    }
    reference = {
        "patchesFrom": {
            "apiVersion": "v1",
            "kind": "Secret",
            "name": str(token_ref.get("name", "")),
            "namespace": namespace,
            "fieldPath": f"data.{token_ref.get('key', 'HF_TOKEN')}",
        },
        "toFieldPath": f"data.{TOKEN_SECRET_KEY}",
    }
    return remote_object(name, namespace, manifest, provider_config, references=[reference],
                         labels=labels)


def token_secret_problem(request: Request, token_ref: Mapping | None, requirement_key: str) -> str:
    """Why the referenced token Secret cannot be used, or "" when it can (or none is set)."""
    if not token_ref:
        return ""
    secrets = request.required.get(requirement_key)
    name, key = token_ref.get("name"), token_ref.get("key", "HF_TOKEN")
    if not secrets:
        return f"Secret {request.namespace}/{name} named by spec.source.huggingFace." \
               f"tokenSecretRef does not exist"
    keys = set(mapping_at(secrets[0], "data")) | set(mapping_at(secrets[0], "stringData"))
    if key not in keys:
        return f"Secret {request.namespace}/{name} has no key {key!r} (spec.source." \
               f"huggingFace.tokenSecretRef.key)"
    return ""


def progress_access_manifests(
    service_account: str, configmap: str, namespace: str, labels: Mapping[str, str]
) -> list[dict]:
    """ServiceAccount, Role and RoleBinding that may only get and patch one ConfigMap."""
    meta = {"name": service_account, "namespace": namespace, "labels": dict(labels)}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta),
         "automountServiceAccountToken": True},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": dict(meta),
         "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                    "resourceNames": [configmap], "verbs": ["get", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": dict(meta),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": service_account},
         "subjects": [{"kind": "ServiceAccount", "name": service_account,
                       "namespace": namespace}]},
    ]


def progress_configmap_manifest(name: str, namespace: str, labels: Mapping[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
            "data": {"phase": "Pending"}}


RESTRICTED_CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "privileged": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
AGENT_UID = 65532


@dataclass(frozen=True)
class JobPolicy:
    backoff_limit: int
    active_deadline_seconds: int
    ttl_seconds_after_finished: int

    @classmethod
    def of(cls, job: Mapping) -> "JobPolicy":
        """A spec's `job` read through its model: the XRD's defaults are filled in."""
        return cls(job["backoffLimit"], job["activeDeadlineSeconds"],
                   job["ttlSecondsAfterFinished"])


def agent_job_manifest(
    *,
    name: str,
    namespace: str,
    image: str,
    args: list[str],
    service_account: str,
    labels: Mapping[str, str],
    policy: JobPolicy,
    token_secret: str | None = None,
    cache_claim: str | None = None,
    resources: Mapping | None = None,
) -> dict:
    """A batch/v1 Job running the agent under Pod Security `restricted`.

    Permanent exit codes fail the Job at once (podFailurePolicy); disruptions (node
    drain, preemption) do not count against backoffLimit.
    """
    volumes: list[dict] = [{"name": "tmp", "emptyDir": {}}]
    mounts: list[dict] = [{"name": "tmp", "mountPath": "/tmp"}]
    if cache_claim:
        volumes.append({"name": "cache", "persistentVolumeClaim": {"claimName": cache_claim}})
        mounts.append({"name": "cache", "mountPath": CACHE_MOUNT_PATH})
    if token_secret:
        volumes.append({"name": "token", "secret": {
            "secretName": token_secret, "defaultMode": 0o440,
            "items": [{"key": TOKEN_SECRET_KEY, "path": TOKEN_SECRET_KEY}]}})
        mounts.append({"name": "token", "mountPath": TOKEN_MOUNT_PATH, "readOnly": True})
    container = {
        "name": "agent",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["fleetcache-agent"],
        "args": list(args),
        "env": [{"name": "HOME", "value": "/tmp"}, {"name": "TMPDIR", "value": "/tmp"}],
        "resources": dict(resources) if resources else {
            "requests": {"cpu": "500m", "memory": "256Mi"},
            "limits": {"memory": "512Mi"},
        },
        "securityContext": dict(RESTRICTED_CONTAINER_SECURITY),
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": mounts,
    }
    pod_spec = {
        "restartPolicy": "Never",
        "serviceAccountName": service_account,
        "automountServiceAccountToken": True,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": AGENT_UID,
            "runAsGroup": AGENT_UID,
            "fsGroup": AGENT_UID,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": volumes,
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "backoffLimit": policy.backoff_limit,
            "activeDeadlineSeconds": policy.active_deadline_seconds,
            "ttlSecondsAfterFinished": policy.ttl_seconds_after_finished,
            "podFailurePolicy": {"rules": [
                {"action": "FailJob", "onExitCodes": {
                    "containerName": "agent", "operator": "In",
                    "values": list(exitcodes.PERMANENT_CODES)}},
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            ]},
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


# --- reading a spec through its generated model -------------------------------------------

POSITIVE_QUANTITY = r"^([1-9][0-9]*(\.[0-9]+)?|0\.[0-9]*[1-9][0-9]*)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"
# What each `pattern` of the XRDs means, for the one-line error of a value that does not
# match it (tests/test_models.py checks every pattern in apis/ has an entry here).
PATTERN_MEANINGS: dict[str, str] = {
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$":
        "a Kubernetes object name (lowercase letters, digits, '-' and '.', starting and "
        "ending with a letter or digit)",
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$":
        "a namespace name (lowercase letters, digits and '-', starting and ending with a "
        "letter or digit)",
    r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$":
        "a FleetCluster name (lowercase letters, digits, '-' and '.', starting and ending "
        "with a letter or digit)",
    r"^[-._a-zA-Z0-9]+$": "a Secret key (letters, digits, '-', '_' and '.')",
    r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?/[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$":
        "a repository id of the shape org/name, e.g. Qwen/Qwen3-0.6B",
    r"^\S+$": "a value without spaces",
    r"^https?://[^\s/?#]+(/[^\s?#]*)?$":
        "an http(s) URL without spaces, query or fragment, e.g. https://huggingface.co",
    r"^[0-9a-f]{40}$": "a full commit hash (40 lowercase hex digits)",
    r"^((s3|vol)-)?[0-9a-f]{40}$": "a resolved commit: 40 lowercase hex digits, after s3- or "
                                   "vol- for an S3 prefix or a volume's manifest file",
    r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$": "an S3 bucket name (3-63 lowercase letters, digits, "
                                           "'.' and '-', starting and ending with a letter or digit)",
    r"^$|^[^/\s]\S*$": "empty or a relative path without spaces (no leading '/')",
    r"^[^/\s]\S*$": "a relative path without spaces (no leading '/')",
    r"^[a-z0-9][-a-z0-9]{0,62}$": "an S3 region, e.g. us-east-1",
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]"
    r"([-A-Za-z0-9_.]*[A-Za-z0-9])?$": "a label key, e.g. gpu or example.com/gpu",
    r"^[^=]+$": "an environment variable name (no '=')",
    r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$":
        "a label value (letters, digits, '-', '_' and '.', starting and ending with a letter "
        "or digit), e.g. enabled",
    r"^/\S*$": "an HTTP path starting with /, e.g. /health",
    POSITIVE_QUANTITY: "a positive quantity, e.g. 20Gi or 500M (no zero, sign, exponent "
                       "or milli)",
    "^$|" + POSITIVE_QUANTITY: "empty (unlimited) or a positive quantity, e.g. 200Mi",
    quantity.PATTERN: "a Kubernetes quantity, e.g. 8, 500m or 64Gi",
    r"^[1-9][0-9]{0,5}h$": "a whole number of hours, e.g. 72h",
    r"^[0-9]{1,6}[hm]$": "a whole number of hours or minutes, e.g. 1h or 30m",
}
TYPE_NAMES = {"int_type": "an integer", "string_type": "a string", "bool_type": "true or false",
              "dict_type": "an object", "model_type": "an object",
              "model_attributes_type": "an object", "list_type": "a list"}


def read_spec(model: type[BaseModel], spec: Any) -> dict:
    """A composite's spec read through the root model generated from its XRD, e.g.
    `models.model_cache.ModelCache` (see read_model), then held to the XRD's CEL rules
    (the cross-field ones: "exactly one of", "required when"); Crossplane's
    spec.crossplane left out. InputError names the first problem."""
    from fleetcache import validation  # it reads kit itself: imported at first use

    spec = read_model(model, {"spec": spec})["spec"]
    spec.pop("crossplane", None)
    broken = validation.cel_violations({"kind": model.__name__, "spec": spec})
    if broken:
        first = broken[0]
        message = first.message if first.message.startswith(first.path) \
            else f"{first.path}: {first.message}"
        raise InputError(message + and_more(len(broken) - 1))
    return spec


def read_model(model: type[BaseModel], value: Any, path: str = "") -> dict:
    """`value` read through a model generated from an XRD (types, enums, patterns, bounds,
    and the XRD's defaults filled in), in API form (camelCase, unset fields absent), or
    InputError naming the first wrong field, under `path` when the value sits there."""
    try:
        typed = model.model_validate(as_stored(value))
    except ValidationError as err:
        raise input_error(err, model, path) from None
    return typed.model_dump(by_alias=True, exclude_none=True)


def as_stored(value: Any) -> Any:
    """Input as the API server stores it: a null field is pruned, so its default applies.
    (Whole numbers are ints already: the server turns protobuf's floats back, see
    server.plain.)"""
    if isinstance(value, Mapping):
        return {key: as_stored(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [as_stored(item) for item in value]
    return value


def input_error(error: ValidationError, model: type[BaseModel], path: str = "") -> InputError:
    """One line for `model`'s ValidationError: the first problem's field path in API form
    (under `path`), what is wrong and what is allowed, and how many more problems there are."""
    problems = distinct_problems(error.errors(include_url=False), path)
    where, first = problems[0]
    if first["type"] == "missing":
        message = f"{where} is required"
    elif first["type"] == "extra_forbidden":
        known = ", ".join(fields_at(model, first["loc"][:-1]))
        message = f"{where}: is not a field of this API" + (f"; the fields here are {known}"
                                                           if known else "")
    else:
        message = f"{where}: {problem_text(first)}"
    return InputError(message + and_more(len(problems) - 1))


def and_more(count: int) -> str:
    return f" (and {count} more problem{'s' if count > 1 else ''})" if count else ""


def distinct_problems(errors: list[dict], path: str = "") -> list[tuple[str, dict]]:
    """(API path, error) per field. An int-or-string value that fails both members of its
    union (pydantic tags each member's error: `int`, then the string type's name) is one
    problem, reported by its string member (the pattern) over the integer type error."""
    unions = {tuple(e["loc"][:-1]) for e in errors if e["loc"][-1:] == ("int",)}
    by_path: dict[str, dict] = {}
    for error in errors:
        loc = error["loc"]
        where = api_path(loc[:-1] if tuple(loc[:-1]) in unions else loc, path)
        kept = by_path.get(where)
        if kept is None or (kept["type"].endswith("_type") and not error["type"].endswith("_type")):
            by_path[where] = error
    return list(by_path.items())


def api_path(loc: Iterable[Any], path: str = "") -> str:
    """`('spec', 'placement', 'clusterNames', 3)` -> `spec.placement.clusterNames[3]`,
    after `path` when given."""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return clipped(path)


def fields_at(model: type[BaseModel], loc: Iterable[Any]) -> list[str]:
    """The API names of the fields of the object at `loc` in `model` (Crossplane's own
    spec.crossplane left out), or [] when `loc` leads to no object."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue  # a list item: the item's model is already current
        found = next((f for name, f in model_fields(current).items()
                      if (f.alias or name) == part), None)
        current = model_in(found.annotation) if found else None
    return [f.alias or name for name, f in model_fields(current).items() if name != "crossplane"]


def model_fields(model: Any) -> dict:
    """A generated model's fields with their types resolved (the modules define models
    before the models they refer to; pydantic resolves those names on first rebuild)."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return {}
    if not model.__pydantic_complete__:
        model.model_rebuild()
    return model.model_fields


def model_in(annotation: Any) -> type[BaseModel] | None:
    """The model class inside a field's type (`Storage | None`, `list[MatchExpression]`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = model_in(arg)
        if found is not None:
            return found
    return None


def problem_text(error: dict) -> str:
    kind, ctx, value = error["type"], error.get("ctx") or {}, shown(error.get("input"))
    if kind == "literal_error":
        allowed = re.findall(r"'((?:[^'\\]|\\.)*)'", str(ctx.get("expected", "")))
        return f"{value} is not one of {', '.join(allowed)}"
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern", ""))
        return f"{value} is not {PATTERN_MEANINGS.get(pattern, f'of the form {pattern}')}"
    bounds = {"greater_than_equal": ("at least", "ge"), "less_than_equal": ("at most", "le"),
              "greater_than": ("greater than", "gt"), "less_than": ("less than", "lt")}
    if kind in bounds:
        words, key = bounds[kind]
        return f"{value} must be {words} {ctx.get(key)}"
    if kind == "string_too_short":
        limit = ctx.get("min_length")
        return "must not be empty" if limit == 1 else f"{value} is shorter than {limit} characters"
    if kind == "string_too_long":
        return f"{value} is longer than {ctx.get('max_length')} characters"
    if kind == "too_short":
        return f"needs at least {ctx.get('min_length')} item(s)"
    if kind == "too_long":
        return f"has more than {ctx.get('max_length')} items"
    if kind in TYPE_NAMES:
        return f"{value} must be {TYPE_NAMES[kind]}"
    return f"{value}: {clipped(error.get('msg', 'is not valid'))}"


COMMIT_SHAPE = re.compile(r"^((s3|vol)-)?[0-9a-f]{40}$")  # git, or an S3/volume pin: safe in a path
ACCESS_MODES = ("ReadWriteMany", "ReadWriteOnce")  # the agent writes the volume: never ReadOnlyMany


def read_source(source: Mapping) -> dict:
    """The `source` of a spec read through its model, normalized to what is fetched: the
    huggingFace fields with their defaults, and both pattern lists (empty when unset)."""
    return {
        "huggingFace": dict(source["huggingFace"]),
        "allowPatterns": list(source.get("allowPatterns", [])),
        "ignorePatterns": list(source.get("ignorePatterns", [])),
    }


def source_args(source: Mapping) -> list[str]:
    """The agent flags that say what to fetch (repo, endpoint, patterns), from a source
    normalized by read_source."""
    hf = source["huggingFace"]
    args = ["--endpoint", hf["endpoint"], "--repo", hf["repo"]]
    for pattern in source["allowPatterns"]:
        args += ["--allow", pattern]
    for pattern in source["ignorePatterns"]:
        args += ["--ignore", pattern]
    if hf.get("tokenSecretRef"):
        args += ["--token-file", f"{TOKEN_MOUNT_PATH}/{TOKEN_SECRET_KEY}"]
    return args


# At most 3 digits (exit codes are 0-255): a 5,000-digit "exit code" in a hostile message
# is no exit code, and never becomes an int of 5,000 digits.
JOB_EXIT_CODE = re.compile(r"exit code (\d{1,3})(?!\d)")


@dataclass(frozen=True)
class JobState:
    """A remote Job's state as Kubernetes reports it."""

    started: bool
    complete: bool
    failed: bool
    failure_reason: str
    failure_message: str
    exit_code: int | None

    @classmethod
    def of(cls, job: dict) -> "JobState":
        failed = is_true(job, "Failed")
        failure = condition_of(job, "Failed")
        message = clipped(failure.get("message", ""))
        match = JOB_EXIT_CODE.search(message)
        status = mapping_at(job, "status")
        return cls(
            started=bool(status.get("startTime") or status.get("active")),
            complete=is_true(job, "Complete"),
            failed=failed,
            failure_reason=reason_or_empty(failure.get("reason")),
            failure_message=message,
            exit_code=int(match.group(1)) if match else None,
        )


def failure_reason(job: JobState, record: Mapping[str, Any]) -> tuple[str, str]:
    """(reason, message with remedy) for a failed agent Job: exit code first, else the
    agent's last record, else what Kubernetes said (deadline, backoff)."""
    row = exitcodes.for_code(job.exit_code) if job.exit_code is not None else None
    record = record if isinstance(record, Mapping) else {}
    recorded_reason = reason_or_empty(record.get("reason"))
    recorded_message = clipped(agents_own_words(record.get("message"), recorded_reason))
    if row is not None:
        detail = recorded_message if recorded_reason == row.reason else ""
        return row.reason, with_remedy(detail or f"agent exited {row.code} ({row.reason})",
                                       row.reason)
    if job.failure_reason == "DeadlineExceeded":
        # Kubernetes' verdict wins over a record the killed agent could not finish.
        last = f" (the agent last reported {recorded_reason}: {recorded_message})" \
            if recorded_reason else ""
        return "DeadlineExceeded", with_remedy(
            (job.failure_message or "the agent Job hit its deadline").rstrip(".") + last,
            "DeadlineExceeded")
    if recorded_reason:
        return recorded_reason, with_remedy(recorded_message, recorded_reason)
    return "BackoffLimitExceeded", with_remedy(
        job.failure_message or "the agent Job failed", "BackoffLimitExceeded")


# --- determinism ------------------------------------------------------------------------


def canonical(value: Any) -> Any:
    """Sort every map so the same input always yields the same bytes out."""
    if isinstance(value, Mapping):
        return {str(k): canonical(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value


def digest_of(value: Any) -> str:
    return hashlib.sha256(json.dumps(canonical(value), sort_keys=True).encode()).hexdigest()
