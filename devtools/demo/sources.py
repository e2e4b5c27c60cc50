"""`fleetcache demo`, sources beyond the Hub and the fleet mirror (issue 12).

Played after the second tenant, in its own namespace under its own grant:
1. a ModelCache from an S3 prefix (an S3 API server on loopback: moto's, as in the tests)
   with a credentials Secret: every byte the clusters hold hashes to the resolved manifest;
2. a ModelCache from an existing volume, filled by hand on three clusters before it is
   applied, one of them with a file changed: two are Ready with nothing downloaded, the third
   Failed with SourceVolumeMismatch naming the file;
3. a Hub ModelCache through a fleet mirror (a second bucket) over all five clusters: the
   first cluster by name reads the Hub and publishes, the other four read the mirror; the Hub
   serves the model about once (printed against the model's size), each cluster says where
   its bytes came from, and each one's re-verified manifest digest is the resolved one.
   (gpu-west-2's broken proxy is out of the path in this act: the origin counted is the one
   hub every cluster reaches.)
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from fleetcache.agent.verify import verify as verify_volume
from fleetcache.devtools.simulation import Cluster, ControlPlane
from fleetcache.devtools.testhub.content import iter_content, make_model
from fleetcache.devtools.testhub.server import TestHub
from fleetcache.functions import naming, quantities, read

NAMESPACE = "sources"
GRANT = "sources"
BUCKET, MIRROR_BUCKET, PREFIX = "weights", "fleet-mirror", "chat/v1"
CLAIM, SUB_PATH = "preloaded", "chat"
ACCESS_KEY, SECRET_KEY = "demo-access-key-id", "demo-secret-access-key"
S3_CACHE, VOLUME_CACHE, MIRROR_CACHE = "s3-chat", "volume-chat", "mirror-chat"
MIRROR_REPO = "fleetcache-demo/mirror-chat"
STORAGE = {"size": "64Mi"}  # small volumes: the act shares clusters whose capacity is set
SHARE = 0.25  # of the demo model's size, per model of this act
ACT_SECONDS = 240.0  # a hang guard, as the demo's deadlines


class S3Store:
    """An S3 API server on loopback (moto's server mode): a bucket per origin and mirror."""

    def __enter__(self) -> S3Store:
        import boto3
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
        self.server = ThreadedMotoServer("127.0.0.1", 0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self.client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                                   aws_access_key_id=ACCESS_KEY,
                                   aws_secret_access_key=SECRET_KEY)
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop()

    def make_bucket(self, name: str) -> None:
        self.client.create_bucket(Bucket=name)

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=bucket, Key=key, Body=data, ChecksumAlgorithm="SHA256")

    def stored_bytes(self, bucket: str) -> int:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return sum(o["Size"] for page in pages for o in page.get("Contents", []))


# --- what the act applies -------------------------------------------------------------------


def grant(clusters: Iterable[str]) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCacheGrant",
            "metadata": {"name": GRANT, "namespace": NAMESPACE},
            "spec": {"clusters": {"clusterNames": sorted(clusters)}, "quota": {"bytes": "8Gi"}}}


def credentials_secret() -> dict:
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s3-keys", "namespace": NAMESPACE},
            "data": {k: base64.b64encode(v.encode()).decode()
                     for k, v in (("AWS_ACCESS_KEY_ID", ACCESS_KEY),
                                  ("AWS_SECRET_ACCESS_KEY", SECRET_KEY))}}


def cache(name: str, source: dict, clusters: Iterable[str], **spec: dict) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"grantRef": {"name": GRANT}, "source": source,
                     "placement": {"clusterNames": sorted(clusters)}, "storage": STORAGE,
                     **spec}}


def s3_cache(endpoint: str, clusters: Iterable[str]) -> dict:
    return cache(S3_CACHE, {"s3": {"bucket": BUCKET, "prefix": PREFIX, "endpoint": endpoint,
                                   "credentialsSecretRef": {"name": "s3-keys"}}}, clusters)


