"""OCI images as files, the way go-containerregistry (the library under `crossplane xpkg`)
handles them: an OCI image layout or a docker archive read into a config and gzip layers, the
config marshalled as its `v1.ConfigFile` marshals it, the docker tarball `tarball.Write`
writes, and the Docker schema 2 manifest a push sends (design/packages.md cites each file)."""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import os
import posixpath
import re
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from fleetcache.messages import clipped, shown

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
DOCKER_TAR_LAYER = "application/vnd.docker.image.rootfs.diff.tar"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_TAR_LAYER = "application/vnd.oci.image.layer.v1.tar"
LAYER_TYPES = frozenset({DOCKER_LAYER, DOCKER_TAR_LAYER, OCI_LAYER, OCI_TAR_LAYER})
INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_MANIFEST_LIST})

GZIP_LEVEL = 1  # go-containerregistry compresses a tar layer at gzip.BestSpeed (tarball/layer.go)
ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's zero time.Time, as encoding/json writes it
BLOCK = 512
CHUNK = 2**20


class ImageError(ValueError):
    """An image archive that cannot be read, or an image that cannot be written; the message
    is one line naming the archive and the problem."""


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def hex_of(digest: str) -> str:
    return digest.split(":", 1)[1]


# --- layers -------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Layer:
    """One filesystem layer: its gzip blob (what a registry stores and the manifest's digest
    names) and the digest of the tar inside (the config's `rootfs.diff_ids` entry)."""

    blob: bytes
    diff_id: str
    annotations: Mapping[str, str] = field(default_factory=dict)

    @functools.cached_property
    def digest(self) -> str:
        return sha256(self.blob)

    @property
    def size(self) -> int:
        return len(self.blob)

    def tar(self) -> bytes:
        return gunzip(self.blob)

    def with_annotations(self, annotations: Mapping[str, str]) -> Layer:
        return Layer(self.blob, self.diff_id, dict(annotations))


def gunzip(blob: bytes) -> bytes:
    """Every gzip member of `blob`, concatenated (parallel compressors write several)."""
    out = []
    rest = blob
    while rest:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out.append(inflater.decompress(rest))
        out.append(inflater.flush())
        if not inflater.eof:
            raise zlib.error("truncated gzip stream")
        rest = inflater.unused_data
    return b"".join(out)


def gunzip_digest(blob: bytes) -> str:
    """The sha256 of what `blob` decompresses to, without holding it all in memory."""
    digest = hashlib.sha256()
    rest = blob
    while rest:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        for start in range(0, len(rest), CHUNK):
            digest.update(inflater.decompress(rest[start:start + CHUNK]))
            if inflater.eof:
                break
        digest.update(inflater.flush())
        if not inflater.eof:
            raise zlib.error("truncated gzip stream")
        rest = inflater.unused_data
    return "sha256:" + digest.hexdigest()


def gzip_layer(tar: bytes, annotations: Mapping[str, str] | None = None) -> Layer:
    """A tar compressed as go-containerregistry compresses a layer (gzip, BestSpeed, no name
    and mtime 0 in the header): the same tar gives the same blob with the same zlib."""
    return Layer(gzip.compress(tar, compresslevel=GZIP_LEVEL, mtime=0), sha256(tar),
                 dict(annotations or {}))


def layer_of(blob: bytes, media_type: str | None, diff_id: str, where: str) -> Layer:
    """A layer as read from an archive: a gzip blob is kept byte for byte, a plain tar is
    compressed as `crossplane xpkg build` compresses it; either must hold the tar its config
    names (`diff_id`)."""
    if media_type is not None and media_type not in LAYER_TYPES:
        raise ImageError(f"{where}: media type {shown(media_type)} is not a gzip or plain tar layer; "
                         f"rebuild the image with gzip compression")
    if blob[:2] == b"\x1f\x8b":
        try:
            found = gunzip_digest(blob)
        except zlib.error as err:
            raise ImageError(f"{where}: not a valid gzip stream ({err})") from None
        if found != diff_id:
            raise ImageError(f"{where}: holds a tar of {found}, but the config's diff_id is {diff_id}")
        return Layer(blob, diff_id)
    if blob[:4] == b"\x28\xb5\x2f\xfd":
        raise ImageError(f"{where}: zstd-compressed; rebuild the image with gzip compression")
    if sha256(blob) != diff_id:
        raise ImageError(f"{where}: its tar is {sha256(blob)}, but the config's diff_id is {diff_id}")
    return gzip_layer(blob)


