# Generated from apis/modelreplicas/definition.yaml by `python -m fleetcache.devtools.apigen` (make models)
# with datamodel-code-generator 0.89.0. Do not edit: edit the XRD and regenerate.

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt


class Cache(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    model_cache_name: Annotated[
        str, Field(alias='modelCacheName', description='The ModelCache whose volume is mounted.', min_length=1)
    ]
    volume_name: Annotated[
        str,
        Field(
            alias='volumeName',
            description="The claim on the cluster, in the namespace named like this one: the cache PVC, or the user's own claim for an existing-volume source (the hydration's status.volumeName).",
            min_length=1,
        ),
    ]
    mount_path: Annotated[
        str,
        Field(
            alias='mountPath',
            description='Where the claim is mounted read-only (HF_HUB_CACHE is its hub/ on layout HfCache).',
            min_length=1,
        ),
    ]
    snapshot_path: Annotated[
        str,
        Field(
            alias='snapshotPath',
            description="The model's directory under mountPath (FLEETCACHE_MODEL): the snapshot hub/models--ORG--NAME/snapshots/<commit> on layout HfCache; on Flat the commit's directory commits/<commit> (S3 layout Flat), or the existing volume's subPath or mountPath itself.",
            min_length=1,
        ),
    ]
    layout: Annotated[
        Literal['HfCache', 'Flat'] | None,
        Field(
            description='HfCache: the files in the Hugging Face cache layout (Hub, S3 default), HF_HUB_CACHE set; Flat: the files at their paths under snapshotPath (an existing volume, S3 layout Flat), no HF_HUB_CACHE.'
        ),
    ] = 'HfCache'
    commit: Annotated[str, Field(description='The commit of the snapshot (FLEETCACHE_MODEL_REVISION).', min_length=1)]


class EngineImage(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    reference: Annotated[
        str,
        Field(
            description='<repository>@sha256:<64 hex>, the digest every node of the fleet pulled.',
            max_length=600,
            min_length=1,
        ),
    ]
    model_cache_name: Annotated[
        str,
        Field(
            alias='modelCacheName',
            description='The ModelCache whose keeper pods hold the image on the nodes.',
            max_length=63,
            min_length=1,
        ),
    ]
    warm: Annotated[
        StrictBool,
        Field(description="Every opted-in pool node of the cluster holds the image (the hydration's status.images)."),
    ]


class Hydration(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    phase: Annotated[str | None, Field(description='Pending, Hydrating, Ready or Failed.')] = None
    bytes_done: Annotated[
        StrictInt | None, Field(alias='bytesDone', description='Bytes on disk on the cluster.', ge=0)
    ] = None
    bytes_total: Annotated[
        StrictInt | None, Field(alias='bytesTotal', description='Bytes to fetch on the cluster.', ge=0)
    ] = None
    reason: Annotated[str | None, Field(description="The hydration's reason, e.g. AuthFailed.")] = None
    message: Annotated[str | None, Field(description="The hydration's message with its remedy.")] = None


class Image(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    model_cache_name: Annotated[
        str, Field(alias='modelCacheName', description='The ModelCache whose artifact is mounted.', min_length=1)
    ]
    reference: Annotated[
        str,
        Field(
            description="The artifact pinned by digest (host/repository@sha256:<64 hex>): the OCI source's resolved reference, or the fleet mirror's artifact (status.resolved.artifact).",
            max_length=1024,
            min_length=5,
            pattern='^([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)+(:[0-9]{1,5})?|localhost(:[0-9]{1,5})?|[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?:[0-9]{1,5})/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)*@sha256:[0-9a-f]{64}$',
        ),
    ]
    commit: Annotated[
        str, Field(description='The commit the artifact holds (FLEETCACHE_MODEL_REVISION).', min_length=1)
    ]


class Model(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    repo: Annotated[
        str | None, Field(description='Repository id, org/name (FLEETCACHE_MODEL on Source).', max_length=200)
    ] = None
    revision: Annotated[str | None, Field(description='The revision asked for.', max_length=255)] = None
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
    revision: Annotated[str | None, Field(description='FLEETCACHE_MODEL_REVISION.')] = None


class ModelReplica(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    spec: Annotated[Spec, Field(description='The replica as its ModelDeployment decided it.')]
    status: Annotated[
        Status | None, Field(description='Where the replica stands, written by compose-model-replica.')
    ] = None
    api_version: Annotated[str | None, Field(alias='apiVersion')] = None
    kind: str | None = None
    metadata: Annotated[dict[str, Any] | None, Field(description='Kubernetes object metadata.')] = None


class NodeCache(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    claim_name: Annotated[
        str,
        Field(
            alias='claimName',
            description='The node PVC (<cache>-node-<poolHash>), mounted read-only at /var/cache/fleetcache-node.',
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ]
    label_key: Annotated[
        str | None,
        Field(
            alias='labelKey',
            description='The node label node-cache.fleetcache.dev/<k> whose value is the commit a node holds; empty when the cluster sets no warm labels (placement is then anywhere in the pool).',
            max_length=317,
        ),
    ] = None
    commit: Annotated[
        str,
        Field(
            description='The commit the node copy must hold (the label value, --commit of the select step).',
            max_length=63,
            min_length=1,
        ),
    ]
    manifest_digest: Annotated[
        str,
        Field(
            alias='manifestDigest',
            description="The commit's manifest digest the select step checks the node copy against.",
            max_length=64,
            min_length=1,
        ),
    ]
    policy: Annotated[
        Literal['Prefer', 'Require'],
        Field(description='Prefer or Require (spec.delivery.node.policy of the ModelDeployment).'),
    ]
    require_timeout: Annotated[
        str | None,
        Field(
            alias='requireTimeout',
            description='Under Require, how long the replica may be unavailable before it reverts to Prefer.',
            max_length=8,
            pattern='^[0-9]{1,6}[hm]$',
        ),
    ] = '15m'
    reverted_at: Annotated[
        str | None,
        Field(
            alias='revertedAt',
            description='When the replica reverted from Require to Prefer (RFC 3339); latched: the replica stays on Prefer while it is Node on this cluster.',
            max_length=64,
        ),
    ] = None


class NodeCache1(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    commit: Annotated[str | None, Field(description='The commit the Node delivery started with.')] = None
    placement: Annotated[str | None, Field(description='Prefer or Require, as the pod is placed now.')] = None
    started_at: Annotated[
        str | None,
        Field(
            alias='startedAt',
            description='When the Node delivery of this commit started (requireTimeout counts from here).',
        ),
    ] = None
    reverted_at: Annotated[
        str | None,
        Field(alias='revertedAt', description='When a Require placement reverted to Prefer; empty when it did not.'),
    ] = None


class Spec(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    deployment_name: Annotated[
        str,
        Field(
            alias='deploymentName',
            description="The ModelDeployment this replica belongs to, in the same namespace; the replica runs that ModelDeployment's spec.engine.",
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ]
    engine_digest: Annotated[
        str | None,
        Field(
            alias='engineDigest',
            description="Digest of the ModelDeployment's spec.engine this replica was composed with (Cache and Source); the replica runs the engine only when the one it reads from its ModelDeployment has this digest.",
            max_length=64,
        ),
    ] = None
    replica: Annotated[
        StrictInt | None, Field(description="The replica's index within its ModelDeployment.", ge=0, le=999)
    ] = 0
    cluster_name: Annotated[
        str,
        Field(
            alias='clusterName',
            description='The FleetCluster the replica runs on.',
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ]
    delivery: Annotated[
        Literal['Node', 'Cache', 'Image', 'Source', 'Wait', 'Fail'],
        Field(
            description="Node reads the node's own copy (else, inside the pod, the cluster volume); Cache mounts the warm cache's cluster volume; Image mounts the cache's OCI artifact by digest as an image volume; Source loads from the source; Wait runs nothing until the cache is Ready; Fail runs nothing and reports the hydration's failure."
        ),
    ]
    delivery_reason: Annotated[
        str | None,
        Field(
            alias='deliveryReason',
            description='Why the ModelDeployment chose this delivery, e.g. "NodeTierWarming: 2/5 nodes warm on 4f1c2b0d9e8a; using the cluster volume" (status.deliveryReason).',
            max_length=1024,
        ),
    ] = None
    engine_image: Annotated[
        EngineImage | None,
        Field(
            alias='engineImage',
            description="The engine's image as its cache keeps it warm on the cluster's pool nodes (the ModelCache lists it in spec.images): the engine runs it by the digest the fleet pinned, and a Prefer or Require node policy also prefers nodes that keep it.",
        ),
    ] = None
    node_cache: Annotated[
        NodeCache | None,
        Field(
            alias='nodeCache',
            description='The node copy on the cluster (Node only): the node PVC, the node label that says which commit a node holds, and how the replica is placed on warm nodes.',
        ),
    ] = None
    model: Annotated[Model | None, Field(description='The model to serve.')] = None
    cache: Annotated[Cache | None, Field(description='The warm cache on the cluster (Cache only).')] = None
    image: Annotated[
        Image | None,
        Field(
            description="The cache's OCI artifact, mounted read-only as an image volume (Image only): the runtime puts each layer's file at its path under /var/cache/fleetcache-image, which is FLEETCACHE_MODEL."
        ),
    ] = None
    hydration: Annotated[
        Hydration | None, Field(description="The cache's state on the cluster, for Wait and Fail replicas.")
    ] = None
    crossplane: Annotated[
        dict[str, Any] | None,
        Field(description='Composition selection and resource references, written by Crossplane.'),
    ] = None


class Status(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    phase: Annotated[
        Literal['Pending', 'Waiting', 'Ready', 'Failed'] | None,
        Field(description='Pending (starting), Waiting (for the cache), Ready (available) or Failed.'),
    ] = None
    cluster_name: Annotated[str | None, Field(alias='clusterName', description='The cluster it runs on.')] = None
    delivery: Annotated[
        str | None, Field(description='The delivery it was composed with (Node, Cache, Image, Source, Wait or Fail).')
    ] = None
    delivery_reason: Annotated[
        str | None,
        Field(
            alias='deliveryReason',
            description='Why it got that delivery (spec.deliveryReason), or why a Require placement reverted to Prefer.',
        ),
    ] = None
    node_cache: Annotated[
        NodeCache1 | None,
        Field(alias='nodeCache', description="The Node delivery's placement as composed, latched across composes."),
    ] = None
    reason: Annotated[
        str | None,
        Field(description='Machine-readable reason of the phase, e.g. Starting, Hydrating, HydrationFailed.'),
    ] = None
    message: Annotated[str | None, Field(description='What is happening and, when something is wrong, what to do.')] = (
        None
    )
    engine_image: Annotated[
        Literal['Warm', 'Cold'] | None,
        Field(
            alias='engineImage',
            description="Warm when every opted-in pool node of the cluster keeps the engine's image at its pinned digest (spec.engineImage), so a pod there starts without a pull; Cold otherwise (the image is not among its cache's spec.images, or not on every node yet).",
        ),
    ] = None
    serving_commit: Annotated[
        str | None,
        Field(
            alias='servingCommit',
            description="The commit every pod of the engine serves (FLEETCACHE_MODEL_REVISION; on Source without a commit, the revision): it moves to the commit the replica is composed for (status.model.revision) only once its Deployment has rolled out, as kubectl rollout status decides; until then the old pod serves the previous one. The Serving condition's lastTransitionTime says since when.",
            max_length=255,
        ),
    ] = None
    endpoint: Annotated[str | None, Field(description="The engine's Service on its cluster, host:port.")] = None
    model: Annotated[
        Model1 | None, Field(description='What the engine was told (FLEETCACHE_MODEL and FLEETCACHE_MODEL_REVISION).')
    ] = None
    conditions: Annotated[list[dict[str, Any]] | None, Field(description='Conditions, written by Crossplane.')] = None
    crossplane: Annotated[dict[str, Any] | None, Field(description="Crossplane's own status.")] = None