# Generated from apis/modelcachehydrations/definition.yaml by `python -m fleetcache.devtools.apigen` (make models)
# with datamodel-code-generator 0.89.0. Do not edit: edit the XRD and regenerate.

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, RootModel, StrictBool, StrictInt


class Agent(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    concurrency: Annotated[
        StrictInt | None, Field(description='Files the agent downloads in parallel on each cluster.', ge=1, le=64)
    ] = 8
    bandwidth: Annotated[
        str | None,
        Field(
            description='Bytes per second the agent may use on each cluster, e.g. 200Mi; empty means unlimited.',
            max_length=32,
            pattern='^$|^([1-9][0-9]*(\\.[0-9]+)?|0\\.[0-9]*[1-9][0-9]*)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$',
        ),
    ] = None


class AllowPattern(RootModel[str]):
    root: Annotated[
        str, Field(description='A glob over repository paths, e.g. "*.safetensors".', max_length=256, min_length=1)
    ]


class Arg(RootModel[str]):
    root: Annotated[str, Field(description='One argument.', max_length=1024)]


class Artifact(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    reference: Annotated[
        str | None,
        Field(description='The artifact pinned by digest (host/repository@sha256:<64 hex>).', max_length=1024),
    ] = None
    digest: Annotated[
        str | None, Field(description="The artifact manifest's digest (sha256:<64 hex>).", max_length=71)
    ] = None


class CommandItem(RootModel[str]):
    root: Annotated[str, Field(description='One word of the command.', max_length=1024)]


class CredentialsSecretRef(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[
        str,
        Field(
            description="Name of the Secret, in the ModelCache's own namespace.",
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ]
    access_key_id_key: Annotated[
        str | None,
        Field(
            alias='accessKeyIdKey',
            description="Key in the Secret's data that holds the access key id.",
            max_length=253,
            min_length=1,
            pattern='^[-._a-zA-Z0-9]+$',
        ),
    ] = 'AWS_ACCESS_KEY_ID'
    secret_access_key_key: Annotated[
        str | None,
        Field(
            alias='secretAccessKeyKey',
            description="Key in the Secret's data that holds the secret access key.",
            max_length=253,
            min_length=1,
            pattern='^[-._a-zA-Z0-9]+$',
        ),
    ] = 'AWS_SECRET_ACCESS_KEY'


class FirstFailure(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    node: Annotated[str | None, Field(description="The node's name.")] = None
    reason: Annotated[
        str | None,
        Field(
            description='ErrImagePull, ImagePullBackOff, InvalidImageName or CommandFailed (the command did not exit 0).'
        ),
    ] = None
    message: Annotated[str | None, Field(description="The kubelet's message, clipped to 120 characters.")] = None


class FirstFailure1(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    node: Annotated[str | None, Field(description="The node's name.")] = None
    reason: Annotated[
        str | None,
        Field(description="The warmer's reason, e.g. NodeCacheNotDedicated, InsufficientCapacity, DigestMismatch."),
    ] = None
    message: Annotated[str | None, Field(description="The warmer's message (at most 120 characters).")] = None


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
            description='Branch, tag or commit to warm. It is resolved once to a commit for the whole fleet (status.resolved.commit); every cluster fetches that commit.',
            max_length=255,
            min_length=1,
            pattern='^\\S+$',
        ),
    ] = 'main'
    endpoint: Annotated[
        str | None,
        Field(
            description='Base URL of the Hub or of a mirror with the same API. The token is only ever sent to this host.',
            max_length=2048,
            pattern='^https?://[^\\s/?#]+(/[^\\s?#]*)?$',
        ),
    ] = 'https://huggingface.co'
    token_secret_ref: Annotated[
        TokenSecretRef | None,
        Field(
            alias='tokenSecretRef',
            description='Optional Secret in this namespace holding a Hugging Face token, for private or gated repositories. It is copied to a cluster only while a Job there needs it and never appears in any status.',
        ),
    ] = None


class HuggingFace1(BaseModel):
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
            description='Branch, tag or commit to warm. It is resolved once to a commit for the whole fleet (status.resolved.commit); every cluster fetches that commit.',
            max_length=255,
            min_length=1,
            pattern='^\\S+$',
        ),
    ] = 'main'
    endpoint: Annotated[
        str | None,
        Field(
            description='Base URL of the Hub or of a mirror with the same API. The token is only ever sent to this host.',
            max_length=2048,
            pattern='^https?://[^\\s/?#]+(/[^\\s?#]*)?$',
        ),
    ] = 'https://huggingface.co'
    token_secret_ref: Annotated[
        TokenSecretRef | None,
        Field(
            alias='tokenSecretRef',
            description='Optional Secret in this namespace holding a Hugging Face token, for private or gated repositories. It is copied to a cluster only while a Job there needs it and never appears in any status.',
        ),
    ] = None


class IgnorePattern(RootModel[str]):
    root: Annotated[
        str, Field(description='A glob over repository paths, e.g. "original/*".', max_length=256, min_length=1)
    ]


class Image(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    image: Annotated[
        str,
        Field(description="The image as the ModelCache's spec.images[].image names it.", max_length=512, min_length=1),
    ]
    digest: Annotated[
        str,
        Field(
            description='The manifest digest the fleet pinned; every node pulls <repository>@<digest>.',
            pattern='^sha256:[0-9a-f]{64}$',
        ),
    ]
    pull_policy: Annotated[
        Literal['IfNotPresent', 'Always', 'Never'] | None,
        Field(alias='pullPolicy', description="The kubelet's imagePullPolicy."),
    ] = 'IfNotPresent'
    pull_secret_ref: Annotated[
        PullSecretRef | None,
        Field(
            alias='pullSecretRef',
            description="Optional Secret in this namespace with the registry's credentials in Docker config JSON (a kubernetes.io/dockerconfigjson Secret, as kubectl create secret docker-registry makes): the resolve-images Job asks the registry for the digest with it, and each target cluster gets a copy the keeper pods pull with (imagePullSecrets). It never appears in any status. Unset: anonymous, or the nodes' own credentials.",
        ),
    ] = None
    command: Annotated[
        list[CommandItem] | None,
        Field(description='The safe command run once per node where the cluster has no image volumes.', max_length=32),
    ] = None
    args: Annotated[list[Arg] | None, Field(description='Arguments of the command.', max_length=64)] = None


class Image1(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    image: Annotated[str | None, Field(description='The image as spec.images[].image names it.')] = None
    digest: Annotated[str | None, Field(description='The pinned digest.')] = None
    ready_nodes: Annotated[
        StrictInt | None, Field(alias='readyNodes', description='Nodes holding this digest.', ge=0)
    ] = None


class Images(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    desired: Annotated[
        StrictInt | None, Field(description='Opted-in pool nodes that should hold every image.', ge=0)
    ] = None
    ready: Annotated[
        StrictInt | None, Field(description='Nodes holding every image, kept (the keeper pod is Ready).', ge=0)
    ] = None
    pulling: Annotated[
        StrictInt | None, Field(description='Nodes still pulling, waiting for a slot, or not yet reported.', ge=0)
    ] = None
    failed: Annotated[StrictInt | None, Field(description='Nodes where a pull or the command failed.', ge=0)] = None
    images: Annotated[list[Image1] | None, Field(description='Per image, the nodes that hold it.', max_length=8)] = None
    first_failure: Annotated[
        FirstFailure | None, Field(alias='firstFailure', description='The failed node with the smallest name, and why.')
    ] = None
    reason: Annotated[
        str | None,
        Field(
            description='Why the images stand where they do, e.g. ImagesWarm, ImagesPulling, ImagePullFailed, NodeTierNotConfigured, ImageCommandRequired.'
        ),
    ] = None
    message: Annotated[str | None, Field(description='What happened and the remedy.')] = None
    summary: Annotated[str | None, Field(description='ready out of desired, e.g. "3/4" (the IMAGES column).')] = None


class Job(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    backoff_limit: Annotated[
        StrictInt | None,
        Field(
            alias='backoffLimit',
            description='Retries of a failed agent pod before the Job fails (permanent exit codes fail it at once).',
            ge=0,
            le=100,
        ),
    ] = 3
    active_deadline_seconds: Annotated[
        StrictInt | None,
        Field(
            alias='activeDeadlineSeconds',
            description='Seconds an agent Job may run before Kubernetes stops it (reason DeadlineExceeded).',
            ge=60,
            le=604800,
        ),
    ] = 21600
    ttl_seconds_after_finished: Annotated[
        StrictInt | None,
        Field(
            alias='ttlSecondsAfterFinished',
            description='Seconds a finished agent Job is kept for inspection before Kubernetes deletes it.',
            ge=0,
            le=604800,
        ),
    ] = 3600


class KeepCommit(RootModel[str]):
    root: Annotated[
        str, Field(description='A commit to keep, spelled like spec.commit.', pattern='^((s3|oci|vol)-)?[0-9a-f]{40}$')
    ]


class Manifest(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    hugging_face: Annotated[
        HuggingFace1 | None,
        Field(
            alias='huggingFace',
            description='A model repository on the Hugging Face Hub or on a mirror that speaks the same HTTP API.',
        ),
    ] = None
    file: Annotated[
        str | None,
        Field(
            description="Path of the manifest file inside the volume (relative to the volume's root).",
            max_length=1024,
            min_length=1,
            pattern='^[^/\\s]\\S*$',
        ),
    ] = None


class Mirror(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    oci: Annotated[
        Oci1 | None,
        Field(
            description="The fleet's OCI registry: the publisher pushes the verified commit as a ModelPack artifact (one raw layer per file) by digest, tagged with the manifest digest; readers read its blobs."
        ),
    ] = None
    s3: Annotated[
        S31 | None,
        Field(
            description='The mirror bucket. Blobs are stored content-addressed (<prefix>/blobs/sha256/<hex>) and a manifest last, so a copy is complete only once its manifest exists; every byte read from it is verified against the manifest digest latched at resolve.'
        ),
    ] = None
    on_missing: Annotated[
        Literal['Origin', 'Fail'] | None,
        Field(
            alias='onMissing',
            description='What a reader does with a blob missing or corrupt in the mirror: Origin fetches that file from the source and re-publishes it; Fail ends the hydration with MirrorIncomplete.',
        ),
    ] = 'Origin'
    role: Annotated[
        Literal['Publisher', 'Reader'] | None,
        Field(description='Publisher fetches from the origin and publishes; Reader reads the published copy.'),
    ] = 'Reader'


class ModelCacheHydration(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    spec: Annotated[Spec, Field(description='The pinned snapshot to fetch and the cluster to fetch it on.')]
    status: Annotated[
        Status | None,
        Field(description="The hydration's state on its cluster, written by compose-model-cache-hydration."),
    ] = None
    api_version: Annotated[str | None, Field(alias='apiVersion')] = None
    kind: str | None = None
    metadata: Annotated[dict[str, Any] | None, Field(description='Kubernetes object metadata.')] = None


class NodeTier(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    phase: Annotated[
        Literal['Pending', 'Warming', 'Ready', 'Degraded', 'Failed', 'Evicted'] | None,
        Field(
            description='Pending (not configured, waiting for the volume, for room or for eligible nodes: see reason), Warming, Ready (every eligible node holds the commit), Degraded (some nodes failed), Failed (every node failed) or Evicted (the FleetCluster evicted this cache from its nodes; the volume stays).'
        ),
    ] = None
    commit: Annotated[str | None, Field(description='The commit the nodes are warmed with (spec.commit).')] = None
    claim_name: Annotated[
        str | None,
        Field(
            alias='claimName',
            description="The node PVC on the cluster (bound to the pool's hostPath PV); replicas mount it read-only.",
        ),
    ] = None
    label_key: Annotated[
        str | None,
        Field(
            alias='labelKey',
            description='The node label a warm node carries for this cache (value the commit); replicas are placed on it. Empty when the FleetCluster sets spec.nodeCache.labels None (no warm labels: anywhere in the pool).',
        ),
    ] = None
    desired_nodes: Annotated[
        StrictInt | None,
        Field(
            alias='desiredNodes',
            description="Eligible pool nodes (the warmer DaemonSet's desiredNumberScheduled).",
            ge=0,
        ),
    ] = None
    ready_nodes: Annotated[
        StrictInt | None,
        Field(
            alias='readyNodes',
            description="Nodes whose record says Ready on the commit, at most the DaemonSet's numberReady.",
            ge=0,
        ),
    ] = None
    downloading_nodes: Annotated[
        StrictInt | None, Field(alias='downloadingNodes', description='Nodes waiting for a copy slot or copying.', ge=0)
    ] = None
    failed_nodes: Annotated[
        StrictInt | None, Field(alias='failedNodes', description='Nodes whose copy failed.', ge=0)
    ] = None
    pending_nodes: Annotated[
        StrictInt | None, Field(alias='pendingNodes', description='Eligible nodes without a record yet.', ge=0)
    ] = None
    min_free_bytes: Annotated[
        StrictInt | None,
        Field(
            alias='minFreeBytes',
            description='The least free space any node reported on its cache filesystem; absent until reported.',
            ge=0,
        ),
    ] = None
    first_failure: Annotated[
        FirstFailure1 | None,
        Field(alias='firstFailure', description='The failed node with the smallest name, and why.'),
    ] = None
    reason: Annotated[
        str | None, Field(description='Why the node tier is in its phase, e.g. NodeTierNotConfigured, NoEligibleNodes.')
    ] = None
    message: Annotated[str | None, Field(description='What happened and the remedy.')] = None
    summary: Annotated[
        str | None, Field(description='readyNodes out of desiredNodes, e.g. "3/4" (the NODES column).')
    ] = None


class Oci(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    reference: Annotated[
        str,
        Field(
            description='The artifact, registry host first, by tag or by digest: registry.example.com/models/qwen3:v1 or registry.example.com/models/qwen3@sha256:<64 hex>. Docker Hub is docker.io/<namespace>/<name>; no tag means no default: "latest" is not assumed.',
            max_length=1024,
            min_length=5,
            pattern='^([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)+(:[0-9]{1,5})?|localhost(:[0-9]{1,5})?|[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?:[0-9]{1,5})/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})$',
        ),
    ]
    pull_secret_ref: Annotated[
        PullSecretRef | None,
        Field(
            alias='pullSecretRef',
            description='Optional Secret in this namespace with registry credentials in Docker config JSON (a kubernetes.io/dockerconfigjson Secret, as kubectl create secret docker-registry makes). It is copied to a cluster only while a Job there needs it, mounted as a file, and never appears in any status. Unset: anonymous.',
        ),
    ] = None
    plain_http: Annotated[
        StrictBool | None,
        Field(
            alias='plainHTTP',
            description='Speak plain HTTP to the registry instead of HTTPS (a registry on a trusted private network only: credentials would cross the network in the clear).',
        ),
    ] = False
    layout: Annotated[
        Literal['HfCache', 'Flat'] | None,
        Field(
            description='HfCache (default) stores the files like a Hub repo named oci/<host>/<repository> (the engine gets the snapshot directory in FLEETCACHE_MODEL); Flat keeps plain files, each commit in its own directory commits/<commit> on the volume (FLEETCACHE_MODEL), current -> the latest.'
        ),
    ] = 'HfCache'


class Oci1(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    repository: Annotated[
        str,
        Field(
            description="The artifact's repository, registry host first (the ModelCache names it).",
            max_length=1024,
            min_length=3,
            pattern='^([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)+(:[0-9]{1,5})?|localhost(:[0-9]{1,5})?|[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?:[0-9]{1,5})/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)*$',
        ),
    ]
    push_secret_ref: Annotated[
        PushSecretRef | None,
        Field(
            alias='pushSecretRef',
            description="The Secret in this namespace with push credentials in Docker config JSON; the ModelCache sets it on the publisher's hydration only.",
        ),
    ] = None
    plain_http: Annotated[
        StrictBool | None, Field(alias='plainHTTP', description='Speak plain HTTP to the mirror registry.')
    ] = False


class Progress(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    bytes_done: Annotated[
        StrictInt | None, Field(alias='bytesDone', description='Bytes verified and on disk.', ge=0)
    ] = None
    bytes_total: Annotated[
        StrictInt | None, Field(alias='bytesTotal', description='Bytes to fetch in total.', ge=0)
    ] = None
    files_done: Annotated[
        StrictInt | None, Field(alias='filesDone', description='Files verified and on disk.', ge=0)
    ] = None
    files_total: Annotated[
        StrictInt | None, Field(alias='filesTotal', description='Files to fetch in total.', ge=0)
    ] = None
    percent: Annotated[
        StrictInt | None,
        Field(description='bytesDone / bytesTotal as a whole percent, 0 to 100 (the PROGRESS column).', ge=0, le=100),
    ] = None


class PullSecretRef(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[
        str,
        Field(
            description="Name of the Secret, in the ModelCache's own namespace.",
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ]
    key: Annotated[
        str | None,
        Field(
            description="Key in the Secret's data that holds the Docker config JSON.",
            max_length=253,
            min_length=1,
            pattern='^[-._a-zA-Z0-9]+$',
        ),
    ] = '.dockerconfigjson'


class PushSecretRef(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[
        str,
        Field(
            description="Name of the Secret, in the hydration's own namespace.",
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ]
    key: Annotated[
        str | None,
        Field(
            description="Key in the Secret's data that holds the Docker config JSON.",
            max_length=253,
            min_length=1,
            pattern='^[-._a-zA-Z0-9]+$',
        ),
    ] = '.dockerconfigjson'


class Removal(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    since: Annotated[AwareDatetime, Field(description="When the cluster left the ModelCache's target set (RFC 3339).")]
    until: Annotated[
        AwareDatetime,
        Field(
            description="When the copy is removed unless a replica mounts it or it is pinned: the later of since and its last use, plus the ModelCache's spec.retention.afterRemoval (RFC 3339)."
        ),
    ]


class Resolved(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    commit: Annotated[str | None, Field(description='The commit on disk.')] = None
    manifest_digest: Annotated[
        str | None, Field(alias='manifestDigest', description='Digest of the file list on disk.')
    ] = None
    bytes: Annotated[StrictInt | None, Field(description='Bytes on disk.', ge=0)] = None


class Retention(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    pinned: Annotated[
        StrictBool | None,
        Field(
            description="Keeps this copy against eviction while it has not lapsed (it still counts toward the cluster's usage)."
        ),
    ] = False
    ttl_after_last_use: Annotated[
        str | None,
        Field(
            alias='ttlAfterLastUse',
            description='Hours after the last replica stopped mounting this copy (or after it became Ready, if later) until it lapses: it is then unpinned, evicted first, and not re-warmed until a replica is placed on this cluster again, e.g. 72h. Unset: the copy never lapses.',
            max_length=7,
            pattern='^[1-9][0-9]{0,5}h$',
        ),
    ] = None


class S3(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    bucket: Annotated[
        str,
        Field(
            description="The bucket's name.", max_length=63, min_length=3, pattern='^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$'
        ),
    ]
    prefix: Annotated[
        str | None,
        Field(
            description='Folder in the bucket, without a leading "/"; empty means the whole bucket.',
            max_length=1024,
            pattern='^$|^[^/\\s]\\S*$',
        ),
    ] = ''
    region: Annotated[
        str | None,
        Field(description="The bucket's region.", max_length=64, min_length=1, pattern='^[a-z0-9][-a-z0-9]{0,62}$'),
    ] = 'us-east-1'
    endpoint: Annotated[
        str | None,
        Field(
            description='Base URL of an S3-compatible store (MinIO, Ceph, R2, ...); unset means AWS S3. Requests to it use path-style addressing.',
            max_length=2048,
            pattern='^https?://[^\\s/?#]+(/[^\\s?#]*)?$',
        ),
    ] = None
    credentials_secret_ref: Annotated[
        CredentialsSecretRef | None,
        Field(
            alias='credentialsSecretRef',
            description="Optional Secret in this namespace with the access key pair. It is copied to a cluster only while a Job there needs it, mounted as files, and never appears in any status. Unset: the cluster's own identity (IRSA, instance profile), or anonymous for a public bucket.",
        ),
    ] = None
    layout: Annotated[
        Literal['HfCache', 'Flat'] | None,
        Field(
            description='HfCache (default) stores the files like a Hub repo named s3/<bucket>/<prefix> (the engine gets the snapshot directory in FLEETCACHE_MODEL); Flat keeps plain files, each commit in its own directory commits/<commit> on the volume (FLEETCACHE_MODEL), current -> the latest.'
        ),
    ] = 'HfCache'


class S31(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    bucket: Annotated[
        str,
        Field(
            description="The bucket's name.", max_length=63, min_length=3, pattern='^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$'
        ),
    ]
    prefix: Annotated[
        str | None,
        Field(
            description="Folder in the bucket for the mirror's blobs and manifests.",
            max_length=1024,
            pattern='^$|^[^/\\s]\\S*$',
        ),
    ] = 'fleetcache'
    region: Annotated[
        str | None,
        Field(description="The bucket's region.", max_length=64, min_length=1, pattern='^[a-z0-9][-a-z0-9]{0,62}$'),
    ] = 'us-east-1'
    endpoint: Annotated[
        str | None,
        Field(
            description='Base URL of an S3-compatible store (MinIO, Ceph, R2, ...); unset means AWS S3. Requests to it use path-style addressing.',
            max_length=2048,
            pattern='^https?://[^\\s/?#]+(/[^\\s?#]*)?$',
        ),
    ] = None
    credentials_secret_ref: Annotated[
        CredentialsSecretRef | None,
        Field(
            alias='credentialsSecretRef',
            description="Optional Secret in this namespace with the access key pair. It is copied to a cluster only while a Job there needs it, mounted as files, and never appears in any status. Unset: the cluster's own identity (IRSA, instance profile), or anonymous for a public bucket.",
        ),
    ] = None


class Source(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    hugging_face: Annotated[
        HuggingFace | None,
        Field(
            alias='huggingFace',
            description='A model repository on the Hugging Face Hub or on a mirror that speaks the same HTTP API.',
        ),
    ] = None
    s3: Annotated[
        S3 | None,
        Field(
            description="Objects under a prefix of an S3 bucket (or of an S3-compatible store). Resolve pins each object once for the fleet (versionId, else ETag, and a sha256 from S3's checksum or read once); every cluster fetches exactly those versions and verifies every byte."
        ),
    ] = None
    oci: Annotated[
        Oci | None,
        Field(
            description="A model in an OCI registry: a ModelPack artifact (application/vnd.cncf.model.* media types, or the older vnd.cnai.model.*) or an image whose layers hold the model's files. Resolve pins the manifest digest once for the fleet (a tag resolves like a branch) and each file's sha256 from the layer descriptors; every cluster fetches exactly those blobs and verifies every byte."
        ),
    ] = None
    volume: Annotated[
        Volume | None,
        Field(
            description='An existing PVC of this name, filled by someone else, on every target cluster. Nothing is downloaded: the agent verifies its files against a manifest and the cluster is Ready only if every byte matches. fleetcache never creates, resizes or deletes the claim.'
        ),
    ] = None
    allow_patterns: Annotated[
        list[AllowPattern] | None,
        Field(
            alias='allowPatterns',
            description='Only files matching at least one of these globs are fetched (huggingface_hub allow_patterns semantics). Empty or unset means every file.',
            max_length=64,
        ),
    ] = None
    ignore_patterns: Annotated[
        list[IgnorePattern] | None,
        Field(
            alias='ignorePatterns',
            description='Files matching any of these globs are skipped, even if an allow pattern matches (huggingface_hub ignore_patterns semantics).',
            max_length=64,
        ),
    ] = None


class Spec(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    cluster_name: Annotated[
        str,
        Field(
            alias='clusterName',
            description='The FleetCluster to warm; its status.providerConfigName reaches the cluster.',
            max_length=63,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$',
        ),
    ]
    model_cache_name: Annotated[
        str,
        Field(
            alias='modelCacheName',
            description='The owning ModelCache, in the same namespace; the remote PVC and other names derive from it.',
            max_length=63,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$',
        ),
    ]
    source: Annotated[Source, Field(description='Where the weights come from and which files to take.')]
    commit: Annotated[
        str,
        Field(
            description="The commit the ModelCache resolved (40 hex for the Hub; s3- or vol- and 40 hex for an S3 prefix or a volume's manifest file); the agent fetches exactly this.",
            pattern='^((s3|oci|vol)-)?[0-9a-f]{40}$',
        ),
    ]
    keep_commits: Annotated[
        list[KeepCommit] | None,
        Field(
            alias='keepCommits',
            description='Commits the volume keeps besides spec.commit and those its replicas mount: the ModelCache writes the previous commit here while a rollout in waves is in flight, so a rollback finds it still on the volume. A prune never removes them.',
            max_length=4,
        ),
    ] = None
    manifest_digest: Annotated[
        str | None,
        Field(
            alias='manifestDigest',
            description="Digest of the resolved file list; the agent's result must match it.",
            max_length=128,
        ),
    ] = None
    bytes: Annotated[StrictInt | None, Field(description='Resolved bytes of the selected files.', ge=0)] = None
    storage: Annotated[Storage, Field(description='The cache volume on this cluster.')]
    mirror: Annotated[
        Mirror | None,
        Field(
            description='A fleet mirror in an S3-compatible bucket or an OCI registry: the first cluster by name fetches each commit from the origin and publishes it; the others wait for it and read the mirror, so the origin is read once per fleet.'
        ),
    ] = None
    tier: Annotated[
        Literal['Volume', 'Node'] | None,
        Field(
            description="The ModelCache's spec.storage.tier. Node also warms every opted-in pool node of the cluster (FleetCluster spec.nodeCache) from the verified volume, once the volume is Ready; see status.nodeTier."
        ),
    ] = 'Volume'
    node_pool: Annotated[
        str | None,
        Field(
            alias='nodePool',
            description="The ModelCache's spec.storage.nodePool: the pool of the FleetCluster (its spec.nodePools[] entry, or spec.nodeCache for default) whose nodes a Node tier warms.",
            max_length=63,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?$',
        ),
    ] = 'default'
    images: Annotated[
        list[Image] | None,
        Field(
            description="The ModelCache's spec.images, each with the digest the fleet pinned: kept on every opted-in node of spec.nodePool; see status.images.",
            max_length=8,
        ),
    ] = None
    job: Annotated[
        Job | None,
        Field(
            description='Limits of the agent Jobs (resolve and hydrate) on the target clusters.', validate_default=True
        ),
    ] = {}
    agent: Annotated[
        Agent | None, Field(description='Optional tuning of the fetching agent, copied from the ModelCache.')
    ] = None
    retention: Annotated[
        Retention | None,
        Field(description="How long this copy is kept against eviction, copied from the ModelCache's spec.retention."),
    ] = None
    removal: Annotated[
        Removal | None,
        Field(
            description='Set by the ModelCache only when this cluster left its placement: the copy keeps serving what it holds, never starts a new fetch and is never admitted anew.'
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
    phase: Annotated[
        Literal['Pending', 'Hydrating', 'Ready', 'Failed', 'Evicted'] | None,
        Field(
            description='Pending (volume not Bound, Job not started, or waiting for room on the cluster: reason CapacityLow), Hydrating (Job running), Ready (Job complete; latched), Failed (permanent failure; see reason and message) or Evicted (the FleetCluster evicted this unpinned, unmounted copy to get under its low watermark; the volume is deleted until a replica is placed on the cluster again).'
        ),
    ] = None
    progress: Annotated[Progress | None, Field(description="The agent's last progress record.")] = None
    reason: Annotated[
        str | None,
        Field(description='Machine-readable reason of the phase, e.g. ClusterNotReady, AuthFailed, DigestMismatch.'),
    ] = None
    message: Annotated[str | None, Field(description='What happened and the remedy.')] = None
    resolved: Annotated[Resolved | None, Field(description='What the agent reported fetching, once it did.')] = None
    volume_name: Annotated[
        str | None,
        Field(
            alias='volumeName',
            description='Name of the cache PVC on the cluster (in the namespace named like this one).',
        ),
    ] = None
    volume_uid: Annotated[
        str | None,
        Field(
            alias='volumeUID',
            description='The metadata.uid of the cache PVC this status speaks of, as provider-kubernetes last saw it; absent for an existing volume (spec.source.volume). A PVC with another uid, or none, was deleted and created again empty: the Ready phase and servingCommit are dropped and the copy is fetched again (reason VolumeReplaced).',
        ),
    ] = None
    serving_commit: Annotated[
        str | None,
        Field(
            alias='servingCommit',
            description="The last commit that reached Ready on this cluster's volume; empty until the first Ready. Latched: kept while a newer spec.commit hydrates or fails, because its snapshot stays on the volume, so replicas keep mounting it until the new commit is Ready.",
        ),
    ] = None
    serving_manifest_digest: Annotated[
        str | None,
        Field(
            alias='servingManifestDigest', description="Digest of servingCommit's file list, as verified on the volume."
        ),
    ] = None
    serving_repo: Annotated[
        str | None,
        Field(
            alias='servingRepo',
            description='The repository servingCommit belongs to; ModelCache offers servingCommit to replicas only while it still serves this repository.',
        ),
    ] = None
    stored_commits: Annotated[
        list[str] | None,
        Field(
            alias='storedCommits',
            description='Commits of servingRepo whose snapshots this hydration put on the volume and has not pruned yet, by commit (at most 16).',
            max_length=16,
        ),
    ] = None
    pruned_commits: Annotated[
        list[str] | None,
        Field(
            alias='prunedCommits',
            description='The commits the last prune removed from the volume, by commit (at most 16): commits no ModelReplica of this cache on this cluster mounted any more.',
            max_length=16,
        ),
    ] = None
    used_bytes: Annotated[
        StrictInt | None,
        Field(
            alias='usedBytes',
            description="Bytes in use on the volume's filesystem (reserved blocks count as used), as the agent last measured them; absent until measured, 0 is a measurement.",
            ge=0,
        ),
    ] = None
    capacity_bytes: Annotated[
        StrictInt | None,
        Field(
            alias='capacityBytes',
            description="Size of the volume's filesystem as the agent last measured it; absent until measured.",
            ge=0,
        ),
    ] = None
    used_human: Annotated[
        str | None, Field(alias='usedHuman', description='usedBytes, human readable, e.g. "1.2GiB" (the USED column).')
    ] = None
    mounted_by: Annotated[
        StrictInt | None,
        Field(
            alias='mountedBy',
            description='How many ModelReplicas of this cache on this cluster mount this volume now (delivery Cache); absent while the replicas are not known (read as mounted).',
            ge=0,
        ),
    ] = None
    placed_replicas: Annotated[
        StrictInt | None,
        Field(
            alias='placedReplicas',
            description='How many ModelReplicas of this cache are placed on this cluster, whatever their delivery; a copy with one placed is never evicted, and an evicted copy is warmed again. Absent while not known.',
            ge=0,
        ),
    ] = None
    last_used_time: Annotated[
        AwareDatetime | None,
        Field(
            alias='lastUsedTime',
            description='The last hour a replica mounted this copy (RFC 3339, truncated to the hour); absent if none ever did.',
        ),
    ] = None
    ready_time: Annotated[
        AwareDatetime | None,
        Field(
            alias='readyTime',
            description='The hour this copy first became Ready (RFC 3339, truncated to the hour); with lastUsedTime, where spec.retention.ttlAfterLastUse counts from.',
        ),
    ] = None
    pinned: Annotated[
        StrictBool | None,
        Field(description='spec.retention.pinned while the copy has not lapsed; a pinned copy is never evicted.'),
    ] = None
    bytes_from: Annotated[
        Literal['Origin', 'Mirror', 'Volume'] | None,
        Field(
            alias='bytesFrom',
            description='Where the bytes of the last fetch came from (Origin, the fleet Mirror, or an existing Volume).',
        ),
    ] = None
    origin_bytes: Annotated[
        StrictInt | None,
        Field(alias='originBytes', description="Bytes the last fetch read from the origin (the agent's record).", ge=0),
    ] = None
    mirror_bytes: Annotated[
        StrictInt | None,
        Field(
            alias='mirrorBytes',
            description="Bytes the last fetch read from the fleet mirror (the agent's record).",
            ge=0,
        ),
    ] = None
    artifact: Annotated[
        Artifact | None,
        Field(
            description="The ModelPack artifact this copy was published as, or read from (spec.mirror.oci), by digest (the agent's record)."
        ),
    ] = None
    lapsed: Annotated[
        StrictBool | None,
        Field(
            description='No replica has used this copy for spec.retention.ttlAfterLastUse: it is unpinned and evicted first. Latched until a replica of this cache is placed on this cluster again.'
        ),
    ] = None
    images: Annotated[
        Images | None,
        Field(
            description="With spec.images only: the pool nodes holding the pinned images, from the keeper DaemonSet's observed status and the summary its reporter writes."
        ),
    ] = None
    node_tier: Annotated[
        NodeTier | None,
        Field(
            alias='nodeTier',
            description="Tier Node only (absent for Volume): the copies on the cluster's pool nodes, from the warmer DaemonSet's observed status and the per-node records its pods write. Independent of phase, which stays the volume's.",
        ),
    ] = None
    conditions: Annotated[list[dict[str, Any]] | None, Field(description='Conditions, written by Crossplane.')] = None
    crossplane: Annotated[dict[str, Any] | None, Field(description="Crossplane's own status.")] = None


class Storage(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    size: Annotated[
        str,
        Field(
            description='Requested size of the cache volume (the PVC), e.g. 20Gi; always set by the ModelCache.',
            max_length=32,
            pattern='^([1-9][0-9]*(\\.[0-9]+)?|0\\.[0-9]*[1-9][0-9]*)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$',
        ),
    ]
    storage_class_name: Annotated[
        str | None,
        Field(
            alias='storageClassName',
            description="StorageClass of the cache volume; when unset, the FleetCluster's spec.cache.storageClassName.",
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ] = None
    access_mode: Annotated[
        Literal['ReadWriteMany', 'ReadWriteOnce'] | None,
        Field(
            alias='accessMode',
            description="Access mode of the cache volume; when unset, the FleetCluster's spec.cache.accessMode.",
        ),
    ] = None


class TokenSecretRef(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[
        str,
        Field(
            description="Name of the Secret, in the ModelCache's own namespace.",
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ]
    key: Annotated[
        str | None,
        Field(
            description="Key in the Secret's data that holds the token.",
            max_length=253,
            min_length=1,
            pattern='^[-._a-zA-Z0-9]+$',
        ),
    ] = 'HF_TOKEN'


class Volume(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    claim_name: Annotated[
        str,
        Field(
            alias='claimName',
            description="Name of the PVC, in the namespace named like the ModelCache's on each cluster.",
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ]
    sub_path: Annotated[
        str | None,
        Field(
            alias='subPath',
            description="Directory inside the volume that holds the model's files; empty means its root.",
            max_length=1024,
            pattern='^$|^[^/\\s]\\S*$',
        ),
    ] = ''
    manifest: Annotated[
        Manifest | None,
        Field(
            description='What the files must be: the Hub listing of a pinned repo revision (huggingFace), or a manifest file shipped in the volume (file: a JSON list of {path, size, sha256} relative to subPath). Unset means file .fleetcache/manifest.json.'
        ),
    ] = None