# --- the image config, as go-containerregistry's v1.ConfigFile marshals it ---------------------

_RFC3339 = re.compile(r"(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def go_json(value: Any) -> bytes:
    """`value` as Go's encoding/json marshals it: no spaces, UTF-8, and <, >, &, U+2028 and
    U+2029 escaped (they can only occur inside strings, so replacing them is safe). Maps must
    arrive with their keys sorted, as Go sorts them."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                          ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return text.encode("utf-8")


def go_time(value: Any, where: str) -> str:
    """An RFC 3339 time as Go's time.Time marshals it (at most nanoseconds, trailing zeros
    dropped, a zero offset written Z); absent or null is Go's zero time."""
    if value is None:
        return ZERO_TIME
    match = _RFC3339.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ImageError(f"{where}: {shown(value)} is not an RFC 3339 time")
    day, clock, fraction, zone = match.groups()
    fraction = (fraction or "")[:9].rstrip("0")
    zone = "Z" if zone in ("Z", "z") or zone[1:] == "00:00" else zone
    return f"{day}T{clock}{'.' + fraction if fraction else ''}{zone}"


def _field(obj: Mapping[str, Any], key: str) -> Any:
    """A JSON field as Go decodes it into a struct: the exact key, else one equal but for case."""
    if key in obj:
        return obj[key]
    folded = key.casefold()
    return next((v for k, v in obj.items() if isinstance(k, str) and k.casefold() == folded), None)


def _typed(value: Any, kind: type | tuple[type, ...], where: str, what: str) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ImageError(f"{where}: must be {what}, not {shown(value)}")
    return value


def _strings(value: Any, where: str) -> list[str]:
    _typed(value, list, where, "a list of strings")
    return [_typed(v, str, where, "a list of strings") for v in value]


def _set(value: Any, where: str) -> dict[str, dict]:
    _typed(value, dict, where, "an object")
    return {key: {} for key in sorted(value)}


def _labels(value: Any, where: str) -> dict[str, str]:
    _typed(value, dict, where, "an object of strings")
    return {key: _typed(value[key], str, f"{where}.{key}", "a string") for key in sorted(value)}


# (field, kind): every field of go-containerregistry's v1.Config, in its order; all omitempty.
_RUN_FIELDS: tuple[tuple[str, str], ...] = (
    ("AttachStderr", "bool"), ("AttachStdin", "bool"), ("AttachStdout", "bool"), ("Cmd", "strings"),
    ("Healthcheck", "health"), ("Domainname", "str"), ("Entrypoint", "strings"), ("Env", "strings"),
    ("Hostname", "str"), ("Image", "str"), ("Labels", "labels"), ("OnBuild", "strings"),
    ("OpenStdin", "bool"), ("StdinOnce", "bool"), ("Tty", "bool"), ("User", "str"), ("Volumes", "set"),
    ("WorkingDir", "str"), ("ExposedPorts", "set"), ("ArgsEscaped", "bool"), ("NetworkDisabled", "bool"),
    ("MacAddress", "str"), ("StopSignal", "str"), ("Shell", "strings"))
_HEALTH_FIELDS = (("Test", "strings"), ("Interval", "int"), ("Timeout", "int"), ("StartPeriod", "int"),
                  ("Retries", "int"))
_HISTORY_FIELDS = (("author", "str"), ("created", "time"), ("created_by", "str"), ("comment", "str"),
                   ("empty_layer", "bool"))


def _empty(value: Any) -> bool:
    """What Go's omitempty leaves out: null, false, 0, "", an empty list or object."""
    return value is None or value is False or (not isinstance(value, bool) and value in ("", 0, [], {}))


