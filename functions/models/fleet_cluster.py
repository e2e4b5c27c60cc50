# Generated from apis/fleetclusters/definition.yaml by `python -m fleetcache.apigen` (make models)
# with datamodel-code-generator 0.89.0. Do not edit: edit the XRD and regenerate.

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt


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
        Field(
            alias='capacityBytes',
            description='spec.cache.capacity in bytes; absent when no capacity is set.',
            ge=0,
        ),
    ] = None
    capacity_human: Annotated[
        str | None,
        Field(
            alias='capacityHuman',
            description='capacityBytes, human readable, or "unlimited" (the CAPACITY column).',
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
            alias='waitingCount',
            description='How many hydrations wait, also those the waiting list leaves out.',
            ge=0,
        ),
    ] = None
    evicted: Annotated[
        list[str] | None,
        Field(
            description='Hydrations (namespace/name) whose copies were evicted to get under the low watermark, sorted; each stays here until a replica of its cache is placed on this cluster again.',
            max_length=256,
        ),
    ] = None


class FleetCluster(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    spec: Annotated[
        Spec, Field(description='How to reach the cluster and its cache defaults.')
    ]
    status: Annotated[
        Status | None,
        Field(
            description='How Objects reach this cluster, written by compose-fleet-cluster.'
        ),
    ] = None
    api_version: Annotated[str | None, Field(alias='apiVersion')] = None
    kind: str | None = None
    metadata: Annotated[
        dict[str, Any] | None, Field(description='Kubernetes object metadata.')
    ] = None


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
    cache: Annotated[
        Cache | None,
        Field(
            description="Defaults for cache volumes on this cluster (a ModelCache's spec.storage overrides them) and the cluster's cache budget with its watermarks.",
            validate_default=True,
        ),
    ] = {}
    agent: Annotated[
        Agent | None, Field(description='Overrides for the agent on this cluster.')
    ] = None
    crossplane: Annotated[
        dict[str, Any] | None,
        Field(
            description='Composition selection and resource references, written by Crossplane.'
        ),
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
    conditions: Annotated[
        list[dict[str, Any]] | None,
        Field(description='Conditions, written by Crossplane.'),
    ] = None
    crossplane: Annotated[
        dict[str, Any] | None, Field(description="Crossplane's own status.")
    ] = None