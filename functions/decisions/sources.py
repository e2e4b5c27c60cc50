"""Where the weights come from: each kind of spec.source (huggingFace, s3, oci, volume) as the
composers need it — what is resolved and how (resolve Job arguments, the claim it mounts),
what a hydration runs (fetch, or verify of an existing volume), which Secret a Job needs
(copied to the cluster only while the Job runs, mounted as files, never read here: the copy
and the mounts are functions/k8s/job_mounts.py's), the digest that says "the source changed,
resolve again", and the pinned manifest an S3 prefix, an OCI artifact or a volume's manifest
file resolves to (contract §D).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetcache.functions import naming, protocol, read
from fleetcache.functions.k8s import agent_job
from fleetcache.functions.k8s.job_mounts import DOCKER_CONFIG_KEY, MANIFEST_FILE, SOURCE_MOUNT_PATH, SecretRef
from fleetcache.functions.views.model_cache import MANIFEST_LIMIT, read_manifest
from fleetcache.manifest import SHA256, Entry, manifest_digest
from fleetcache.volume import oci_repo

HUGGING_FACE, S3, OCI, VOLUME = "huggingFace", "s3", "oci", "volume"
KINDS = (HUGGING_FACE, S3, OCI, VOLUME)
CREDENTIALS_MOUNT_PATH = "/var/run/secrets/fleetcache/s3"
REGISTRY_MOUNT_PATH = "/var/run/secrets/fleetcache/registry"
REGISTRY_CONFIG_FILE = "config.json"  # the Docker config JSON, as the agent's --registry-config reads it
MIRROR_CREDENTIALS_MOUNT_PATH = "/var/run/secrets/fleetcache/mirror"
DEFAULT_MANIFEST_FILE = ".fleetcache/manifest.json"
ACCESS_KEY_ID, SECRET_ACCESS_KEY = "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"


def normalized(source: Mapping) -> dict:
    """A spec's `source` read through its model, normalized to what is fetched: the one kind
    set (with its defaults) and both pattern lists (empty when unset)."""
    kind = next(k for k in KINDS if k in source)  # the XRD's CEL rule: exactly one
    return {kind: dict(source[kind]), "allowPatterns": list(source.get("allowPatterns", [])),
            "ignorePatterns": list(source.get("ignorePatterns", []))}


@dataclass(frozen=True)
class Source:
    kind: str
    fields: dict
    allow: tuple[str, ...]
    ignore: tuple[str, ...]

    @classmethod
    def of(cls, source: Mapping) -> Source:
        """From a source normalized by read()."""
        kind = next(k for k in KINDS if k in source)
        return cls(kind, dict(source[kind]), tuple(source.get("allowPatterns", ())),
                   tuple(source.get("ignorePatterns", ())))

    # -- what it is ------------------------------------------------------------------------

    @property
    def hub(self) -> dict | None:
        """The Hub coordinates resolve lists: the source itself, or the listing an existing
        volume is checked against (volume.manifest.huggingFace)."""
        if self.kind == HUGGING_FACE:
            return self.fields
        if self.kind == VOLUME:
            return read.mapping_at(self.fields, "manifest").get("huggingFace")
        return None

    @property
    def pinned_manifest(self) -> bool:
        """Resolve pins a manifest the ModelCache latches (an S3 prefix, an OCI artifact, a
        volume's file)."""
        return self.hub is None

    @property
    def manifest_file(self) -> str:
        return read.mapping_at(self.fields, "manifest").get("file") or DEFAULT_MANIFEST_FILE

    @property
    def repo(self) -> str:
        """The repository name the volume's layout uses (contract §C: s3/<bucket>/<prefix>,
        oci/<host>/<repository> as volume.oci_repo names it); "" for an existing volume
        checked against a file, which is served in place."""
        if self.hub is not None:
            return self.hub["repo"]
        if self.kind == S3:
            return "/".join(p for p in ("s3", self.fields["bucket"],
                                        self.fields.get("prefix", "").strip("/")) if p)
        if self.kind == OCI:
            return oci_repo(self.fields["reference"])
        return ""

    @property
    def revision(self) -> str:
        return str(self.hub.get("revision", "main")) if self.hub is not None else ""

    @property
    def described(self) -> str:
        """For messages: what is resolved."""
        if self.kind == S3:
            return f"s3://{self.fields['bucket']}/{self.fields.get('prefix', '')}"
        if self.kind == OCI:
            return f"oci://{self.fields['reference']}"
        if self.kind == VOLUME:
            where = f"volume {self.fields['claimName']}"
            if self.fields.get("subPath"):
                where += f"/{self.fields['subPath']}"
            return f"{where} ({self.hub['repo']}@{self.revision})" if self.hub \
                else f"{where} ({self.manifest_file})"
        return f"{self.fields['repo']}@{self.revision}"

    @property
    def digest(self) -> str:
        """What is fetched, without the Secret references: rotating credentials to another
        Secret does not change the bytes. A Hub source keeps the digest it always had."""
        if self.kind == HUGGING_FACE:
            what = {k: v for k, v in self.fields.items() if k != "tokenSecretRef"}
        elif self.kind == S3:
            what = {S3: {k: v for k, v in self.fields.items() if k != "credentialsSecretRef"}}
        elif self.kind == OCI:
            what = {OCI: {k: v for k, v in self.fields.items() if k != "pullSecretRef"}}
        else:
            manifest = dict(read.mapping_at(self.fields, "manifest"))
            if "huggingFace" in manifest:
                manifest["huggingFace"] = {k: v for k, v in manifest["huggingFace"].items()
                                           if k != "tokenSecretRef"}
            what = {VOLUME: {**self.fields, "manifest": manifest or
                             {"file": DEFAULT_MANIFEST_FILE}}}
        return naming.digest_of([what, list(self.allow), list(self.ignore)])[:16]

    @property
    def secret(self) -> SecretRef | None:
        """The Secret a resolve or fetch Job of this source needs, if any."""
        if self.hub is not None and self.hub.get("tokenSecretRef"):
            ref = self.hub["tokenSecretRef"]
            field = "spec.source.huggingFace.tokenSecretRef" if self.kind == HUGGING_FACE \
                else "spec.source.volume.manifest.huggingFace.tokenSecretRef"
            return SecretRef(ref["name"], ((ref.get("key", "HF_TOKEN"), agent_job.TOKEN_SECRET_KEY),),
                             agent_job.TOKEN_MOUNT_PATH, field)
        if self.kind == S3 and self.fields.get("credentialsSecretRef"):
            return credentials(self.fields["credentialsSecretRef"], CREDENTIALS_MOUNT_PATH,
                               "spec.source.s3.credentialsSecretRef")
        if self.kind == OCI and self.fields.get("pullSecretRef"):
            ref = self.fields["pullSecretRef"]
            return SecretRef(ref["name"], ((ref.get("key", DOCKER_CONFIG_KEY), REGISTRY_CONFIG_FILE),),
                             REGISTRY_MOUNT_PATH, "spec.source.oci.pullSecretRef")
        return None

    # -- agent arguments -------------------------------------------------------------------

    def patterns(self) -> list[str]:
        args = []
        for pattern in self.allow:
            args += ["--allow", pattern]
        for pattern in self.ignore:
            args += ["--ignore", pattern]
        return args

    def origin_args(self) -> list[str]:
        """The flags that name the origin (Hub, S3 or a registry), its patterns and its
        credentials."""
        hub = self.hub
        if hub is not None:
            args = ["--endpoint", hub.get("endpoint", "https://huggingface.co"),
                    "--repo", hub["repo"], *self.patterns()]
            if hub.get("tokenSecretRef"):
                args += ["--token-file", f"{agent_job.TOKEN_MOUNT_PATH}/{agent_job.TOKEN_SECRET_KEY}"]
            return args
        if self.kind == S3:
            args = s3_args("--s3", self.fields) + self.patterns()
            if self.fields.get("credentialsSecretRef"):
                args += ["--credentials-dir", CREDENTIALS_MOUNT_PATH]
            return args
        if self.kind == OCI:
            args = ["--oci-reference", self.fields["reference"], *self.patterns()]
            if self.fields.get("plainHTTP"):
                args.append("--plain-http")
            if self.fields.get("pullSecretRef"):
                args += ["--registry-config", f"{REGISTRY_MOUNT_PATH}/{REGISTRY_CONFIG_FILE}"]
            return args
        return self.patterns()

    def resolve_args(self, progress: str) -> list[str]:
        """`fleetcache-agent resolve` for this source (--compare is the Hub's, added by the
        ModelCache composer)."""
        args = ["resolve"]
        if self.hub is not None:
            args += ["--revision", self.revision]
        elif self.kind == VOLUME:
            args += ["--manifest-file", f"{SOURCE_MOUNT_PATH}/{self.manifest_file}"]
        return args + ["--progress-configmap", progress, *self.origin_args()]

    @property
    def reads_claim(self) -> bool:
        """The resolve Job reads the user's volume (its manifest file)."""
        return self.kind == VOLUME and self.hub is None

    def hydrate_args(self, commit: str, digest: str, progress: str) -> list[str]:
        """What a hydration Job runs for content other than a Hub fetch: an S3 or OCI fetch of
        the pinned manifest, or the verify of an existing volume (nothing downloaded)."""
        if self.kind == VOLUME:
            dest = SOURCE_MOUNT_PATH + (f"/{self.fields['subPath']}"
                                        if self.fields.get("subPath") else "")
            args = ["verify", "--dest", dest, "--layout", "flat",
                    "--progress-configmap", progress]
            if self.hub is not None:
                return args + ["--revision", commit, *self.origin_args()]
            return args + ["--manifest-file", MANIFEST_FILE, "--manifest-digest", digest]
        layout = ["--layout", "flat"] if self.fields.get("layout") == "Flat" else []
        return ["fetch", "--dest", agent_job.CACHE_MOUNT_PATH, "--commit", commit,
                "--manifest-digest", digest, "--manifest-file", MANIFEST_FILE,
                "--progress-configmap", progress, *layout, *self.origin_args()]


def credentials(ref: Mapping, mount_path: str, field: str) -> SecretRef:
    return SecretRef(ref["name"], ((ref.get("accessKeyIdKey", ACCESS_KEY_ID), ACCESS_KEY_ID),
                                   (ref.get("secretAccessKeyKey", SECRET_ACCESS_KEY),
                                    SECRET_ACCESS_KEY)), mount_path, field)


def s3_args(flag: str, location: Mapping) -> list[str]:
    """--s3-bucket/--s3-prefix/... (flag "--s3") or --mirror-bucket/... (flag "--mirror")."""
    args = [f"{flag}-bucket", location["bucket"], f"{flag}-prefix", location.get("prefix", ""),
            f"{flag}-region", location.get("region", "us-east-1")]
    if location.get("endpoint"):
        args += [f"{flag}-endpoint", location["endpoint"]]
    return args


# --- the Secret a source names ------------------------------------------------------------


def secret_problem(request: protocol.Request, ref: SecretRef | None, requirement_key: str) -> str:
    """Why the referenced Secret cannot be used, or "" when it can (or none is needed)."""
    if ref is None:
        return ""
    secrets = request.required.get(requirement_key)
    if not secrets:
        return f"Secret {request.namespace}/{ref.name} named by {ref.field} does not exist"
    keys = set(read.mapping_at(secrets[0], "data")) | set(read.mapping_at(secrets[0], "stringData"))
    missing = [theirs for theirs, _ in ref.keys if theirs not in keys]
    if missing:
        return f"Secret {request.namespace}/{ref.name} has no key {missing[0]!r} ({ref.field})"
    return ""


# --- the pinned manifest ------------------------------------------------------------------


def manifest_of(text: Any) -> tuple[list[dict] | None, str]:
    """The resolve record's `manifest` (a JSON string, like every record value): the
    manifest, or None and why not."""
    if not isinstance(text, str):
        return None, "the resolve record carries no manifest"
    try:
        value = json.loads(text)
    except ValueError:
        return None, "the resolve record's manifest is not JSON"
    if isinstance(value, list) and len(value) > MANIFEST_LIMIT:
        return None, (f"more than {MANIFEST_LIMIT} files ({len(value)}): narrow "
                      "spec.source.allowPatterns")
    found = read_manifest(value)
    return (found, "") if found else (None, "the resolve record's manifest is malformed")


def digest_of_manifest(manifest: list[dict]) -> str:
    """plan.manifest_digest of the manifest: the agent's own digest, so every copy that
    matches it is the resolved content."""
    return manifest_digest(tuple(Entry(r["path"], r["size"], r["sha256"], SHA256)
                                 for r in manifest))