def _struct(obj: Any, fields: Sequence[tuple[str, str]], where: str) -> dict[str, Any]:
    """A Go struct of omitempty fields (a time is never empty: Go writes its zero)."""
    _typed(obj, dict, where, "an object")
    out: dict[str, Any] = {}
    for name, kind in fields:
        value = _field(obj, name)
        path = f"{where}.{name}"
        if kind == "time":
            out[name] = go_time(value, path)
        elif _empty(value):
            continue
        elif kind == "str":
            out[name] = _typed(value, str, path, "a string")
        elif kind == "bool":
            out[name] = _typed(value, bool, path, "true or false")
        elif kind == "int":
            out[name] = _typed(value, int, path, "an integer")
        elif kind == "strings":
            out[name] = _strings(value, path)
        elif kind == "labels":
            out[name] = _labels(value, path)
        elif kind == "set":
            out[name] = _set(value, path)
        elif kind == "health":
            out[name] = _struct(value, _HEALTH_FIELDS, path)
    return out


def canonical_config(config: Mapping[str, Any], where: str = "config") -> dict[str, Any]:
    """The image config as go-containerregistry reads and re-marshals it (fields it does not
    know are dropped, as every `crossplane xpkg` step that rewrites the config drops them)."""
    _typed(config, dict, where, "a JSON object")
    out: dict[str, Any] = {"architecture": _typed(_field(config, "architecture") or "", str,
                                                  f"{where}.architecture", "a string")}
    for name in ("author", "container"):
        if _field(config, name):
            out[name] = _typed(_field(config, name), str, f"{where}.{name}", "a string")
    out["created"] = go_time(_field(config, "created"), f"{where}.created")
    if _field(config, "docker_version"):
        out["docker_version"] = _typed(_field(config, "docker_version"), str, f"{where}.docker_version",
                                       "a string")
    history = _field(config, "history")
    if history:
        _typed(history, list, f"{where}.history", "a list")
        out["history"] = [_struct(entry, _HISTORY_FIELDS, f"{where}.history[{i}]")
                          for i, entry in enumerate(history)]
    out["os"] = _typed(_field(config, "os") or "", str, f"{where}.os", "a string")
    rootfs = _field(config, "rootfs") or {}
    _typed(rootfs, dict, f"{where}.rootfs", "an object")
    diff_ids = _field(rootfs, "diff_ids")
    if diff_ids is not None:
        diff_ids = _strings(diff_ids, f"{where}.rootfs.diff_ids")
        for diff_id in diff_ids:
            if not _DIGEST.fullmatch(diff_id):
                raise ImageError(f"{where}.rootfs.diff_ids: {shown(diff_id)} is not a sha256 digest")
    out["rootfs"] = {"type": _typed(_field(rootfs, "type") or "", str, f"{where}.rootfs.type", "a string"),
                     "diff_ids": diff_ids}
    out["config"] = _struct(_field(config, "config") or {}, _RUN_FIELDS, f"{where}.config")
    for name in ("os.version", "variant"):
        if _field(config, name):
            out[name] = _typed(_field(config, name), str, f"{where}.{name}", "a string")
    if _field(config, "os.features"):
        out["os.features"] = _strings(_field(config, "os.features"), f"{where}.os.features")
    return out


def empty_config() -> dict[str, Any]:
    """The config of go-containerregistry's empty.Image (`FROM scratch`)."""
    return canonical_config({"rootfs": {"type": "layers"}})


# --- images -------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Image:
    """An image: its config (in go-containerregistry's form) and its gzip layers, oldest first."""

    config: Mapping[str, Any]
    layers: tuple[Layer, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "config", canonical_config(self.config))
        diff_ids = self.config["rootfs"]["diff_ids"] or []
        if diff_ids != [layer.diff_id for layer in self.layers]:
            raise ImageError(f"the config names {len(diff_ids)} layers (rootfs.diff_ids) that are not "
                             f"the image's {len(self.layers)} layers")

    @functools.cached_property
    def config_json(self) -> bytes:
        return go_json(self.config)

    @property
    def config_digest(self) -> str:
        return sha256(self.config_json)

    @functools.cached_property
    def manifest(self) -> bytes:
        """The Docker schema 2 manifest go-containerregistry pushes for this image: config and
        layer descriptors, each layer's annotations with it."""
        layers = []
        for layer in self.layers:
            descriptor: dict[str, Any] = {"mediaType": DOCKER_LAYER, "size": layer.size, "digest": layer.digest}
            if layer.annotations:
                descriptor["annotations"] = dict(sorted(layer.annotations.items()))
            layers.append(descriptor)
        return go_json({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST,
                        "config": {"mediaType": DOCKER_CONFIG, "size": len(self.config_json),
                                   "digest": self.config_digest},
                        "layers": layers})

    @property
    def digest(self) -> str:
        """The manifest digest a registry reports once this image is pushed."""
        return sha256(self.manifest)

    def blobs(self) -> dict[str, bytes]:
        """Every blob a push uploads, by digest: the config, then the layers."""
        found = {self.config_digest: self.config_json}
        found.update((layer.digest, layer.blob) for layer in self.layers)
        return found


