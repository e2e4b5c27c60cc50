"""Kubernetes checks every composer's tests share.

- `assert_valid_k8s(manifest)`: the manifest validates against the Kubernetes OpenAPI
  schema (kubernetes-validate, strict: an unknown field fails), plus the metadata rules
  the schema cannot express (names, label keys and values).
- `restricted_violations(pod_spec)`: the Pod Security Standards `restricted` profile
  (which includes `baseline`), rule by rule, as written on
  https://kubernetes.io/docs/concepts/security/pod-security-standards/ ; [] means it passes.
- `iter_remote_manifests(outcome)`: each provider-kubernetes Object's forProvider manifest.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import kubernetes_validate

from fleetcache import shapes
from fleetcache.apis import xrds
from fleetcache.devtools import manifests
from fleetcache.functions import protocol, read
from fleetcache.functions.k8s import objects

K8S_VERSION = "1.37"


def assert_valid_k8s(manifest: Mapping[str, Any]) -> None:
    """Fail with the schema's message when `manifest` is not a valid Kubernetes object."""
    try:
        kubernetes_validate.validate(dict(manifest), K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as err:
        where = "/".join(str(p) for p in err.absolute_path)
        raise AssertionError(f"{manifest.get('kind')} {read.get_path(manifest, 'metadata.name')}"
                             f" is invalid at {where or '<root>'}: {err.message}") from None
    problems = metadata_problems(manifest)
    assert not problems, f"{manifest.get('kind')}: {'; '.join(problems)}"


def metadata_problems(manifest: Mapping[str, Any]) -> list[str]:
    """What the API server would reject in metadata that the OpenAPI schema lets through
    (fleetcache.validation's rules, as render applies them), the pod template's too."""
    kind = manifest.get("kind")
    limit, shape = (shapes.DNS_LABEL_MAX, shapes.DNS_LABEL) \
        if kind in manifests.LABEL_NAMED_KINDS \
        else (shapes.DNS_SUBDOMAIN_MAX, shapes.DNS_SUBDOMAIN)
    problems = [str(v) for v in xrds.object_meta_violations(manifest, limit, shape)]
    template = read.get_path(manifest, "spec.template")
    if isinstance(template, Mapping) and "metadata" in template:
        problems += [f"spec.template.{v}" for v in xrds.object_meta_violations(
            {"metadata": {"name": "template", **template["metadata"]}}, limit, shape)]
    return problems


def iter_remote_manifests(outcome: protocol.Outcome) -> Iterator[tuple[str, dict]]:
    """(resource key, remote manifest) for every provider-kubernetes Object composed."""
    for key in sorted(outcome.desired):
        resource, _ = outcome.desired[key]
        if resource.get("apiVersion") == objects.OBJECT_API_VERSION and resource.get("kind") == "Object":
            yield key, resource["spec"]["forProvider"]["manifest"]


# --- Pod Security Standards: restricted ----------------------------------------------------

BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}
RESTRICTED_CAPABILITIES = {"NET_BIND_SERVICE"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
}
# check_restrictedVolumes.go; `image` since 1.33 (kubernetes/kubernetes#130394)
RESTRICTED_VOLUME_TYPES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image", "persistentVolumeClaim",
    "projected", "secret",
}
APPARMOR_TYPES = {"RuntimeDefault", "Localhost"}
SECCOMP_TYPES = {"RuntimeDefault", "Localhost"}


def _containers(pod_spec: Mapping) -> list[tuple[str, Mapping]]:
    out = []
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in pod_spec.get(field) or []:
            out.append((f"{field}[{container.get('name', '?')}]", container))
    return out


def _security_contexts(pod_spec: Mapping) -> list[tuple[str, Mapping]]:
    """The pod's securityContext and every container's, each with where it is."""
    contexts = [("spec.securityContext", pod_spec.get("securityContext") or {})]
    contexts += [(f"{where}.securityContext", c.get("securityContext") or {})
                 for where, c in _containers(pod_spec)]
    return contexts


