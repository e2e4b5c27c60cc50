# Generated from apis/fleetclusters/definition.yaml by `python -m fleetcache.devtools.apigen` (make models)
# with datamodel-code-generator 0.89.0. Do not edit: edit the XRD and regenerate.

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, StrictBool, StrictInt
from typing_extensions import TypeAliasType


class Agent(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    image: Annotated[
        str | None,
        Field(
            description='Agent image for clusters that pull from a mirror registry; the image of this fleetcache release when unset.',
            max_length=512,
            min_length=1,
            pattern='^\\S+$',
        ),
    ] = None


class Cache(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    storage_class_name: Annotated[
        str | None,
        Field(
            alias='storageClassName',
            description="StorageClass of cache volumes; the cluster's default class when unset.",
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ] = None
    access_mode: Annotated[
        Literal['ReadWriteMany', 'ReadWriteOnce'] | None,
        Field(
            alias='accessMode',
            description='Access mode of cache volumes. ReadWriteMany lets replicas on every node mount the cache; ReadWriteOnce suits single-node or node-local storage.',
        ),
    ] = 'ReadWriteMany'
    capacity: Annotated[
        str | None,
        Field(
            description='Optional budget of bytes this cluster may spend on caches, e.g. 2Ti. When set, a hydration that would pass the high watermark waits (CapacityLow) and above it unpinned copies no replica mounts are evicted; unset, every hydration starts and nothing is evicted.',
            max_length=32,
            pattern='^([1-9][0-9]*(\\.[0-9]+)?|0\\.[0-9]*[1-9][0-9]*)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$',
        ),
    ] = None
    high_watermark: Annotated[
        StrictInt | None,
        Field(
            alias='highWatermark',
            description='Percent of spec.cache.capacity that used plus reserved bytes may reach: a hydration that would pass it waits, and above it unpinned, unmounted copies are evicted down to lowWatermark.',
            ge=2,
            le=95,
        ),
    ] = 80
    low_watermark: Annotated[
        StrictInt | None,
        Field(
            alias='lowWatermark',
            description='Percent of spec.cache.capacity eviction brings usage down to; the gap to highWatermark keeps eviction from flapping.',
            ge=1,
            le=94,
        ),
    ] = 70


class Cache1(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    capacity_bytes: Annotated[
        StrictInt | None,
        Field(alias='capacityBytes', description='spec.cache.capacity in bytes; absent when no capacity is set.', ge=0),
    ] = None
    capacity_human: Annotated[
        str | None,
        Field(
            alias='capacityHuman', description='capacityBytes, human readable, or "unlimited" (the CAPACITY column).'
        ),
    ] = None
    used_bytes: Annotated[
        StrictInt | None,
        Field(
            alias='usedBytes',
            description="Sum of the measured status.usedBytes of this cluster's hydrations (each hydration's volume is its own PVC); evicted copies count nothing.",
            ge=0,
        ),
    ] = None
    used_human: Annotated[
        str | None,
        Field(
            alias='usedHuman',
            description='usedBytes human readable, with usedPercent when a capacity is set, e.g. "1.2TiB (61%)" (the USED column).',
        ),
    ] = None
    reserved_bytes: Annotated[
        StrictInt | None,
        Field(
            alias='reservedBytes',
            description='Bytes admitted downloads still running may add: for each admitted or hydrating copy, its requested size minus its measured usage.',
            ge=0,
        ),
    ] = None
    used_percent: Annotated[
        StrictInt | None,
        Field(
            alias='usedPercent',
            description='usedBytes as a whole percent of capacityBytes; absent when no capacity is set.',
            ge=0,
        ),
    ] = None
    admitted: Annotated[
        list[str] | None,
        Field(
            description='Hydrations (namespace/name) admitted to start fetching and not Ready yet, sorted; latched, so an admitted download never has to wait again.',
            max_length=256,
        ),
    ] = None
    waiting: Annotated[
        list[str] | None,
        Field(
            description='Hydrations (namespace/name) that would pass the high watermark and wait, sorted.',
            max_length=256,
        ),
    ] = None
    waiting_count: Annotated[
        StrictInt | None,
        Field(
            alias='waitingCount', description='How many hydrations wait, also those the waiting list leaves out.', ge=0
        ),
    ] = None
    evicted: Annotated[
        list[str] | None,
        Field(
            description='Hydrations (namespace/name) whose copies were evicted to get under the low watermark, sorted; each stays here until a replica of its cache is placed on this cluster again.',
            max_length=256,
        ),
    ] = None


class Features(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    image_volumes: Annotated[
        StrictBool | None,
        Field(
            alias='imageVolumes',
            description="The kubelets mount an OCI artifact as a read-only image volume (volumes[].image, KEP-4639: beta and on by default since Kubernetes 1.35) and the runtime mounts a ModelPack artifact's files at their paths (CRI-O does; containerd 2.1 mounts images only). True: replicas of an OCI cache, or of a cache published to an OCI mirror, mount the artifact by digest (delivery Image) and the cluster's hydration of it warms no PVC. Off by default: a wrong true costs each replica its progress deadline before it falls back to the volume.",
        ),
    ] = False


class FleetCluster(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    spec: Annotated[Spec, Field(description='How to reach the cluster and its cache defaults.')]
    status: Annotated[
        Status | None, Field(description='How Objects reach this cluster, written by compose-fleet-cluster.')
    ] = None
    api_version: Annotated[str | None, Field(alias='apiVersion')] = None
    kind: str | None = None
    metadata: Annotated[dict[str, Any] | None, Field(description='Kubernetes object metadata.')] = None


class KubeconfigSecretRef(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    namespace: Annotated[
        str | None,
        Field(
            description='Namespace of the Secret.',
            max_length=63,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?$',
        ),
    ] = 'crossplane-system'
    name: Annotated[
        str,
        Field(
            description='Name of the Secret.',
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ]
    key: Annotated[
        str | None,
        Field(
            description="Key in the Secret's data that holds the kubeconfig.",
            max_length=253,
            min_length=1,
            pattern='^[-._a-zA-Z0-9]+$',
        ),
    ] = 'kubeconfig'


class MatchExpression(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    key: Annotated[
        str,
        Field(
            description='The label key the requirement applies to.',
            max_length=317,
            min_length=1,
            pattern='^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$',
        ),
    ]
    operator: Annotated[
        Literal['In', 'NotIn', 'Exists', 'DoesNotExist'], Field(description="How the label's value relates to values.")
    ]
    values: Annotated[
        list[Value] | None,
        Field(description='Label values for In and NotIn; empty for Exists and DoesNotExist.', max_length=64),
    ] = None


class MatchExpression1(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    key: Annotated[
        str,
        Field(
            description='The label key the requirement applies to.',
            max_length=317,
            min_length=1,
            pattern='^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$',
        ),
    ]
    operator: Annotated[
        Literal['In', 'NotIn', 'Exists', 'DoesNotExist'], Field(description="How the label's value relates to values.")
    ]
    values: Annotated[
        list[Value] | None,
        Field(description='Label values for In and NotIn; empty for Exists and DoesNotExist.', max_length=64),
    ] = None


MatchLabelsAdditionalProperty = TypeAliasType(
    "MatchLabelsAdditionalProperty",
    Annotated[str, Field(description='The label value a pool node carries under this key.', max_length=63)],
)


class NodeCache(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    node_selector: Annotated[
        NodeSelector | None,
        Field(
            alias='nodeSelector',
            description='The GPU pool (Kubernetes label selector semantics over Node labels); empty selects every node that opted in. Control-plane nodes are never in the pool.',
        ),
    ] = None
    opt_in_label: Annotated[
        OptInLabel | None,
        Field(
            alias='optInLabel',
            description="The label a node carries to opt in (AIBrix's rule: a pool node holds no copies until its operator labels it).",
            validate_default=True,
        ),
    ] = {}
    path: Annotated[
        str | None,
        Field(
            description='Absolute path of a dedicated filesystem mounted on every pool node, e.g. /mnt/nvme0 (not the root filesystem: a warmer refuses it with NodeCacheNotDedicated). Caches live in <path>/<namespace>/<cache>.',
            max_length=1024,
            min_length=2,
        ),
    ] = None
    storage_class_name: Annotated[
        str | None,
        Field(
            alias='storageClassName',
            description='Reserved: node copies on claims of a local storage class. Not built; a cluster that sets it gets no node tier (NodeCacheModeUnsupported): use path.',
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ] = None
    capacity_per_node: Annotated[
        str,
        Field(
            alias='capacityPerNode',
            description='Bytes every pool node may spend on node copies, e.g. 3Ti. Node caches whose demand would pass the high watermark wait (NodeCapacityLow); above it, unpinned node copies no replica uses are evicted.',
            max_length=32,
            pattern='^([1-9][0-9]*(\\.[0-9]+)?|0\\.[0-9]*[1-9][0-9]*)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$',
        ),
    ]
    high_watermark: Annotated[
        StrictInt | None,
        Field(
            alias='highWatermark',
            description="Percent of capacityPerNode the node caches' demand may reach: a cache that would pass it waits, and above it unpinned, unused node copies are evicted down to lowWatermark.",
            ge=2,
            le=95,
        ),
    ] = 80
    low_watermark: Annotated[
        StrictInt | None,
        Field(
            alias='lowWatermark',
            description='Percent of capacityPerNode eviction brings the demand down to; the gap to highWatermark keeps eviction from flapping.',
            ge=1,
            le=94,
        ),
    ] = 70
    max_concurrent_nodes: Annotated[
        StrictInt | None,
        Field(
            alias='maxConcurrentNodes',
            description='Nodes copying from the cluster volume at once, across every cache of the cluster (a warm-slot Lease each, in fleetcache-system).',
            ge=1,
            le=64,
        ),
    ] = 4
    tolerations: Annotated[
        list[Toleration] | None,
        Field(
            description="Tolerations of the warmers and the node agent, for the pool's taints (e.g. nvidia.com/gpu); Kubernetes core/v1 Toleration.",
            max_length=32,
        ),
    ] = None
    labels: Annotated[
        Literal['NodeAgent', 'None'] | None,
        Field(
            description='NodeAgent (default): the node agent labels a node node-cache.fleetcache.dev/<key>=<commit> once its copy is verified, and replicas are placed by it (needs Kubernetes 1.30+ for the admission policy that confines those labels). None: no labels and no node RBAC; Node delivery places replicas anywhere in the pool.'
        ),
    ] = 'NodeAgent'


class NodeCache1(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    capacity_per_node_bytes: Annotated[
        StrictInt | None,
        Field(alias='capacityPerNodeBytes', description='spec.nodeCache.capacityPerNode in bytes.', ge=0),
    ] = None
    demand_bytes: Annotated[
        StrictInt | None,
        Field(
            alias='demandBytes',
            description='Bytes every pool node holds for the caches that started (two commits during a model update); evicted caches count nothing.',
            ge=0,
        ),
    ] = None
    used_percent: Annotated[
        StrictInt | None,
        Field(alias='usedPercent', description='demandBytes as a whole percent of capacityPerNodeBytes.', ge=0),
    ] = None
    summary: Annotated[
        str | None, Field(description='demand/capacity (percent), e.g. "2.1TiB/3TiB (70%)" (the NODE-CACHE column).')
    ] = None
    admitted: Annotated[
        list[str] | None,
        Field(
            description='Node caches (namespace/cache) admitted to start warming and not Ready yet, sorted; latched.',
            max_length=256,
        ),
    ] = None
    waiting: Annotated[
        list[str] | None,
        Field(
            description='Node caches (namespace/cache) that would pass the high watermark and wait, sorted.',
            max_length=256,
        ),
    ] = None
    evicted: Annotated[
        list[str] | None,
        Field(
            description='Node caches (namespace/cache) evicted from the nodes to get under the low watermark, sorted; the volume keeps serving. Each stays here until a replica of its cache is placed on this cluster again.',
            max_length=256,
        ),
    ] = None


class NodePool(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[
        str,
        Field(
            description="The pool's name, a DNS label unique in the list; ModelCacheGrant spec.nodePools and ModelCache spec.storage.nodePool name it. default is the pool spec.nodeCache declares, when it is unset.",
            max_length=63,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?$',
        ),
    ]
    node_selector: Annotated[
        NodeSelector1 | None,
        Field(
            alias='nodeSelector',
            description='The GPU pool (Kubernetes label selector semantics over Node labels); empty selects every node that opted in. Control-plane nodes are never in the pool.',
        ),
    ] = None
    opt_in_label: Annotated[
        OptInLabel | None,
        Field(
            alias='optInLabel',
            description="The label a node carries to opt in (AIBrix's rule: a pool node holds no copies until its operator labels it).",
            validate_default=True,
        ),
    ] = {}
    path: Annotated[
        str | None,
        Field(
            description='Absolute path of a dedicated filesystem mounted on every pool node, e.g. /mnt/nvme0 (not the root filesystem: a warmer refuses it with NodeCacheNotDedicated). Caches live in <path>/<namespace>/<cache>.',
            max_length=1024,
            min_length=2,
        ),
    ] = None
    storage_class_name: Annotated[
        str | None,
        Field(
            alias='storageClassName',
            description='Reserved: node copies on claims of a local storage class. Not built; a cluster that sets it gets no node tier (NodeCacheModeUnsupported): use path.',
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ] = None
    capacity_per_node: Annotated[
        str,
        Field(
            alias='capacityPerNode',
            description='Bytes every pool node may spend on node copies, e.g. 3Ti. Node caches whose demand would pass the high watermark wait (NodeCapacityLow); above it, unpinned node copies no replica uses are evicted.',
            max_length=32,
            pattern='^([1-9][0-9]*(\\.[0-9]+)?|0\\.[0-9]*[1-9][0-9]*)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$',
        ),
    ]
    high_watermark: Annotated[
        StrictInt | None,
        Field(
            alias='highWatermark',
            description="Percent of capacityPerNode the node caches' demand may reach: a cache that would pass it waits, and above it unpinned, unused node copies are evicted down to lowWatermark.",
            ge=2,
            le=95,
        ),
    ] = 80
    low_watermark: Annotated[
        StrictInt | None,
        Field(
            alias='lowWatermark',
            description='Percent of capacityPerNode eviction brings the demand down to; the gap to highWatermark keeps eviction from flapping.',
            ge=1,
            le=94,
        ),
    ] = 70
    max_concurrent_nodes: Annotated[
        StrictInt | None,
        Field(
            alias='maxConcurrentNodes',
            description='Nodes copying from the cluster volume at once, across every cache of the cluster (a warm-slot Lease each, in fleetcache-system).',
            ge=1,
            le=64,
        ),
    ] = 4
    tolerations: Annotated[
        list[Toleration] | None,
        Field(
            description="Tolerations of the warmers and the node agent, for the pool's taints (e.g. nvidia.com/gpu); Kubernetes core/v1 Toleration.",
            max_length=32,
        ),
    ] = None
    labels: Annotated[
        Literal['NodeAgent', 'None'] | None,
        Field(
            description='NodeAgent (default): the node agent labels a node node-cache.fleetcache.dev/<key>=<commit> once its copy is verified, and replicas are placed by it (needs Kubernetes 1.30+ for the admission policy that confines those labels). None: no labels and no node RBAC; Node delivery places replicas anywhere in the pool.'
        ),
    ] = 'NodeAgent'


class NodePool1(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[str, Field(description='The pool.')]
    capacity_per_node_bytes: Annotated[
        StrictInt | None, Field(alias='capacityPerNodeBytes', description="the pool's capacityPerNode in bytes.", ge=0)
    ] = None
    demand_bytes: Annotated[
        StrictInt | None,
        Field(
            alias='demandBytes',
            description='Bytes every pool node holds for the caches that started (two commits during a model update); evicted caches count nothing.',
            ge=0,
        ),
    ] = None
    used_percent: Annotated[
        StrictInt | None,
        Field(alias='usedPercent', description='demandBytes as a whole percent of capacityPerNodeBytes.', ge=0),
    ] = None
    summary: Annotated[
        str | None, Field(description='demand/capacity (percent), e.g. "2.1TiB/3TiB (70%)" (the NODE-CACHE column).')
    ] = None
    admitted: Annotated[
        list[str] | None,
        Field(
            description='Node caches (namespace/cache) admitted to start warming and not Ready yet, sorted; latched.',
            max_length=256,
        ),
    ] = None
    waiting: Annotated[
        list[str] | None,
        Field(
            description='Node caches (namespace/cache) that would pass the high watermark and wait, sorted.',
            max_length=256,
        ),
    ] = None
    evicted: Annotated[
        list[str] | None,
        Field(
            description='Node caches (namespace/cache) evicted from the nodes to get under the low watermark, sorted; the volume keeps serving. Each stays here until a replica of its cache is placed on this cluster again.',
            max_length=256,
        ),
    ] = None


class NodeSelector(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    match_labels: Annotated[
        dict[str, MatchLabelsAdditionalProperty] | None,
        Field(
            alias='matchLabels', description='Labels a pool node carries, each with exactly this value.', max_length=32
        ),
    ] = None
    match_expressions: Annotated[
        list[MatchExpression] | None,
        Field(
            alias='matchExpressions',
            description='Label requirements a pool node satisfies, all of them.',
            max_length=32,
        ),
    ] = None


class NodeSelector1(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    match_labels: Annotated[
        dict[str, MatchLabelsAdditionalProperty] | None,
        Field(
            alias='matchLabels', description='Labels a pool node carries, each with exactly this value.', max_length=32
        ),
    ] = None
    match_expressions: Annotated[
        list[MatchExpression1] | None,
        Field(
            alias='matchExpressions',
            description='Label requirements a pool node satisfies, all of them.',
            max_length=32,
        ),
    ] = None


class OptInLabel(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    key: Annotated[
        str | None,
        Field(
            description='The opt-in label key.',
            max_length=317,
            min_length=1,
            pattern='^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$',
        ),
    ] = 'fleetcache.dev/node-cache'
    value: Annotated[
        str | None,
        Field(
            description='The opt-in label value.',
            max_length=63,
            pattern='^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$',
        ),
    ] = 'enabled'


class ProviderConfigRef(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[
        str,
        Field(
            description='Name of the ClusterProviderConfig (kubernetes.m.crossplane.io).',
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ]


class Spec(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    kubeconfig_secret_ref: Annotated[
        KubeconfigSecretRef | None,
        Field(
            alias='kubeconfigSecretRef',
            description='A Secret holding a kubeconfig for the cluster; a ClusterProviderConfig named after this FleetCluster is composed from it.',
        ),
    ] = None
    provider_config_ref: Annotated[
        ProviderConfigRef | None,
        Field(
            alias='providerConfigRef',
            description='Adopt an existing provider-kubernetes ClusterProviderConfig instead of composing one (e.g. one using workload identity). It is never modified.',
        ),
    ] = None
    features: Annotated[
        Features | None,
        Field(
            description="What the cluster's nodes can do that the composers cannot see (they reach the cluster's API server only, never its kubelets or container runtime), declared by whoever runs them.",
            validate_default=True,
        ),
    ] = {}
    cache: Annotated[
        Cache | None,
        Field(
            description="Defaults for cache volumes on this cluster (a ModelCache's spec.storage overrides them) and the cluster's cache budget with its watermarks.",
            validate_default=True,
        ),
    ] = {}
    agent: Annotated[Agent | None, Field(description='Overrides for the agent on this cluster.')] = None
    node_cache: Annotated[
        NodeCache | None,
        Field(
            alias='nodeCache',
            description='The node tier on this cluster: GPU pool nodes hold copies of tier-Node caches on a dedicated local filesystem (design/node-tier.md). Absent, the cluster has no node tier and Node caches stay on its volume (NodeTierNotConfigured). Set, compose-fleet-cluster composes the node agent in namespace fleetcache-system and decides which caches the nodes hold (status.nodeCache).',
        ),
    ] = None
    node_pools: Annotated[
        list[NodePool] | None,
        Field(
            alias='nodePools',
            description='Named node pools on this cluster, each what spec.nodeCache declares plus a name (design/node-pools.md): its own selector and opt-in label, path, capacity, watermarks and node agent. spec.nodeCache is the pool named default. A ModelCache names its pool (spec.storage.nodePool) and its ModelCacheGrant must grant it (spec.nodePools). Paths differ between pools, so two node agents never manage one directory.',
            max_length=8,
        ),
    ] = None
    crossplane: Annotated[
        dict[str, Any] | None,
        Field(description='Composition selection and resource references, written by Crossplane.'),
    ] = None


class Status(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    provider_config_name: Annotated[
        str | None,
        Field(
            alias='providerConfigName',
            description='The ClusterProviderConfig (kubernetes.m.crossplane.io) every Object targeting this cluster names in spec.providerConfigRef.',
        ),
    ] = None
    cache: Annotated[
        Cache1 | None,
        Field(
            description="The cluster's cache usage and the capacity decisions compose-fleet-cluster made from the ModelCacheHydrations on this cluster; the hydrations obey them."
        ),
    ] = None
    node_cache: Annotated[
        NodeCache1 | None,
        Field(
            alias='nodeCache',
            description="The per-node capacity decision over the tier-Node caches of this cluster (namespace/cache each), with the volume tier's rules; the hydrations obey it. Absent when spec.nodeCache is unset.",
        ),
    ] = None
    node_pools: Annotated[
        list[NodePool1] | None,
        Field(
            alias='nodePools',
            description='The per-node capacity decision of every pool of spec.nodePools (and the default pool of spec.nodeCache, which status.nodeCache also shows), by name; the hydrations of each pool obey its row.',
            max_length=9,
        ),
    ] = None
    conditions: Annotated[list[dict[str, Any]] | None, Field(description='Conditions, written by Crossplane.')] = None
    crossplane: Annotated[dict[str, Any] | None, Field(description="Crossplane's own status.")] = None


class Toleration(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    key: Annotated[
        str | None,
        Field(description='The taint key; empty with operator Exists tolerates every taint.', max_length=317),
    ] = None
    operator: Annotated[Literal['Exists', 'Equal'] | None, Field(description='Exists or Equal (default Equal).')] = None
    value: Annotated[str | None, Field(description='The taint value, for operator Equal.', max_length=63)] = None
    effect: Annotated[
        Literal['NoSchedule', 'PreferNoSchedule', 'NoExecute'] | None,
        Field(description='The taint effect to tolerate; empty tolerates every effect.'),
    ] = None
    toleration_seconds: Annotated[
        StrictInt | None,
        Field(
            alias='tolerationSeconds',
            description='For NoExecute, how long the pod stays bound after the taint appears.',
        ),
    ] = None


class Value(RootModel[str]):
    root: Annotated[str, Field(description='One label value.', max_length=63)]