# --- tar, as Go's archive/tar writes it for go-containerregistry --------------------------------


def tar_header(name: str, size: int) -> bytes:
    """A regular file's USTAR header as `tar.Header{Name, Mode: 0644, Size}` writes it: owner
    0:0 without names, mtime 0."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.type = size, 0o644, 0, tarfile.REGTYPE
    try:
        return info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict")
    except ValueError as err:
        raise ImageError(f"{shown(name)}: cannot be a tar entry ({err})") from None


def write_tar(out: IO[bytes], entries: Iterable[tuple[str, bytes]]) -> None:
    """Regular files in the given order, then the two zero blocks that end an archive (no
    padding to a record, as Go's tar.Writer)."""
    for name, data in entries:
        out.write(tar_header(name, len(data)))
        out.write(data)
        out.write(b"\0" * (-len(data) % BLOCK))
    out.write(b"\0" * (2 * BLOCK))


def tar_bytes(entries: Iterable[tuple[str, bytes]]) -> bytes:
    parts: list[bytes] = []
    for name, data in entries:
        parts += [tar_header(name, len(data)), data, b"\0" * (-len(data) % BLOCK)]
    parts.append(b"\0" * (2 * BLOCK))
    return b"".join(parts)


def tar_files(tar: bytes, where: str) -> list[tuple[str, bytes | None]]:
    """(name, content) for every entry of a tar in order; content None for anything but a
    regular file."""
    found: list[tuple[str, bytes | None]] = []
    try:
        with tarfile.open(fileobj=io.BytesIO(tar), mode="r:") as archive:
            for member in archive:
                handle = archive.extractfile(member) if member.isfile() else None
                found.append((member.name, handle.read() if handle else None))
    except tarfile.TarError as err:
        raise ImageError(f"{where}: not a tar archive ({clipped(err)})") from None
    return found


def write_atomically(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """`path` written whole or not at all (a temporary file beside it, then renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_docker_tarball(image: Image, path: Path) -> None:
    """The image as go-containerregistry's `tarball.Write(nil, img, w)` writes it: the config
    named by its digest, each layer once as `<hex>.tar.gz`, then `manifest.json` (one image,
    no tags)."""
    config_name = image.config_digest
    entries = [(config_name, image.config_json)]
    names = []
    for layer in image.layers:
        name = hex_of(layer.digest) + ".tar.gz"
        if name not in names:
            entries.append((name, layer.blob))
        names.append(name)
    entries.append(("manifest.json", go_json([{"Config": config_name, "RepoTags": None, "Layers": names}])))
    write_atomically(path, lambda handle: write_tar(handle, entries))


# --- reading archives ---------------------------------------------------------------------------


class _Archive:
    """The regular files of a tar archive by cleaned name, links followed."""

    def __init__(self, path: Path):
        self.path = path
        self.files: dict[str, bytes] = {}
        links: dict[str, str] = {}
        try:
            with tarfile.open(path, mode="r:*") as archive:
                for member in archive:
                    name = posixpath.normpath(member.name.lstrip("/"))
                    if member.isfile():
                        handle = archive.extractfile(member)
                        self.files[name] = handle.read() if handle else b""
                    elif member.issym():
                        links[name] = posixpath.normpath(posixpath.join(posixpath.dirname(name),
                                                                        member.linkname))
                    elif member.islnk():
                        links[name] = posixpath.normpath(member.linkname.lstrip("/"))
        except FileNotFoundError:
            raise ImageError(f"{path}: no such file") from None
        except (tarfile.TarError, OSError, EOFError, zlib.error) as err:
            raise ImageError(f"{path}: not a tar archive ({clipped(err)})") from None
        for name, target in links.items():
            for _ in range(8):
                if target in self.files:
                    self.files[name] = self.files[target]
                    break
                if target not in links:
                    break
                target = links[target]

    def read(self, name: str) -> bytes:
        found = self.files.get(posixpath.normpath(name.lstrip("/")))
        if found is None:
            raise ImageError(f"{self.path}: has no {shown(name)}")
        return found

    def json(self, name: str) -> Any:
        try:
            return json.loads(self.read(name))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ImageError(f"{self.path}: {name} is not JSON ({clipped(err)})") from None

    def blob(self, descriptor: Any, what: str) -> bytes:
        digest = descriptor.get("digest") if isinstance(descriptor, dict) else None
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise ImageError(f"{self.path}: the {what} descriptor has no sha256 digest")
        data = self.read(f"blobs/sha256/{hex_of(digest)}")
        if sha256(data) != digest:
            raise ImageError(f"{self.path}: blob {digest} ({what}) does not hash to its digest")
        return data

    def blob_json(self, descriptor: Any, what: str) -> Any:
        try:
            return json.loads(self.blob(descriptor, what))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ImageError(f"{self.path}: the {what} is not JSON ({clipped(err)})") from None


def read_image_archive(path: str | os.PathLike) -> Image:
    """One image from a tar holding an OCI image layout (`buildah push IMAGE oci-archive:PATH`,
    `skopeo copy ... oci-archive:PATH`) or a docker archive (`docker save`, `buildah push IMAGE
    docker-archive:PATH`, go-containerregistry's `tarball.Write`, an `.xpkg`)."""
    archive = _Archive(Path(path))
    if "index.json" in archive.files:
        return _oci_image(archive)
    if "manifest.json" in archive.files:
        return _docker_image(archive)
    raise ImageError(f"{path}: neither an OCI image layout (index.json) nor a docker archive (manifest.json)")


def _only(items: Any, what: str, path: Path) -> Any:
    if not isinstance(items, list) or len(items) != 1 or not isinstance(items[0], dict):
        count = len(items) if isinstance(items, list) else 0
        raise ImageError(f"{path}: {what} lists {count} images; give an archive of exactly one")
    return items[0]


def _config_and_diff_ids(config: Any, path: Path, count: int) -> tuple[dict, list[str]]:
    canonical = canonical_config(config, f"{path}: config")
    diff_ids = canonical["rootfs"]["diff_ids"] or []
    if len(diff_ids) != count:
        raise ImageError(f"{path}: the config names {len(diff_ids)} layers (rootfs.diff_ids), "
                         f"the manifest {count}")
    return config, diff_ids


def _oci_image(archive: _Archive) -> Image:
    descriptor = _only(_field(archive.json("index.json"), "manifests"), "index.json", archive.path)
    for _ in range(4):  # an index of one image, possibly nested
        if descriptor.get("mediaType") not in INDEX_TYPES:
            break
        descriptor = _only(archive.blob_json(descriptor, "index").get("manifests"), "its index", archive.path)
    manifest = archive.blob_json(descriptor, "manifest")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("layers"), list):
        raise ImageError(f"{archive.path}: the manifest lists no layers")
    descriptors = manifest["layers"]
    config, diff_ids = _config_and_diff_ids(archive.blob_json(manifest.get("config"), "config"),
                                            archive.path, len(descriptors))
    layers = []
    for index, (layer, diff_id) in enumerate(zip(descriptors, diff_ids, strict=True)):
        where = f"{archive.path}: layer {index + 1}"
        found = layer_of(archive.blob(layer, f"layer {index + 1}"), layer.get("mediaType"), diff_id, where)
        annotations = layer.get("annotations")
        layers.append(found.with_annotations(annotations) if isinstance(annotations, dict) else found)
    return Image(config, tuple(layers))


def _docker_image(archive: _Archive) -> Image:
    entry = _only(archive.json("manifest.json"), "manifest.json", archive.path)
    names = entry.get("Layers")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ImageError(f"{archive.path}: manifest.json lists no layers")
    config_name = entry.get("Config")
    if not isinstance(config_name, str):
        raise ImageError(f"{archive.path}: manifest.json names no config")
    config, diff_ids = _config_and_diff_ids(archive.json(config_name), archive.path, len(names))
    layers = tuple(layer_of(archive.read(name), None, diff_id, f"{archive.path}: layer {index + 1} ({name})")
                   for index, (name, diff_id) in enumerate(zip(names, diff_ids, strict=True)))
    return Image(config, layers)