def volume_cache(clusters: Iterable[str]) -> dict:
    return cache(VOLUME_CACHE, {"volume": {"claimName": CLAIM, "subPath": SUB_PATH}}, clusters)


def mirror_cache(name: str, repo: str, hub_endpoint: str, clusters: Iterable[str],
                 mirror_endpoint: str | None) -> dict:
    """A Hub ModelCache, through the fleet mirror when mirror_endpoint is given."""
    spec = {}
    if mirror_endpoint:
        spec["distribution"] = {"mirror": {"s3": {
            "bucket": MIRROR_BUCKET, "endpoint": mirror_endpoint,
            "credentialsSecretRef": {"name": "s3-keys"}}}}
    return cache(name, {"huggingFace": {"repo": repo, "endpoint": hub_endpoint}}, clusters,
                 **spec)


def manifest_of(files: dict[str, bytes]) -> list[dict]:
    return [{"path": p, "size": len(b), "sha256": hashlib.sha256(b).hexdigest()}
            for p, b in sorted(files.items())]


def fill_volume(cluster: Cluster, files: dict[str, bytes]) -> Path:
    """What someone filled by hand: the files under subPath, the manifest at the root."""
    root = cluster.volume_dir(NAMESPACE, CLAIM)
    for path, data in files.items():
        (root / SUB_PATH / path).parent.mkdir(parents=True, exist_ok=True)
        (root / SUB_PATH / path).write_bytes(data)
    (root / ".fleetcache").mkdir(parents=True, exist_ok=True)
    (root / ".fleetcache" / "manifest.json").write_text(json.dumps(manifest_of(files)))
    return root


def model_files(size: int, seed: int) -> dict[str, bytes]:
    return {path: b"".join(bytes(block) for block in iter_content(content))
            for path, content in make_model(size, shards=2, seed=seed).items()}


# --- reading the fleet ----------------------------------------------------------------------


def status_of(control: ControlPlane, name: str) -> dict:
    return control.xrs.get(("ModelCache", NAMESPACE, name), {}).get("status", {})


def hydration_of(control: ControlPlane, name: str, cluster: str) -> dict:
    return next((h for h in control.of_kind("ModelCacheHydration")
                 if h["spec"]["modelCacheName"] == name and h["spec"]["clusterName"] == cluster
                 and h["metadata"]["namespace"] == NAMESPACE), {})


def phases(control: ControlPlane, name: str, clusters: Iterable[str]) -> dict[str, str]:
    return {c: read.get_path(hydration_of(control, name, c), "status.phase", "") for c in clusters}


def settled(control: ControlPlane, name: str, clusters: Iterable[str]) -> bool:
    """Every cluster's hydration of the resolved commit Ready or Failed."""
    commit = read.get_path(status_of(control, name), "resolved.commit")
    return bool(commit) and all(
        read.get_path(hydration_of(control, name, c), "spec.commit") == commit
        and read.get_path(hydration_of(control, name, c), "status.phase") in ("Ready", "Failed")
        for c in clusters)


def settle(stage, name: str, clusters: Iterable[str]) -> str:
    """Rounds until every cluster's hydration settled, then one more, in which the ModelCache
    reads what its hydrations reported last (it reconciles before them in a pass)."""
    problem = stage.until(lambda: settled(stage.control, name, clusters), f"{name} to settle")
    if not problem:
        stage.round()
    return problem


def reverified_digests(clusters: dict[str, Cluster], name: str, repo: str, commit: str
                       ) -> dict[str, str]:
    """Each cluster's volume re-hashed by the agent's verify: the manifest digest it holds."""
    found = {}
    for cluster_name, cluster in sorted(clusters.items()):
        volume = cluster.volume_dir(NAMESPACE, naming.cache_volume_name(name))
        try:
            found[cluster_name] = verify_volume(volume, repo, commit)["manifestDigest"]
        except Exception as err:  # noqa: BLE001 - reported as the problem it is
            found[cluster_name] = f"not verified ({type(err).__name__}: {err})"
    return found


