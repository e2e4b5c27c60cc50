# Generated from apis/modelreplicas/definition.yaml by `python -m fleetcache.apigen` (make models)
# with datamodel-code-generator 0.89.0. Do not edit: edit the XRD and regenerate.

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, StrictInt


class Cache(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    model_cache_name: Annotated[
        str,
        Field(
            alias='modelCacheName',
            description='The ModelCache whose volume is mounted.',
        ),
    ]
    volume_name: Annotated[
        str,
        Field(
            alias='volumeName',
            description='The cache PVC on the cluster, in the namespace named like this one.',
        ),
    ]
    mount_path: Annotated[
        str,
        Field(
            alias='mountPath',
            description='Where the PVC is mounted read-only (HF_HUB_CACHE).',
        ),
    ]
    snapshot_path: Annotated[
        str,
        Field(
            alias='snapshotPath',
            description='The snapshot directory models--ORG--NAME/snapshots/<commit> under mountPath (FLEETCACHE_MODEL).',
        ),
    ]
    commit: Annotated[
        str,
        Field(description='The commit of the snapshot (FLEETCACHE_MODEL_REVISION).'),
    ]


class Engine(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    image: Annotated[
        str, Field(description='Container image of the engine.', min_length=1)
    ]
    command: Annotated[list[str] | None, Field(description='Entrypoint override.')] = (
        None
    )
    args: Annotated[list[str] | None, Field(description='Arguments of the engine.')] = (
        None
    )
    env: Annotated[
        list[EnvItem] | None, Field(description='Extra environment variables.')
    ] = None
    resources: Annotated[
        Resources | None,
        Field(description='Compute resources of the engine container.'),
    ] = None
    port: Annotated[
        StrictInt | None,
        Field(description='Port the engine serves HTTP on.', ge=1, le=65535),
    ] = 8000
    readiness_path: Annotated[
        str | None,
        Field(alias='readinessPath', description='HTTP path of the readiness probe.'),
    ] = '/health'
    shared_memory_size: Annotated[
        str | None,
        Field(
            alias='sharedMemorySize',
            description='Size limit of the memory-backed /dev/shm, e.g. 16Gi.',
            max_length=32,
            pattern='^([1-9][0-9]*(\\.[0-9]+)?|0\\.[0-9]*[1-9][0-9]*)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$',
        ),
    ] = None


class EnvItem(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[str, Field(description='Name of the variable.')]
    value: Annotated[str | None, Field(description='Literal value.')] = None
    value_from: Annotated[
        dict[str, Any] | None,
        Field(alias='valueFrom', description='A Kubernetes EnvVarSource.'),
    ] = None


class Hydration(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    phase: Annotated[
        str | None, Field(description='Pending, Hydrating, Ready or Failed.')
    ] = None
    bytes_done: Annotated[
        StrictInt | None,
        Field(alias='bytesDone', description='Bytes on disk on the cluster.', ge=0),
    ] = None
    bytes_total: Annotated[
        StrictInt | None,
        Field(alias='bytesTotal', description='Bytes to fetch on the cluster.', ge=0),
    ] = None
    reason: Annotated[
        str | None, Field(description="The hydration's reason, e.g. AuthFailed.")
    ] = None
    message: Annotated[
        str | None, Field(description="The hydration's message with its remedy.")
    ] = None


class Limits(RootModel[str]):
    root: Annotated[
        str,
        Field(
            description='A quantity, e.g. 1, 500m or 96Gi.',
            max_length=64,
            pattern='^(\\d+(\\.\\d*)?|\\.\\d+)([eE][+-]?\\d{1,2}|[KMGTPE]i|[numkMGTPE])?$',
        ),
    ]


class Model(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    repo: Annotated[
        str | None,
        Field(
            description='Repository id, org/name (FLEETCACHE_MODEL on Source).',
            max_length=200,
        ),
    ] = None
    revision: Annotated[
        str | None, Field(description='The revision asked for.', max_length=255)
    ] = None
    commit: Annotated[
        str | None,
        Field(
            description='The commit this replica loads: the resolved one, or on Cache the previous commit its cluster still serves while the resolved one hydrates; the revision when empty.',
            max_length=255,
        ),
    ] = None


class Model1(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[str | None, Field(description='FLEETCACHE_MODEL.')] = None
    revision: Annotated[str | None, Field(description='FLEETCACHE_MODEL_REVISION.')] = (
        None
    )


class ModelReplica(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    spec: Annotated[
        Spec, Field(description='The replica as its ModelDeployment decided it.')
    ]
    status: Annotated[
        Status | None,
        Field(
            description='Where the replica stands, written by compose-model-replica.'
        ),
    ] = None
    api_version: Annotated[str | None, Field(alias='apiVersion')] = None
    kind: str | None = None
    metadata: Annotated[
        dict[str, Any] | None, Field(description='Kubernetes object metadata.')
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


class Resources(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    requests: Annotated[
        dict[str, StrictInt | Requests] | None,
        Field(description='Minimum resources, e.g. cpu 8 and memory 64Gi.'),
    ] = None
    limits: Annotated[
        dict[str, StrictInt | Limits] | None,
        Field(description='Maximum resources, e.g. nvidia.com/gpu 1 and memory 96Gi.'),
    ] = None


class Spec(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    deployment_name: Annotated[
        str | None,
        Field(
            alias='deploymentName',
            description='The ModelDeployment this replica belongs to.',
            max_length=253,
        ),
    ] = None
    replica: Annotated[
        StrictInt | None,
        Field(
            description="The replica's index within its ModelDeployment.", ge=0, le=999
        ),
    ] = 0
    cluster_name: Annotated[
        str,
        Field(
            alias='clusterName',
            description='The FleetCluster the replica runs on.',
            max_length=253,
            min_length=1,
        ),
    ]
    delivery: Annotated[
        Literal['Cache', 'Source', 'Wait', 'Fail'],
        Field(
            description="Cache mounts the warm cache; Source loads from the source; Wait runs nothing until the cache is Ready; Fail runs nothing and reports the hydration's failure."
        ),
    ]
    model: Annotated[Model | None, Field(description='The model to serve.')] = None
    cache: Annotated[
        Cache | None, Field(description='The warm cache on the cluster (Cache only).')
    ] = None
    hydration: Annotated[
        Hydration | None,
        Field(
            description="The cache's state on the cluster, for Wait and Fail replicas."
        ),
    ] = None
    engine: Annotated[
        Engine,
        Field(
            description="The engine's container template, copied from the ModelDeployment's spec.engine."
        ),
    ]
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
    phase: Annotated[
        Literal['Pending', 'Waiting', 'Ready', 'Failed'] | None,
        Field(
            description='Pending (starting), Waiting (for the cache), Ready (available) or Failed.'
        ),
    ] = None
    cluster_name: Annotated[
        str | None, Field(alias='clusterName', description='The cluster it runs on.')
    ] = None
    delivery: Annotated[
        str | None, Field(description='The delivery it was composed with.')
    ] = None
    reason: Annotated[
        str | None,
        Field(
            description='Machine-readable reason of the phase, e.g. Starting, Hydrating, HydrationFailed.'
        ),
    ] = None
    message: Annotated[
        str | None,
        Field(
            description='What is happening and, when something is wrong, what to do.'
        ),
    ] = None
    endpoint: Annotated[
        str | None, Field(description="The engine's Service on its cluster, host:port.")
    ] = None
    model: Annotated[
        Model1 | None,
        Field(
            description='What the engine was told (FLEETCACHE_MODEL and FLEETCACHE_MODEL_REVISION).'
        ),
    ] = None
    conditions: Annotated[
        list[dict[str, Any]] | None,
        Field(description='Conditions, written by Crossplane.'),
    ] = None
    crossplane: Annotated[
        dict[str, Any] | None, Field(description="Crossplane's own status.")
    ] = None