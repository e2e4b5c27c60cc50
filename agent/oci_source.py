"""An OCI artifact or image as a source of the one fetch engine: resolve pins the manifest digest,
fetch takes each file as ranged GETs of the blob that holds it (design/oci.md).

Which layers hold which files, decided from the manifest alone (`manifest_layers`, pure):

- ModelPack layers (`application/vnd.cncf.model.*`, and the older `application/vnd.cnai.model.*`
  that modctl still writes): `….raw` is one file, its path the layer annotation
  `org.cncf.model.filepath` (or `org.cnai.model.filepath`), its sha256 the blob digest;
  `….tar` is a tar archive whose members are files of the model;
- a plain image (the KServe modelcar convention): uncompressed tar layers whose files under
  `models/` are the model (the base image's own files are not);
- compressed layers (`+gzip`, `+zstd`) are refused: a file inside cannot be read by range.

A tar layer is streamed once at resolve: the blob is checked against its descriptor digest and
each member's sha256 and offset recorded; fetch then reads each member as a range of the blob,
checked against that sha256. The commit is `oci-` + the first 40 hex of the manifest digest.

The pinned manifest (resolve's record, latched by the ModelCache, handed to fetch) says where
each file is, so fetch makes no manifest GET and hashes nothing twice: `{path, size, sha256,
blob}`, the blob a `sha256:` digest read from the reference's repository, plus `offset` and
`blobSize` when the file is a member of a tar layer (a raw layer's file is its whole blob).
The locator is outside the manifest digest (fleetcache/manifest.py), like S3's versionId.
"""

from __future__ import annotations

import hashlib
import re
import tarfile
from dataclasses import dataclass
from typing import TypeGuard

import urllib3

from fleetcache import reasons
from fleetcache.agent.errors import AgentError
from fleetcache.agent.hub import Retryable, describe
from fleetcache.agent.oci import INDEX_TYPES, Manifest, OciReference, RegistryClient
from fleetcache.agent.plan import MAX_FILE_SIZE, check_path, select
from fleetcache.agent.sources import parallel, parse_manifest
from fleetcache.manifest import SHA256, Entry
from fleetcache.shapes import OCI_DIGEST, SHA256_HEX

OCI_COMMIT = re.compile(r"oci-[0-9a-f]{40}")
FILEPATH_ANNOTATIONS = ("org.cncf.model.filepath", "org.cnai.model.filepath")
MODELPACK_PREFIXES = ("application/vnd.cncf.model.", "application/vnd.cnai.model.")
MODELPACK_CONFIGS = frozenset({"application/vnd.cncf.model.config.v1+json",
                               "application/vnd.cnai.model.config.v1+json"})
IMAGE_TARS = frozenset({"application/vnd.oci.image.layer.v1.tar", "application/vnd.docker.image.rootfs.diff.tar"})
COMPRESSED = ("+gzip", "+zstd", ".gzip", ".zstd", "tar.gzip")
MODELCAR_ROOT = "models/"
READ_BLOCK = 1 << 20
RAW, TAR = "raw", "tar"
BLOB, OFFSET, BLOB_SIZE = "blob", "offset", "blobSize"
LOCATOR = (BLOB, OFFSET, BLOB_SIZE)  # where a manifest entry's bytes are: outside the manifest digest


def _refuse(what: str) -> AgentError:
    return AgentError(reasons.InvalidSource, what)


@dataclass(frozen=True)
class Layer:
    """One layer as the model sees it: a single file (`raw`, at `path`) or a tar archive whose
    members under `root` are files (`root` stripped from their paths)."""

    digest: str
    size: int
    kind: str
    path: str = ""
    root: str = ""


@dataclass(frozen=True)
class Located:
    """A file of the model and where its bytes are: `size` bytes at `offset` in blob `digest`."""

    path: str
    size: int
    sha256: str
    digest: str
    offset: int
    blob_size: int

    @property
    def row(self) -> dict:
        """The pinned manifest's entry: the file, and its blob; a range of it for a tar member."""
        row = {"path": self.path, "size": self.size, "sha256": self.sha256, BLOB: self.digest}
        if (self.digest, self.offset, self.blob_size) != ("sha256:" + self.sha256, 0, self.size):
            row |= {OFFSET: self.offset, BLOB_SIZE: self.blob_size}
        return row

    @property
    def entry(self) -> Entry:
        return Entry(self.path, self.size, self.sha256, SHA256)


def _manifest_refused(what: str) -> AgentError:
    return AgentError(reasons.InvalidSource, f"manifest: {what}")


