# Generated from apis/modeldeployments/definition.yaml by `python -m fleetcache.devtools.apigen` (make models)
# with datamodel-code-generator 0.89.0. Do not edit: edit the XRD and regenerate.

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, StrictBool, StrictInt
from typing_extensions import TypeAliasType


class Arg(RootModel[str]):
    root: Annotated[str, Field(description='One argument.', max_length=4096)]


class ClusterName(RootModel[str]):
    root: Annotated[
        str,
        Field(
            description='The name of a FleetCluster.',
            max_length=63,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$',
        ),
    ]


class ClusterSelector(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    match_labels: Annotated[
        dict[str, MatchLabelsAdditionalProperty] | None,
        Field(alias='matchLabels', description='Labels a FleetCluster must carry, each with exactly this value.'),
    ] = None
    match_expressions: Annotated[
        list[MatchExpression] | None,
        Field(
            alias='matchExpressions', description='Label requirements a FleetCluster must all satisfy.', max_length=32
        ),
    ] = None


class CommandItem(RootModel[str]):
    root: Annotated[str, Field(description='One word of the command.', max_length=4096)]


class ConfigMapKeyRef(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[str | None, Field(description="The ConfigMap's name.", max_length=253)] = None
    key: Annotated[str, Field(description='The key to select.', max_length=253)]
    optional: Annotated[StrictBool | None, Field(description='Whether the ConfigMap or its key may be missing.')] = None


class Delivery(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    while_hydrating: Annotated[
        Literal['Source', 'Wait'] | None,
        Field(
            alias='whileHydrating',
            description='On a cache target that is still Pending or Hydrating: Source loads from the source now; Wait runs nothing there until the cache is Ready.',
        ),
    ] = 'Source'
    on_hydration_failure: Annotated[
        Literal['Source', 'Fail'] | None,
        Field(
            alias='onHydrationFailure',
            description="On a cache target whose hydration Failed: Source loads from the source; Fail marks the replica Failed with the hydration's reason and remedy.",
        ),
    ] = 'Source'
    switch_to_cache: Annotated[
        Literal['OnReady', 'Never'] | None,
        Field(
            alias='switchToCache',
            description='When the cache becomes Ready under a running Source replica: OnReady rolls the replica once onto the cache; Never keeps it on the source.',
        ),
    ] = 'OnReady'
    node: Annotated[
        Node | None,
        Field(
            description="Delivery from the GPU node's own disk (Node), tried first on a cluster where the ModelCache is on storage tier Node, its cluster volume is Ready and at least one node holds the verified commit. Inside the pod an init container links the node copy, else the cluster volume (Node, then Volume, then Source). switchToCache governs the roll from the volume to the node copy.",
            validate_default=True,
        ),
    ] = {}


class Divisor(RootModel[str]):
    root: Annotated[
        str,
        Field(
            description='The unit the value is given in, e.g. 1Mi; 1 when unset.',
            max_length=64,
            pattern='^(\\d+(\\.\\d*)?|\\.\\d+)([eE][+-]?\\d{1,2}|[KMGTPE]i|[numkMGTPE])?$',
        ),
    ]


class Engine(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    image: Annotated[
        str,
        Field(
            description='Container image of the engine, e.g. vllm/vllm-openai:v0.11.0.',
            max_length=512,
            min_length=1,
            pattern='^\\S+$',
        ),
    ]
    command: Annotated[
        list[CommandItem] | None,
        Field(description="Entrypoint override; the image's entrypoint when unset.", max_length=64),
    ] = None
    args: Annotated[
        list[Arg] | None,
        Field(
            description='Arguments of the engine; $(FLEETCACHE_MODEL) and other variables are expanded by Kubernetes.',
            max_length=256,
        ),
    ] = None
    env: Annotated[
        list[EnvItem] | None,
        Field(
            description='Extra environment variables, after the fleetcache ones (so they may refer to them). The variables fleetcache sets from the delivery may not be set here.',
            max_length=128,
        ),
    ] = None
    resources: Annotated[
        Resources | None,
        Field(
            description='Compute resources of the engine container (GPUs, CPU, memory), as in a Kubernetes container.'
        ),
    ] = None
    port: Annotated[
        StrictInt | None,
        Field(description="Port the engine serves HTTP on; the replica's Service exposes it.", ge=1, le=65535),
    ] = 8000
    readiness_path: Annotated[
        str | None,
        Field(
            alias='readinessPath',
            description='HTTP path that answers 200 once the model is loaded (the readiness probe).',
            max_length=1024,
            pattern='^/\\S*$',
        ),
    ] = '/health'
    shared_memory_size: Annotated[
        str | None,
        Field(
            alias='sharedMemorySize',
            description="Size limit of the memory-backed /dev/shm (tensor-parallel engines need more than the runtime's 64Mi), e.g. 16Gi; counts against the pod's memory. Unset: no limit beyond the pod's.",
            max_length=32,
            pattern='^([1-9][0-9]*(\\.[0-9]+)?|0\\.[0-9]*[1-9][0-9]*)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$',
        ),
    ] = None


class EnvItem(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[str, Field(description='Name of the variable.', max_length=256, min_length=1, pattern='^[^=]+$')]
    value: Annotated[
        str | None, Field(description='Literal value; $(VAR) references are expanded.', max_length=32768)
    ] = None
    value_from: Annotated[
        ValueFrom | None,
        Field(
            alias='valueFrom',
            description='A Kubernetes EnvVarSource: exactly one of configMapKeyRef, secretKeyRef, fieldRef or resourceFieldRef; the object it names must exist on every cluster.',
        ),
    ] = None


class FieldRef(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    api_version: Annotated[
        str | None,
        Field(
            alias='apiVersion',
            description='Version of the schema fieldPath is written in; v1 when unset.',
            max_length=64,
        ),
    ] = None
    field_path: Annotated[str, Field(alias='fieldPath', description='Path of the field to select.', max_length=512)]


class HuggingFace(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    repo: Annotated[
        str,
        Field(
            description='Repository id in the shape org/name, e.g. Qwen/Qwen3-0.6B.',
            max_length=200,
            min_length=3,
            pattern='^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?/[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$',
        ),
    ]
    revision: Annotated[
        str | None,
        Field(
            description='Branch, tag or commit the engine loads (FLEETCACHE_MODEL_REVISION).',
            max_length=255,
            min_length=1,
            pattern='^\\S+$',
        ),
    ] = 'main'


class Limits(RootModel[str]):
    root: Annotated[
        str,
        Field(
            description='A quantity, e.g. 1, 500m or 96Gi.',
            max_length=64,
            pattern='^(\\d+(\\.\\d*)?|\\.\\d+)([eE][+-]?\\d{1,2}|[KMGTPE]i|[numkMGTPE])?$',
        ),
    ]


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
        Field(description='Label values for In and NotIn; must be empty for Exists and DoesNotExist.', max_length=256),
    ] = None


MatchLabelsAdditionalProperty = TypeAliasType(
    "MatchLabelsAdditionalProperty",
    Annotated[str, Field(description='The label value the FleetCluster must carry under this key.', max_length=63)],
)


class Model(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    hugging_face: Annotated[
        HuggingFace, Field(alias='huggingFace', description='A model repository on the Hugging Face Hub.')
    ]


class Model1(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    repo: Annotated[str | None, Field(description='Repository id, org/name.')] = None
    revision: Annotated[str | None, Field(description='The revision asked for.')] = None
    commit: Annotated[
        str | None, Field(description='The commit the ModelCache resolved the revision to (empty without a cache).')
    ] = None
    model_cache_name: Annotated[
        str | None, Field(alias='modelCacheName', description='The ModelCache the model came from.')
    ] = None


class ModelCacheRef(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[
        str,
        Field(
            description='Name of the ModelCache in this namespace.',
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ]


class ModelDeployment(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    spec: Annotated[Spec, Field(description='What to serve, how many replicas, where, and with which engine.')]
    status: Annotated[
        Status | None,
        Field(description='Where the replicas run and how each gets its weights, written by compose-model-deployment.'),
    ] = None
    api_version: Annotated[str | None, Field(alias='apiVersion')] = None
    kind: str | None = None
    metadata: Annotated[dict[str, Any] | None, Field(description='Kubernetes object metadata.')] = None


class Node(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    policy: Annotated[
        Literal['Prefer', 'Require', 'Never'] | None,
        Field(
            description='Prefer places the replica preferably on a node holding the commit (warmth only scores: GPUs decide); Require places it only on such a node, and reverts to Prefer once (one roll, never back) when the replica is not available requireTimeout after its Node delivery started; Never keeps every replica on the cluster volume.'
        ),
    ] = 'Prefer'
    require_timeout: Annotated[
        str | None,
        Field(
            alias='requireTimeout',
            description='Under policy Require, how long a replica may stay unavailable on warm nodes before it reverts to Prefer, e.g. 15m or 1h.',
            max_length=8,
            pattern='^[0-9]{1,6}[hm]$',
        ),
    ] = '15m'


class Placement(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    cluster_selector: Annotated[
        ClusterSelector | None,
        Field(
            alias='clusterSelector',
            description='Selects FleetClusters by their labels (Kubernetes label selector semantics). An empty selector selects every FleetCluster.',
        ),
    ] = None
    cluster_names: Annotated[
        list[ClusterName] | None,
        Field(
            alias='clusterNames',
            description='FleetClusters by name. A name with no FleetCluster is reported in the ReplicasScheduled condition.',
            max_length=5000,
            min_length=1,
        ),
    ] = None


class Placement1(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    replica: Annotated[StrictInt, Field(description="The replica's index, 0 to replicas-1.", ge=0)]
    cluster: Annotated[str | None, Field(description='The FleetCluster it runs on; empty when unscheduled.')] = None
    delivery: Annotated[
        Literal['', 'Node', 'Cache', 'Image', 'Source', 'Wait', 'Fail'] | None,
        Field(description='Node, Cache, Image, Source, Wait or Fail; empty when unscheduled.'),
    ] = None
    reason: Annotated[
        str | None,
        Field(
            description="Why: NodeReady (a node holds the commit), NodeTierWarming, NodeTierUnavailable, NodeDeliveryNever or SwitchToNodeNever (the cluster volume instead of the node copy), CacheReady, PreviousCommitWhileHydrating (Cache on the commit the cluster still serves while the resolved one hydrates), PreviousCommitHydrationFailed (the same after the resolved commit failed there), ImageVolume (Image: the cache's OCI artifact, mounted by digest), ImageVolumeUnavailable (the volume path after the artifact could not be mounted), Hydrating, HydrationFailed, NotACacheTarget, SwitchToCacheNever, ModelCacheNotFound, NoModelCache, or for unscheduled replicas NoClusters or MaxReplicasPerCluster."
        ),
    ] = None
    commit: Annotated[
        str | None,
        Field(
            description='The commit the replica loads (FLEETCACHE_MODEL_REVISION): the resolved commit, or on PreviousCommit* the one its cluster still serves; empty for Wait, Fail, unscheduled replicas and before the cache has resolved.'
        ),
    ] = None


class Replicas(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    desired: Annotated[StrictInt | None, Field(description='spec.replicas.', ge=0)] = None
    scheduled: Annotated[StrictInt | None, Field(description='Replicas placed on a cluster.', ge=0)] = None
    ready: Annotated[StrictInt | None, Field(description='Replicas whose engine is available.', ge=0)] = None
    cache: Annotated[
        StrictInt | None,
        Field(description="Scheduled replicas that mount the warm cache's cluster volume (Cache delivery).", ge=0),
    ] = None
    image: Annotated[
        StrictInt | None,
        Field(
            description="Scheduled replicas that mount the cache's OCI artifact as an image volume (Image delivery).",
            ge=0,
        ),
    ] = None
    source: Annotated[StrictInt | None, Field(description='Scheduled replicas that load from the source.', ge=0)] = None
    waiting: Annotated[
        StrictInt | None, Field(description='Scheduled replicas waiting for the cache (whileHydrating Wait).', ge=0)
    ] = None
    failed: Annotated[
        StrictInt | None,
        Field(description='Scheduled replicas failed because the cache failed (onHydrationFailure Fail).', ge=0),
    ] = None
    node: Annotated[
        StrictInt | None,
        Field(
            description='Scheduled replicas that read the node copy (Node delivery); set when the cache is on storage tier Node on some cluster.',
            ge=0,
        ),
    ] = None
    previous_commit: Annotated[
        StrictInt | None,
        Field(
            alias='previousCommit',
            description='Cache replicas (counted in cache too) still mounting the previous commit their cluster verified, because the resolved commit is not Ready there yet (or failed there).',
            ge=0,
        ),
    ] = None


class Requests(RootModel[str]):
    root: Annotated[
        str,
        Field(
            description='A quantity, e.g. 8, 500m or 64Gi.',
            max_length=64,
            pattern='^(\\d+(\\.\\d*)?|\\.\\d+)([eE][+-]?\\d{1,2}|[KMGTPE]i|[numkMGTPE])?$',
        ),
    ]


class ResourceFieldRef(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    container_name: Annotated[
        str | None, Field(alias='containerName', description="The container; the engine's when unset.", max_length=253)
    ] = None
    resource: Annotated[
        str, Field(description='The resource to select, e.g. limits.cpu or requests.memory.', max_length=256)
    ]
    divisor: Annotated[
        StrictInt | Divisor | None, Field(description='The unit the value is given in, e.g. 1Mi; 1 when unset.')
    ] = None


class Resources(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    requests: Annotated[
        dict[str, StrictInt | Requests] | None, Field(description='Minimum resources, e.g. cpu 8 and memory 64Gi.')
    ] = None
    limits: Annotated[
        dict[str, StrictInt | Limits] | None,
        Field(description='Maximum resources, e.g. nvidia.com/gpu 1 and memory 96Gi.'),
    ] = None


class SecretKeyRef(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[str | None, Field(description="The Secret's name.", max_length=253)] = None
    key: Annotated[str, Field(description='The key to select.', max_length=253)]
    optional: Annotated[StrictBool | None, Field(description='Whether the Secret or its key may be missing.')] = None


class Spec(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    model_cache_ref: Annotated[
        ModelCacheRef | None,
        Field(
            alias='modelCacheRef',
            description='The ModelCache (same namespace) whose warm cache replicas mount. Its resolved commit is what every replica serves, Cache or Source.',
        ),
    ] = None
    model: Annotated[
        Model | None,
        Field(description='A model loaded straight from the source, without a cache (every replica is Source).'),
    ] = None
    replicas: Annotated[
        StrictInt | None, Field(description='Number of replicas (one engine pod each) across the fleet.', ge=0, le=1000)
    ] = 1
    max_replicas_per_cluster: Annotated[
        StrictInt | None,
        Field(
            alias='maxReplicasPerCluster',
            description='At most this many replicas of this deployment on one cluster; unset means no limit. Replicas that fit nowhere stay unscheduled (ReplicasScheduled=False).',
            ge=1,
            le=1000,
        ),
    ] = None
    placement: Annotated[
        Placement,
        Field(
            description='The clusters replicas may run on: Ready FleetClusters matched by a label selector, or listed by name. Exactly one of clusterSelector or clusterNames.'
        ),
    ]
    delivery: Annotated[
        Delivery | None,
        Field(
            description='How each replica gets the weights when the cache on its cluster is not Ready (see the table in design/deployments.md). A Ready cache is always used by new replicas.',
            validate_default=True,
        ),
    ] = {}
    engine: Annotated[
        Engine,
        Field(
            description="The inference engine's container. The model's location arrives in environment variables (FLEETCACHE_MODEL, FLEETCACHE_MODEL_REVISION, FLEETCACHE_DELIVERY, and on Cache HF_HUB_CACHE and HF_HUB_OFFLINE=1): write --model=$(FLEETCACHE_MODEL)."
        ),
    ]
    crossplane: Annotated[
        dict[str, Any] | None,
        Field(description='Composition selection and resource references, written by Crossplane.'),
    ] = None


class Status(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    replicas: Annotated[Replicas | None, Field(description='Replica counts.')] = None
    summary: Annotated[
        str | None, Field(description='Ready out of desired replicas, e.g. "2/3" (the REPLICAS column).')
    ] = None
    reason: Annotated[
        str | None,
        Field(
            description="Why the deployment stands where it does, in one word (the REASON column): the ModelCacheResolved condition's reason when it is False (ModelCacheNotFound, Resolving), else the ReplicasScheduled condition's when it is False (NoClusters, MaxReplicasPerCluster), else the status.reason of the first replica not ready (in the order status.placements puts those needing attention first; ReplicasNotReady until it reports one), else Available."
        ),
    ] = None
    model: Annotated[
        Model1 | None, Field(description='The model every replica serves; kept when the ModelCache disappears.')
    ] = None
    placements: Annotated[
        list[Placement1] | None,
        Field(
            description="One entry per desired replica, by index, up to 100; past 100 replicas the 100 that most need attention (not ready, unscheduled, Fail, Wait, Source, then Cache). Every replica's own placement is on its ModelReplica.",
            max_length=100,
        ),
    ] = None
    conditions: Annotated[list[dict[str, Any]] | None, Field(description='Conditions, written by Crossplane.')] = None
    crossplane: Annotated[dict[str, Any] | None, Field(description="Crossplane's own status.")] = None


class Value(RootModel[str]):
    root: Annotated[str, Field(description='One label value.', max_length=63)]


class ValueFrom(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    config_map_key_ref: Annotated[
        ConfigMapKeyRef | None,
        Field(alias='configMapKeyRef', description="A key of a ConfigMap in the replica's namespace on its cluster."),
    ] = None
    secret_key_ref: Annotated[
        SecretKeyRef | None,
        Field(alias='secretKeyRef', description="A key of a Secret in the replica's namespace on its cluster."),
    ] = None
    field_ref: Annotated[
        FieldRef | None, Field(alias='fieldRef', description='A field of the pod, e.g. metadata.name or status.podIP.')
    ] = None
    resource_field_ref: Annotated[
        ResourceFieldRef | None,
        Field(alias='resourceFieldRef', description='A resource of the engine container, e.g. limits.memory.'),
    ] = None