# --- the act --------------------------------------------------------------------------------


def play(stage, hub: TestHub, out: Callable[[str], None]) -> list[str]:
    """The three caches above on `stage`'s fleet; the problems found ([] when the act holds).
    The act has its own time budget (ACT_SECONDS): the acts after it keep the time they had."""
    started = time.monotonic()
    try:
        return play_act(dataclasses.replace(stage, deadline=started + ACT_SECONDS), hub, out)
    finally:
        stage.deadline += time.monotonic() - started


def play_act(stage, hub: TestHub, out: Callable[[str], None]) -> list[str]:
    names = sorted(stage.clusters)
    size = max(1 << 20, int(stage.model_bytes * SHARE))
    proxies = {n: c.endpoint_override for n, c in stage.clusters.items() if c.endpoint_override}
    with S3Store() as s3:
        s3.make_bucket(BUCKET)
        s3.make_bucket(MIRROR_BUCKET)
        stage.control.apply(grant(names))
        stage.control.apply(credentials_secret())
        problems = s3_act(stage, s3, names[:2], size, out)
        problems += volume_act(stage, names[:3], size, out)
        try:  # every cluster reaches the Hub itself: the origin counted is the one hub
            for name in proxies:
                stage.clusters[name].endpoint_override = None
            problems += mirror_act(stage, s3, (hub,), names, size, out)
        finally:
            for name, endpoint in proxies.items():
                stage.clusters[name].endpoint_override = endpoint
    return problems


def s3_act(stage, s3: S3Store, clusters: list[str], size: int, out) -> list[str]:
    files = model_files(size, seed=21)
    for path, data in files.items():
        s3.put(BUCKET, f"{PREFIX}/{path}", data)
    stage.control.apply(s3_cache(s3.endpoint, clusters))
    out(f"\nsources, act 1: ModelCache {S3_CACHE} from s3://{BUCKET}/{PREFIX} "
        f"({quantities.human_bytes(sum(map(len, files.values())))}, credentials from Secret s3-keys) "
        f"on {', '.join(clusters)}")
    problem = settle(stage, S3_CACHE, clusters)
    if problem:
        return [problem]
    resolved = status_of(stage.control, S3_CACHE)["resolved"]
    digests = reverified_digests({c: stage.clusters[c] for c in clusters}, S3_CACHE,
                                 resolved["repo"], resolved["commit"])
    out(f"  resolved {resolved['commit'][:16]} ({resolved['files']} files pinned by ETag, "
        f"digest {resolved['manifestDigest'][:12]}); re-verified: "
        + ", ".join(f"{c} {d[:12]}" for c, d in digests.items()))
    return [f"{S3_CACHE} on {c}: {p}" for c, p in phases(stage.control, S3_CACHE,
                                                         clusters).items() if p != "Ready"] + \
        [f"{S3_CACHE} on {c}: digest {d}" for c, d in digests.items()
         if d != resolved["manifestDigest"]]