def located_manifest(data: object) -> tuple[Located, ...]:
    """An OCI source's pinned manifest, sorted by path: each entry passes sources.parse_manifest's
    checks (safe unique paths, sane sizes, sha256) and names its blob and where the file is in it."""
    if not isinstance(data, list):
        raise _manifest_refused("not a JSON list")
    files = parse_manifest([{k: v for k, v in item.items() if k not in LOCATOR} if isinstance(item, dict) else item
                            for item in data])
    by_path = {item["path"]: item for item in data}  # every item a dict with a path: parse_manifest checked
    return tuple(_located(by_path[f["path"]]) for f in files)


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _located(item: dict) -> Located:
    path, size, sha256 = item["path"], item["size"], item["sha256"]
    blob, offset, blob_size = item.get(BLOB), item.get(OFFSET), item.get(BLOB_SIZE)
    if not isinstance(blob, str) or not OCI_DIGEST.fullmatch(blob):
        raise _manifest_refused(f"{path!r} has no {BLOB} (sha256:<64 hex>): an OCI fetch takes the manifest its "
                                "resolve recorded")
    if offset is None and blob_size is None:
        if blob != "sha256:" + sha256:
            raise _manifest_refused(f"{path!r}: {BLOB} {blob} is not the file's own digest, so the file is a range "
                                    f"of it: give {OFFSET} and {BLOB_SIZE}")
        return Located(path, size, sha256, blob, 0, size)
    if not (_count(offset) and _count(blob_size) and offset + size <= blob_size):
        raise _manifest_refused(f"{path!r} has {OFFSET} {offset!r} and {BLOB_SIZE} {blob_size!r}: not a range of "
                                f"{size} bytes inside its blob")
    return Located(path, size, sha256, blob, offset, blob_size)


def oci_commit(manifest_digest: str) -> str:
    return "oci-" + manifest_digest.removeprefix("sha256:")[:40]


def _descriptor(item: object, where: str) -> tuple[str, int, str, dict]:
    if not isinstance(item, dict):
        raise _refuse(f"{where} is not a descriptor object")
    digest, size, media_type = item.get("digest"), item.get("size"), item.get("mediaType")
    if not isinstance(digest, str) or not digest.startswith("sha256:") or not SHA256_HEX.fullmatch(digest[7:]):
        raise _refuse(f"{where} has digest {digest!r}: only sha256 digests are supported")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_FILE_SIZE:
        raise _refuse(f"{where} has a bad size {size!r}")
    if not isinstance(media_type, str):
        raise _refuse(f"{where} has no mediaType")
    annotations = item.get("annotations") or {}
    return digest, size, media_type, annotations if isinstance(annotations, dict) else {}


def index_child(manifest: Manifest) -> str:
    """The one manifest an index names (a multi-platform index has no single model: refused)."""
    children = manifest.body.get("manifests")
    if not isinstance(children, list) or len(children) != 1:
        count = len(children) if isinstance(children, list) else 0
        raise _refuse(f"{manifest.digest} is an index of {count} manifests: name the model's manifest by digest "
                      "(host/repository@sha256:…)")
    return _descriptor(children[0], "the index's manifest")[0]


def manifest_layers(manifest: Manifest) -> tuple[Layer, ...]:
    """Each layer's part in the model, from the manifest alone (see the module docstring)."""
    layers = manifest.body.get("layers")
    if not isinstance(layers, list) or not layers:
        raise _refuse(f"manifest {manifest.digest} has no layers")
    config = manifest.body.get("config")
    modelpack = isinstance(config, dict) and config.get("mediaType") in MODELPACK_CONFIGS
    found = []
    for number, item in enumerate(layers):
        digest, size, media_type, annotations = _descriptor(item, f"layer {number}")
        where = f"layer {number} ({digest}, {media_type})"
        if media_type.endswith(COMPRESSED):
            raise _refuse(f"{where} is compressed, so its files cannot be read by range: push the model "
                          "uncompressed (ModelPack .raw or .tar layers)")
        if media_type.startswith(MODELPACK_PREFIXES) and media_type.endswith(".raw"):
            path = next((annotations[k] for k in FILEPATH_ANNOTATIONS if annotations.get(k)), None)
            if path is None:
                raise _refuse(f"{where} has no {FILEPATH_ANNOTATIONS[0]} annotation naming its file")
            found.append(Layer(digest, size, RAW, path=check_path(path)))
        elif media_type.startswith(MODELPACK_PREFIXES) and media_type.endswith(".tar"):
            found.append(Layer(digest, size, TAR))
        elif media_type in IMAGE_TARS:
            found.append(Layer(digest, size, TAR, root="" if modelpack else MODELCAR_ROOT))
        else:
            raise _refuse(f"{where}: not a ModelPack layer nor an uncompressed image layer")
    return tuple(found)


def member_path(name: str, root: str) -> str | None:
    """A tar member's path in the model, or None when it is outside `root` (a modelcar's base image)."""
    name = name.removeprefix("./").removeprefix("/") if root else name.removeprefix("./")
    if not name.startswith(root):
        return None
    return name[len(root):].rstrip("/") or None


class _HashingReader:
    """The blob's bytes for tarfile, hashed and counted on the way."""

    def __init__(self, resp):
        self.resp = resp
        self.hasher = hashlib.sha256()
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        data = self.resp.read(size if size >= 0 else READ_BLOCK)
        self.hasher.update(data)
        self.count += len(data)
        return data


