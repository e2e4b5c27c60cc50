"""An image run as a Kubernetes pod with the `restricted` profile runs it, without a container
engine: unpacked (umoci), then its entrypoint started with bubblewrap as the image's numeric
user (a real uid on this machine, so its file permissions hold too), on a read-only root
filesystem, with /tmp an empty tmpfs (the emptyDir) and only the mounts given writable. The
network namespace is the machine's, so loopback reaches the test servers.

    bundle = unpack(Path("build/package/agent.tar"), workspace)
    result = bundle.run(["verify", "--dest", "/cache", ...],
                        mounts=[Mount(host_dir, "/cache", writable=True)])

The process sees the image's configuration as a container runtime gives it: the entrypoint
and command, the environment (HOME from /etc/passwd when the image sets none), the working
directory and the user.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fleetcache.devtools.package.images import ensure_tools, run


@dataclass(frozen=True)
class Mount:
    source: Path  # on this machine
    target: str  # in the container
    writable: bool = False


@dataclass(frozen=True)
class Bundle:
    """An unpacked image: its root filesystem and the configuration a runtime starts it with."""

    rootfs: Path
    config: Mapping  # the image configuration's `config` object

    @property
    def entrypoint(self) -> list[str]:
        return list(self.config.get("Entrypoint") or [])

    @property
    def command(self) -> list[str]:
        return list(self.config.get("Cmd") or [])

    @property
    def user(self) -> tuple[int, int]:
        """The numeric uid and gid; a name (which a pod's runAsNonRoot cannot verify) is refused."""
        user, _, group = str(self.config.get("User") or "0").partition(":")
        if not user.isdigit() or not (group or user).isdigit():
            raise ValueError(f"the image's USER {self.config.get('User')!r} is not numeric")
        return int(user), int(group or user)

    @property
    def environment(self) -> dict[str, str]:
        env = dict(entry.split("=", 1) for entry in self.config.get("Env") or [])
        env.setdefault("HOME", self.home())
        return env

    def home(self) -> str:
        uid = str(self.user[0])
        passwd = self.rootfs / "etc" / "passwd"
        for line in passwd.read_text().splitlines() if passwd.exists() else []:
            fields = line.split(":")
            if len(fields) > 5 and fields[2] == uid:
                return fields[5]
        return "/"

    def argv(self, args: Sequence[str] | None = None, mounts: Sequence[Mount] = (),
             env: Mapping[str, str] | None = None, entrypoint: Sequence[str] | None = None) -> list[str]:
        """The command line that runs the image: `args` replace its command (as a pod's `args`),
        `entrypoint` its entrypoint (as a pod's `command`), `env` adds to its environment."""
        uid, gid = self.user
        argv = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--",
                "bwrap", "--unshare-user", "--uid", str(uid), "--gid", str(gid),
                "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--new-session",
                "--ro-bind", str(self.rootfs), "/", "--proc", "/proc", "--dev", "/dev",
                "--perms", "1777", "--tmpfs", "/tmp"]
        for mount in mounts:
            self.mountpoint(mount)
            argv += ["--bind" if mount.writable else "--ro-bind", str(mount.source), mount.target]
        argv += ["--chdir", str(self.config.get("WorkingDir") or "/"), "--clearenv"]
        for key, value in sorted({**self.environment, **(env or {})}.items()):
            argv += ["--setenv", key, value]
        return [*argv, "--", *(entrypoint if entrypoint is not None else self.entrypoint),
                *(args if args is not None else self.command)]

    def mountpoint(self, mount: Mount) -> None:
        """Where a runtime would create it: in the root filesystem, before it is made read-only."""
        if mount.target.startswith(("/tmp/", "/dev/", "/proc/")):
            return  # on a filesystem the sandbox creates
        target = self.rootfs / mount.target.lstrip("/")
        if mount.source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch(exist_ok=True)

    def run(self, args: Sequence[str] | None = None, mounts: Sequence[Mount] = (),
            env: Mapping[str, str] | None = None, timeout: float = 300,
            entrypoint: Sequence[str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(args, mounts, env, entrypoint), capture_output=True, text=True,
                              timeout=timeout)

    def start(self, args: Sequence[str] | None = None, mounts: Sequence[Mount] = (),
              env: Mapping[str, str] | None = None) -> subprocess.Popen:
        return subprocess.Popen(self.argv(args, mounts, env), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def image_config(layout: Path) -> dict:
    """The configuration of the one image in an OCI layout."""
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads(blob(layout, index["manifests"][0]["digest"]))
    return json.loads(blob(layout, manifest["config"]["digest"]))


def blob(layout: Path, digest: str) -> bytes:
    algorithm, _, hex_digest = digest.partition(":")
    return (layout / "blobs" / algorithm / hex_digest).read_bytes()


def workspace(prefix: str = "fleetcache-sandbox.") -> Path:
    """A directory the image's user can reach (mkdtemp makes it 0700, root's alone)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


def writable_dir(path: Path, uid: int = 65532, gid: int = 65532) -> Path:
    """A directory owned by the image's user, as a volume with fsGroup would be."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, uid, gid)
    return path


def unpack(archive: Path, into: Path) -> Bundle:
    """Unpack the image of an OCI archive or a docker tarball (an xpkg) into `into`/bundle/rootfs,
    ownership and modes as the layers have them, reachable by the image's user."""
    ensure_tools(["umoci", "bwrap", "setpriv", "skopeo"])
    into.mkdir(parents=True, exist_ok=True)
    layout = into / "layout"
    with tarfile.open(archive) as tar:
        oci = "index.json" in tar.getnames()
        if oci:
            tar.extractall(layout, filter="data")
    name = "image"
    if oci:
        index = json.loads((layout / "index.json").read_text())
        name = index["manifests"][0].get("annotations", {}).get("org.opencontainers.image.ref.name", "")
        if not name:
            raise ValueError(f"{archive}: its index names no image (org.opencontainers.image.ref.name)")
    else:  # a docker tarball (an xpkg): as an OCI layout
        run(["skopeo", "copy", "--quiet", f"docker-archive:{archive}", f"oci:{layout}:{name}"])
    run(["umoci", "unpack", "--image", f"{layout}:{name}", into / "bundle"])
    (into / "bundle").chmod(0o755)
    return Bundle(into / "bundle" / "rootfs", image_config(layout).get("config") or {})