def restricted_violations(pod_spec: Mapping[str, Any],
                          annotations: Mapping[str, str] | None = None) -> list[str]:
    """Every way `pod_spec` breaks Pod Security `restricted` (baseline included)."""
    v: list[str] = []
    pod_sc = pod_spec.get("securityContext") or {}
    containers = _containers(pod_spec)
    contexts = _security_contexts(pod_spec)

    # baseline: HostProcess
    for where, sc in contexts:
        if read.get_path(sc, "windowsOptions.hostProcess") is True:
            v.append(f"hostProcess: {where}.windowsOptions.hostProcess must not be true")
    # baseline: host namespaces
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(field) is True:
            v.append(f"host namespaces: spec.{field} must not be true")
    # baseline: privileged containers
    for where, sc in contexts[1:]:
        if sc.get("privileged") is True:
            v.append(f"privileged: {where}.privileged must not be true")
    # baseline + restricted: capabilities
    for where, c in containers:
        caps = read.get_path(c, "securityContext.capabilities") or {}
        added = set(caps.get("add") or [])
        if added - BASELINE_CAPABILITIES:
            v.append(f"capabilities: {where} adds {sorted(added - BASELINE_CAPABILITIES)} "
                     "beyond the baseline set")
        if added - RESTRICTED_CAPABILITIES:
            v.append(f"capabilities: {where} may add only NET_BIND_SERVICE, not "
                     f"{sorted(added - RESTRICTED_CAPABILITIES)}")
        if "ALL" not in (caps.get("drop") or []):
            v.append(f"capabilities: {where} must drop ALL")
    # baseline: hostPath volumes; restricted: volume types
    for volume in pod_spec.get("volumes") or []:
        kinds = [k for k in volume if k != "name"]
        if "hostPath" in kinds:
            v.append(f"hostPath volumes: volume {volume.get('name')!r} uses hostPath")
        for kind in kinds:
            if kind not in RESTRICTED_VOLUME_TYPES:
                v.append(f"volume types: volume {volume.get('name')!r} is {kind}, not one of "
                         f"{sorted(RESTRICTED_VOLUME_TYPES)}")
    # baseline: host ports
    for where, c in containers:
        for port in c.get("ports") or []:
            if port.get("hostPort") not in (None, 0):
                v.append(f"host ports: {where} uses hostPort {port['hostPort']}")
    # baseline: AppArmor (field and the legacy annotation)
    for where, sc in contexts:
        profile = read.get_path(sc, "appArmorProfile.type")
        if profile is not None and profile not in APPARMOR_TYPES:
            v.append(f"AppArmor: {where}.appArmorProfile.type is {profile}")
    for key, value in (annotations or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and \
                value != "runtime/default" and not value.startswith("localhost/"):
            v.append(f"AppArmor: annotation {key} is {value}")
    # baseline: SELinux
    for where, sc in contexts:
        options = sc.get("seLinuxOptions") or {}
        if options.get("type", "") not in SELINUX_TYPES:
            v.append(f"SELinux: {where}.seLinuxOptions.type {options['type']!r} is not allowed")
        for field in ("user", "role"):
            if options.get(field):
                v.append(f"SELinux: {where}.seLinuxOptions.{field} must not be set")
    # baseline: /proc mount
    for where, sc in contexts[1:]:
        if sc.get("procMount") not in (None, "Default"):
            v.append(f"/proc mount: {where}.procMount must be Default")
    # baseline: sysctls
    for sysctl in pod_sc.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            v.append(f"sysctls: {sysctl.get('name')} is not a safe sysctl")
    # restricted: privilege escalation
    for where, c in containers:
        if read.get_path(c, "securityContext.allowPrivilegeEscalation") is not False:
            v.append(f"privilege escalation: {where}.securityContext.allowPrivilegeEscalation "
                     "must be false")
    # restricted: running as non-root
    pod_non_root = pod_sc.get("runAsNonRoot") is True
    for where, c in containers:
        own = read.get_path(c, "securityContext.runAsNonRoot")
        if own is False or (own is None and not pod_non_root):
            v.append(f"running as non-root: {where} must run with runAsNonRoot: true "
                     "(set on the pod or the container)")
    if not containers and not pod_non_root:
        v.append("running as non-root: spec.securityContext.runAsNonRoot must be true")
    # restricted: non-root user
    for where, sc in contexts:
        if sc.get("runAsUser") == 0:
            v.append(f"running as non-root user: {where}.runAsUser must not be 0")
    # baseline + restricted: seccomp
    pod_seccomp = read.get_path(pod_sc, "seccompProfile.type")
    if pod_seccomp is not None and pod_seccomp not in SECCOMP_TYPES:
        v.append(f"seccomp: spec.securityContext.seccompProfile.type is {pod_seccomp}")
    for where, c in containers:
        own = read.get_path(c, "securityContext.seccompProfile.type")
        if own is not None and own not in SECCOMP_TYPES:
            v.append(f"seccomp: {where}.securityContext.seccompProfile.type is {own}")
        elif own is None and pod_seccomp not in SECCOMP_TYPES:
            v.append(f"seccomp: {where} needs seccompProfile RuntimeDefault or Localhost "
                     "(on the pod or the container)")
    return v