def volume_act(stage, clusters: list[str], size: int, out) -> list[str]:
    files = model_files(size, seed=22)
    corrupted_on, corrupted = clusters[-1], sorted(files)[0]
    for name in clusters:
        root = fill_volume(stage.clusters[name], files)
        if name == corrupted_on:
            (root / SUB_PATH / corrupted).write_bytes(b"edited by hand")
    stage.control.apply(volume_cache(clusters))
    out(f"\nsources, act 2: ModelCache {VOLUME_CACHE} from PVC {CLAIM} (filled by hand, "
        f"{SUB_PATH}/ and .fleetcache/manifest.json) on {', '.join(clusters)}; on "
        f"{corrupted_on} someone changed {corrupted}")
    problem = settle(stage, VOLUME_CACHE, clusters)
    if problem:
        return [problem]
    problems = []
    for name in clusters:
        status = hydration_of(stage.control, VOLUME_CACHE, name).get("status", {})
        said = status.get("message", "")
        said = said[said.find("do not match"):].split(". ")[0] if "do not match" in said else ""
        out(f"  {name}: {status.get('phase')} {status.get('reason')} (bytesFrom "
            f"{status.get('bytesFrom')}, volume {status.get('volumeName')})"
            + (f": files {said}" if said else ""))
        want = ("Failed", "SourceVolumeMismatch") if name == corrupted_on else ("Ready", "Hydrated")
        if (status.get("phase"), status.get("reason")) != want:
            problems.append(f"{VOLUME_CACHE} on {name}: {status.get('phase')}/"
                            f"{status.get('reason')}, expected {'/'.join(want)}")
        if name == corrupted_on and corrupted not in status.get("message", ""):
            problems.append(f"{VOLUME_CACHE} on {name}: the mismatch does not name {corrupted}")
    return problems


def mirror_act(stage, s3: S3Store, hubs: tuple[TestHub, ...], clusters: list[str], size: int,
               out) -> list[str]:
    files = make_model(size, shards=2, seed=23)
    for hub in hubs:
        hub.add_repo(MIRROR_REPO, dict(files))
    model_bytes = sum(c.size for c in files.values())
    before = sum(hub.bytes_sent(repo=MIRROR_REPO) for hub in hubs)
    stage.control.apply(mirror_cache(MIRROR_CACHE, MIRROR_REPO, hubs[0].endpoint, clusters,
                                     s3.endpoint))
    out(f"\nsources, act 3: ModelCache {MIRROR_CACHE} ({MIRROR_REPO}, "
        f"{quantities.human_bytes(model_bytes)}) on all {len(clusters)} clusters through the fleet "
        f"mirror s3://{MIRROR_BUCKET}")
    problem = settle(stage, MIRROR_CACHE, clusters)
    if problem:
        return [problem]
    origin = sum(hub.bytes_sent(repo=MIRROR_REPO) for hub in hubs) - before  # not other acts' retries
    status = status_of(stage.control, MIRROR_CACHE)
    resolved = status["resolved"]
    digests = reverified_digests({c: stage.clusters[c] for c in clusters}, MIRROR_CACHE,
                                 MIRROR_REPO, resolved["commit"])
    out(f"  publisher {status['mirror']['publisher']}; the Hub served "
        f"{quantities.human_bytes(origin)} for a {quantities.human_bytes(model_bytes)} model "
        f"({origin / model_bytes:.2f}x, listings included; without a mirror each of the "
        f"{len(clusters)} clusters reads it once, {len(clusters)}x); "
        f"the mirror holds {quantities.human_bytes(s3.stored_bytes(MIRROR_BUCKET))}")
    rows = {r["name"]: r for r in status.get("clusters", [])}
    problems = []
    for name in clusters:
        hydration = hydration_of(stage.control, MIRROR_CACHE, name).get("status", {})
        out(f"  {name}: {hydration.get('phase')}, bytesFrom {rows.get(name, {}).get('bytesFrom')} "
            f"(origin {quantities.human_bytes(hydration.get('originBytes', 0))}, mirror "
            f"{quantities.human_bytes(hydration.get('mirrorBytes', 0))}), manifest digest "
            f"{digests[name][:12]} (resolved {resolved['manifestDigest'][:12]})")
        if hydration.get("phase") != "Ready" or digests[name] != resolved["manifestDigest"]:
            problems.append(f"{MIRROR_CACHE} on {name}: {hydration.get('phase')}, digest "
                            f"{digests[name]}")
    if origin > 1.05 * model_bytes:
        problems.append(f"{MIRROR_CACHE}: the Hub served {origin} bytes, more than 1.05x the "
                        f"{model_bytes}-byte model")
    return problems