def scan_tar(client: RegistryClient, layer: Layer) -> list[Located]:
    """Stream a tar layer once: each member file's sha256 and offset, the blob checked against its digest."""
    what = f"reading tar layer {layer.digest}"

    def attempt() -> list[Located]:
        resp = client.open_blob(layer.digest, 0, layer.size, layer.size)
        reader = _HashingReader(resp)
        try:
            found = _members(reader, layer)
            while reader.read(READ_BLOCK):
                pass
        except (urllib3.exceptions.HTTPError, OSError) as err:
            resp.close()
            raise Retryable(AgentError(reasons.SourceUnreachable, f"{what}: interrupted, {describe(err)}")) from None
        except tarfile.TarError as err:
            resp.close()
            raise _refuse(f"{what}: not a tar archive ({err})") from None
        resp.release_conn()
        if reader.count != layer.size or "sha256:" + reader.hasher.hexdigest() != layer.digest:
            raise AgentError(reasons.DigestMismatch, f"{what}: the registry served {reader.count} bytes that do "
                                                     "not match the layer's digest")
        return found

    return client.policy.run(attempt, what)


def _members(reader: _HashingReader, layer: Layer) -> list[Located]:
    found = []
    with tarfile.open(fileobj=reader, mode="r|") as tar:  # type: ignore[call-overload]
        for member in tar:
            path = member_path(member.name, layer.root)
            if path is None or member.isdir():
                continue
            if not member.isreg() or member.sparse is not None or path.rpartition("/")[2].startswith(".wh."):
                raise _refuse(f"tar layer {layer.digest}: {member.name!r} is not a regular file (links, devices, "
                              "sparse files and whiteouts are refused)")
            hasher = hashlib.sha256()
            data = tar.extractfile(member)
            while data is not None and (chunk := data.read(READ_BLOCK)):
                hasher.update(chunk)
            found.append(Located(check_path(path), member.size, hasher.hexdigest(), layer.digest,
                                 member.offset_data, layer.size))
    return found


@dataclass(frozen=True)
class OciResolved:
    """A pinned manifest's files, each with where it is (sorted by path)."""

    reference: OciReference  # by digest
    located: tuple[Located, ...]

    @property
    def commit(self) -> str:
        return oci_commit(self.reference.digest or "")

    @property
    def manifest(self) -> list[dict]:
        """What the resolve record carries and fetch is given back (the module docstring)."""
        return [item.row for item in self.located]

    def entries(self) -> tuple[Entry, ...]:
        return tuple(item.entry for item in self.located)


def resolve_oci(client: RegistryClient, reference: OciReference, allow: list[str] | None,
                ignore: list[str] | None, concurrency: int, report=None) -> OciResolved:
    """Pin the manifest (an index of one manifest: that one), list its files, hash tar layers once."""
    manifest = client.manifest(reference.name)
    if manifest.media_type in INDEX_TYPES or "manifests" in manifest.body:
        manifest = client.manifest(index_child(manifest))
    layers = manifest_layers(manifest)
    tars = [layer for layer in layers if layer.kind == TAR]
    if tars and report:
        report(f"hashing the files of {len(tars)} tar layers ({sum(t.size for t in tars)} bytes)")
    located = [Located(layer.path, layer.size, layer.digest.removeprefix("sha256:"), layer.digest, 0, layer.size)
               for layer in layers if layer.kind == RAW]
    for members in parallel(lambda layer: scan_tar(client, layer), tars, concurrency):
        located += members
    by_path = {item.path: item for item in located}
    if len(by_path) != len(located):
        twice = sorted({i.path for i in located if sum(j.path == i.path for j in located) > 1})[0]
        raise _refuse(f"manifest {manifest.digest} holds {twice!r} in more than one layer")
    chosen = select(tuple(item.entry for item in located), allow, ignore)
    return OciResolved(reference.pinned(manifest.digest), located_manifest([by_path[e.path].row for e in chosen]))


class OciSource:
    """A pinned manifest's files, each read as a range of the blob that holds it, by digest from the
    client's repository (the reference's tag or digest finds nothing); the locator is its path."""

    def __init__(self, client: RegistryClient, located: tuple[Located, ...]):
        self.client, self.located = client, {item.path: item for item in located}

    def url(self, entry: Entry) -> str:
        return entry.path

    def open_range(self, url: str, start: int, end: int, size: int):
        item = self.located[url]
        resp = self.client.open_blob(item.digest, item.offset + start, item.offset + end, item.blob_size)
        resp.final_url = url
        return resp

    def mismatch(self, entry: Entry) -> None:
        """A blob whose bytes differ from its digest: the engine's retries end in DigestMismatch."""

    def complete(self, layout, entries: tuple[Entry, ...], digest: str) -> dict:
        return {}
