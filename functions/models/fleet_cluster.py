# Generated from apis/fleetclusters/definition.yaml by `python -m fleetcache.apigen` (make models)
# with datamodel-code-generator 0.89.0. Do not edit: edit the XRD and regenerate.

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


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
            description='Optional budget of bytes this cluster may spend on caches, e.g. 2Ti.',
            max_length=32,
            pattern='^([1-9][0-9]*(\\.[0-9]+)?|0\\.[0-9]*[1-9][0-9]*)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$',
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
            description="Defaults for cache volumes on this cluster; a ModelCache's spec.storage overrides them.",
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
    conditions: Annotated[
        list[dict[str, Any]] | None,
        Field(description='Conditions, written by Crossplane.'),
    ] = None
    crossplane: Annotated[
        dict[str, Any] | None, Field(description="Crossplane's own status.")
    ] = None