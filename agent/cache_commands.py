"""`fleetcache-agent resolve | fetch | verify | prune`: the commands on a cluster's cache volume (DESIGN §4).

Each command reads its flags (cli_options.py), names where its failure is reported
(cli_context.py), builds its source from the flags (the Hub, an S3 prefix, a volume's manifest
file, through the fleet mirror or not) and hands the work to the module that does it: fetch.py,
verify.py, prune.py. cli.py turns whatever they raise into the exit code and final record.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from fleetcache import reasons
from fleetcache.agent.cli_context import context, hide, open_progress, read_token
from fleetcache.agent.cli_options import (
    COMMON,
    DEFAULT_ENDPOINT,
    DEFAULT_TERMINATION_LOG,
    MIRROR,
    OCI,
    S3,
    bad,
    check_dest,
    check_digest,
    check_endpoint,
    check_oci_repository,
    check_repo,
    check_revision,
    globs,
    make_dest,
    need_repo,
    no_hub_repo,
    oci_only,
    one_source,
    parse_quantity,
    with_options,
)
from fleetcache.agent.errors import AgentError
from fleetcache.agent.fetch import fetch as run_fetch
from fleetcache.agent.hub import Bandwidth, HubClient, Retryable, RetryPolicy, read_timeout_from_env
from fleetcache.agent.layout import Layout
from fleetcache.agent.layouts import FETCH_LAYOUTS, fetch_layout
from fleetcache.agent.mirror import (
    FAIL,
    ORIGIN,
    PUBLISHER,
    READER,
    MirrorConfig,
    MirrorSource,
    S3Store,
    Store,
    reader_listing,
)
from fleetcache.agent.oci import OciReference, RegistryClient, parse_reference, read_registry_config
from fleetcache.agent.oci_mirror import OciStore
from fleetcache.agent.oci_source import OCI_COMMIT, Located, OciSource, located_manifest, resolve_oci
from fleetcache.agent.plan import Listing, compared_record, parse_listing, resolved_record, select
from fleetcache.agent.progress import (
    FETCH_FIELDS,
    PRUNE_FIELDS,
    RESOLVE_FIELDS,
    VERIFY_FIELDS,
    Progress,
    parse_configmap_ref,
)
from fleetcache.agent.prune import prune as run_prune
from fleetcache.agent.s3 import S3Client, S3Location
from fleetcache.agent.sources import (
    HubSource,
    S3Source,
    Source,
    manifest_commit,
    manifest_entries,
    parse_manifest,
    pinned_listing,
    resolve_s3,
)
from fleetcache.agent.usage import volume_usage
from fleetcache.agent.verify import read_volume_manifest, resolve_volume_manifest, verify_in_place
from fleetcache.agent.verify import verify as run_verify
from fleetcache.manifest import Entry, manifest_digest
from fleetcache.shapes import GIT_COMMIT, S3_COMMIT

MAX_COMPARE = 8


def _policy(progress: Progress) -> RetryPolicy:
    """The retry policy of the environment, telling the progress record what it is retrying."""
    return dataclasses.replace(RetryPolicy.from_env(), report=progress.note)


def _client(endpoint: str, token: str | None, progress: Progress, concurrency: int = 8) -> HubClient:
    return HubClient(check_endpoint(endpoint), token, _policy(progress), pool_size=concurrency,
                     timeout=read_timeout_from_env())


def _patterns(allow, ignore) -> str:
    shown = [f"--allow {p!r}" for p in allow] + [f"--ignore {p!r}" for p in ignore]
    return " ".join(shown) if shown else "no --allow/--ignore patterns"


def _listing(client: HubClient, repo: str, revision: str, allow, ignore):
    """The listing and the entries the patterns select; selecting nothing is refused (14): a
    cache with no files would be Ready and useless."""
    listing = parse_listing(repo, revision, client.listing(repo, revision))
    entries = select(listing.entries, globs(allow), globs(ignore))
    if not entries:
        raise AgentError(reasons.InvalidSource, f"{_patterns(allow, ignore)} select none of the "
                                          f"{len(listing.entries)} files of {repo}@{listing.commit}")
    return listing, entries


def _compared(client: HubClient, repo: str, commit: str, allow, ignore, entries) -> dict:
    """The same selection of a served commit; one the hub no longer knows is reported missing."""
    try:
        listing = parse_listing(repo, commit, client.listing(repo, commit))
    except AgentError as err:
        if err.reason != reasons.SourceNotFound:
            raise
        return compared_record(commit, entries, None)
    other = select(listing.entries, globs(allow), globs(ignore))
    return compared_record(commit, entries, other)


def _s3_client(location: S3Location, progress: Progress, concurrency: int = 8) -> S3Client:
    """The S3 wrapper for the source or the mirror; its credentials are hidden from logs from here on."""
    if location.endpoint:
        check_endpoint(location.endpoint)
    client = S3Client(location, _policy(progress), pool_size=concurrency, timeout=read_timeout_from_env())
    hide(client.secrets)
    return client


def _resolve_s3(progress: Progress, location: S3Location, allow, ignore, compare) -> dict:
    """List and pin the prefix (contract §C, §D): the record carries the manifest every cluster fetches."""
    progress.phase("Resolving", repo=location.repo)
    if len(compare) > MAX_COMPARE or not all(S3_COMMIT.fullmatch(c) for c in compare):
        raise bad("--compare", f"at most {MAX_COMPARE} S3 commits (s3- and 40 hex)")
    client = _s3_client(location, progress)
    manifest = resolve_s3(client, globs(allow), globs(ignore), 8, progress.note)
    if not manifest:
        raise AgentError(reasons.InvalidSource, f"{_patterns(allow, ignore)} select none of the objects under "
                                          f"{location.describe()}")
    entries = manifest_entries(manifest)
    listing = Listing(location.repo, None, manifest_commit(manifest), entries)
    # An S3 prefix has no history to compare with: a compared commit is reported missing.
    return {**resolved_record(listing, entries), "manifest": manifest,
            "compared": [compared_record(c, entries, None) for c in sorted(set(compare))]}


def _registry_client(reference: str, registry_config: str | None, plain_http: bool, progress: Progress,
                     concurrency: int = 8) -> RegistryClient:
    """The registry client for --oci-reference; its credentials, and every token it receives, are hidden
    from logs."""
    ref = parse_reference(reference)
    credentials = read_registry_config(registry_config, ref.registry) if registry_config else None
    client = RegistryClient(ref, credentials, plain_http, _policy(progress), pool_size=concurrency,
                            timeout=read_timeout_from_env(), on_secret=hide)
    hide(client.secrets)
    return client


def _resolve_oci(progress: Progress, client: RegistryClient, allow, ignore, compare) -> dict:
    """Pin the manifest digest (design/oci.md): the record carries the fleet manifest and the reference by digest."""
    ref = client.reference
    progress.phase("Resolving", repo=ref.repo, revision=ref.name)
    if len(compare) > MAX_COMPARE or not all(OCI_COMMIT.fullmatch(c) for c in compare):
        raise bad("--compare", f"at most {MAX_COMPARE} OCI commits (oci- and 40 hex)")
    resolved = resolve_oci(client, ref, globs(allow), globs(ignore), 8, progress.note)
    entries = _selected_oci(resolved.entries(), allow, ignore, ref)
    listing = Listing(ref.repo, ref.name, resolved.commit, entries)
    # Like an S3 prefix, a registry gives no history to compare with: a compared commit is reported missing.
    return {**resolved_record(listing, entries), "manifest": resolved.manifest, "reference": str(resolved.reference),
            "compared": [compared_record(c, entries, None) for c in sorted(set(compare))]}


def _selected_oci(entries: tuple[Entry, ...], allow, ignore, ref: OciReference) -> tuple[Entry, ...]:
    """Selecting nothing is refused (14), as for the other sources."""
    if not entries:
        raise AgentError(reasons.InvalidSource, f"{_patterns(allow, ignore)} select none of the files of {ref}")
    return entries


@click.command()
@with_options(COMMON)
@click.option("--compare", "compare", multiple=True,
              help="a served commit (40 hex) to report what the resolved commit shares with, repeatable")
@with_options(S3)
@click.option("--manifest-file", "volume_manifest",
              help="an existing volume's manifest file (JSON list of {path, size, sha256}) to pin")
@with_options(OCI)
def resolve(endpoint, repo, revision, token_file, allow, ignore, progress_file, progress_configmap,
            termination_log, compare, s3_bucket, s3_prefix, s3_region, s3_endpoint, credentials_dir,
            volume_manifest, oci_reference, registry_config, plain_http) -> None:
    """List REPO at REVISION (or an S3 prefix, a volume's manifest file, an OCI reference) and print {repo,
    revision, commit, files, bytes, manifestDigest}."""
    context["termination"] = Path(termination_log)
    progress = open_progress(RESOLVE_FIELDS, progress_file, progress_configmap)
    oci_only(oci_reference, registry_config, plain_http)
    if oci_reference is not None:
        one_source(repo, s3_bucket, oci_reference, volume_manifest)
        registry = _registry_client(oci_reference, registry_config, plain_http, progress)
        _resolved(progress, _resolve_oci(progress, registry, allow, ignore, compare))
        return
    if volume_manifest is not None:
        no_hub_repo(repo)
        progress.phase("Resolving")
        record = resolve_volume_manifest(Path(volume_manifest), globs(allow), globs(ignore))
        _resolved(progress, record)
        return
    if s3_bucket is not None:
        no_hub_repo(repo)
        location = S3Location(s3_bucket, s3_prefix, s3_region, s3_endpoint, credentials_dir)
        record = _resolve_s3(progress, location, allow, ignore, compare)
        _resolved(progress, record)
        return
    token = read_token(token_file)
    progress.phase("Resolving", repo=check_repo(need_repo(repo)), revision=check_revision(revision))
    if len(compare) > MAX_COMPARE:
        raise bad("--compare", f"given {len(compare)} times; at most {MAX_COMPARE}")
    for commit in compare:
        if not GIT_COMMIT.fullmatch(commit):
            raise bad("--compare", f"{commit!r} is not a 40-hex commit")
    client = _client(endpoint, token, progress)
    listing, entries = _listing(client, repo, revision, allow, ignore)
    record = {**resolved_record(listing, entries),
              "compared": [_compared(client, repo, c, allow, ignore, entries) for c in sorted(set(compare))]}
    _resolved(progress, record)


def _resolved(progress: Progress, record: dict) -> None:
    """The Resolved record, to the progress sinks and as the command's output."""
    progress.phase("Resolved", **record)
    click.echo(json.dumps(record, sort_keys=True))


@click.command()
@with_options(COMMON)
@click.option("--dest", required=True)
@click.option("--concurrency", default=8, show_default=True, type=str)
@click.option("--bandwidth", help="total cap as a Kubernetes quantity, e.g. 200Mi")
@click.option("--layout", "layout_name", default="hf-cache", show_default=True,
              help="flat: plain files, each commit in DEST/commits/<commit>, DEST/current -> the latest")
@click.option("--wait", is_flag=True, help="wait for another writer instead of exiting 16")
@click.option("--ref", "refs", multiple=True,
              help="after success, name the commit fetched (hub/models--ORG--NAME/refs/REF), repeatable")
@with_options(S3)
@click.option("--commit", help="S3, OCI: the resolved commit (s3- or oci- and 40 hex)")
@click.option("--manifest-digest", "pinned_digest",
              help="the resolved manifest digest (S3, and OCI with --manifest-file: required; Hub: the listing "
                   "must match it, and a mirror reader of a --revision commit plans from the mirror's manifest "
                   "without the Hub)")
@click.option("--manifest-file", help="S3, OCI: the resolved manifest (JSON list, the resolve record's manifest)")
@click.option("--manifest-configmap", help="S3, OCI: NAMESPACE/NAME of a ConfigMap with key manifest.json")
@with_options(MIRROR)
@with_options(OCI)
def fetch(endpoint, repo, revision, token_file, allow, ignore, progress_file, progress_configmap,
          termination_log, dest, concurrency, bandwidth, layout_name, wait, refs, s3_bucket, s3_prefix, s3_region,
          s3_endpoint, credentials_dir, commit, pinned_digest, manifest_file, manifest_configmap, mirror_bucket,
          mirror_oci_repository, mirror_registry_config, mirror_plain_http, mirror_prefix, mirror_region,
          mirror_endpoint, mirror_credentials_dir, mirror_role, mirror_on_missing, oci_reference, registry_config,
          plain_http) -> None:
    """Download REPO at REVISION (or an S3 source's pinned manifest, or an OCI reference) into DEST, verifying
    every byte while it streams; with --mirror-bucket or --mirror-oci-repository, through the fleet mirror
    (publisher or reader)."""
    context["termination"] = Path(termination_log)
    progress = open_progress(FETCH_FIELDS, progress_file, progress_configmap)
    token = read_token(token_file)
    oci_only(oci_reference, registry_config, plain_http)
    one_source(repo, s3_bucket, oci_reference)
    if s3_bucket is None and oci_reference is None:
        check_repo(need_repo(repo))
        for flag, value in (("--commit", commit), ("--manifest-file", manifest_file),
                            ("--manifest-configmap", manifest_configmap)):
            if value is not None:
                raise bad(flag, "only with --s3-bucket or --oci-reference (a Hub fetch pins --revision)")
        check_digest(pinned_digest, required=False)
    elif s3_bucket is not None:
        no_hub_repo(repo)
    check_revision(revision)
    for ref in refs:
        if GIT_COMMIT.fullmatch(check_revision(ref, "--ref")):
            raise bad("--ref", f"{ref!r} is a commit; a ref is a branch or tag name that readers ask for")
    dest_path = check_dest(dest)
    progress.measure = lambda: volume_usage(dest_path)
    if not concurrency.isdigit() or not 1 <= int(concurrency) <= 64:
        raise bad("--concurrency", f"{concurrency!r} is not a whole number from 1 to 64")
    if layout_name not in FETCH_LAYOUTS:
        raise bad("--layout", f"{layout_name!r} is not one of {', '.join(sorted(FETCH_LAYOUTS))}")
    limit = Bandwidth(parse_quantity(bandwidth)) if bandwidth else None
    mirror = _mirror_config(_mirror_location(mirror_bucket, mirror_prefix, mirror_region, mirror_endpoint,
                                             mirror_credentials_dir),
                            _mirror_registry(mirror_oci_repository, mirror_registry_config, mirror_plain_http,
                                             progress, int(concurrency)),
                            mirror_role, mirror_on_missing, progress, int(concurrency))
    progress.phase("Resolving")
    complete = None
    client: HubClient | S3Client | RegistryClient
    source: Source
    if oci_reference is not None:
        client = _registry_client(oci_reference, registry_config, plain_http, progress, int(concurrency))
        listing, located = _oci_listing(progress, client, commit, pinned_digest, manifest_file, manifest_configmap,
                                        allow, ignore, int(concurrency))
        repo, entries = listing.repo, listing.entries
        source = OciSource(client, located)
    elif s3_bucket is None:
        client = _client(endpoint, token, progress, int(concurrency))
        listing, entries, complete = _hub_listing(client, mirror, Layout(dest_path, repo), repo, revision,
                                                  pinned_digest, allow, ignore)
        source = HubSource(client, repo, listing.commit)
    else:
        location = S3Location(s3_bucket, s3_prefix, s3_region, s3_endpoint, credentials_dir)
        client = _s3_client(location, progress, int(concurrency))
        if commit is None or not S3_COMMIT.fullmatch(commit):
            raise bad("--commit", f"{commit!r} is not an S3 commit (s3- and 40 hex); pass the resolved commit")
        check_digest(pinned_digest)
        manifest = parse_manifest(_pinned_json(manifest_file, manifest_configmap, client.policy))
        repo = location.repo
        listing, entries = pinned_listing(repo, manifest, commit, pinned_digest)
        source = S3Source(client, manifest)
    make_dest(dest_path)  # only now: a listing refused writes nothing, not even --dest
    layout = fetch_layout(layout_name, dest_path, repo, listing.commit)
    if mirror is not None:
        source = MirrorSource(source, mirror, repo, listing.commit, manifest_digest(entries), entries, complete)
    record = run_fetch(source, layout, listing, entries, progress, int(concurrency), limit,
                       client.policy, wait, tuple(refs))
    click.echo(json.dumps(record, sort_keys=True))


def _hub_listing(client: HubClient, mirror: MirrorConfig | None, layout, repo: str, revision: str,
                 digest: str | None, allow, ignore):
    """What a Hub fetch plans from, and whether the mirror is known complete (None: not asked). A mirror
    reader of a pinned commit and digest makes no Hub request when the volume or the mirror holds the
    manifest (contract §C); otherwise the Hub listing, which must give --manifest-digest when given (15:
    a Job built from another resolve)."""
    complete = None
    if mirror is not None and mirror.role == READER and digest and GIT_COMMIT.fullmatch(revision):
        listing, complete = reader_listing(mirror, layout, repo, revision, digest)
        if listing is not None:
            return listing, listing.entries, complete
    listing, entries = _listing(client, repo, revision, allow, ignore)
    if digest is not None and manifest_digest(entries) != digest:
        raise bad("--manifest-digest", f"{digest} is not the digest {manifest_digest(entries)} of the selected "
                                        f"files of {repo}@{listing.commit}: the Job was built from another resolve")
    return listing, entries, complete


def _oci_listing(progress: Progress, client: RegistryClient, commit, digest, manifest_file, manifest_configmap,
                 allow, ignore, concurrency: int) -> tuple[Listing, tuple[Located, ...]]:
    """What an OCI fetch plans from. Given the pinned manifest resolve recorded (as the hydration Job is), no
    manifest is asked for and nothing is hashed again: each entry names its blob, read by digest from the
    reference's repository, so a tag moved since resolve changes nothing. Without it (a fetch by hand), the
    reference is resolved first, then fetched the same way. The tag, if any, is kept as a ref."""
    ref = client.reference
    if manifest_file is None and manifest_configmap is None:
        if commit is not None:
            raise bad("--commit", "only with --manifest-file or --manifest-configmap (the manifest resolve pinned)")
        check_digest(digest, required=False)
        resolved = resolve_oci(client, ref, globs(allow), globs(ignore), concurrency, progress.note)
        commit, located = resolved.commit, resolved.located
        entries = _selected_oci(resolved.entries(), allow, ignore, ref)
        if digest is None:
            digest = manifest_digest(entries)
    else:
        if commit is None or not OCI_COMMIT.fullmatch(commit):
            raise bad("--commit", f"{commit!r} is not an OCI commit (oci- and 40 hex); pass the resolved commit")
        check_digest(digest)
        located = located_manifest(_pinned_json(manifest_file, manifest_configmap, client.policy))
        entries = tuple(item.entry for item in located)
    if manifest_digest(entries) != digest:
        raise bad("--manifest-digest", f"{digest} is not the digest {manifest_digest(entries)} of the files to "
                                       f"fetch from {ref}: the Job was built from another resolve")
    return Listing(ref.repo, ref.tag, commit, entries), located


def _pinned_json(manifest_file, manifest_configmap, policy: RetryPolicy) -> object:
    """The manifest resolve latched (contract §D), from the mounted file or the ConfigMap, as JSON."""
    if (manifest_file is None) == (manifest_configmap is None):
        raise bad("--manifest-file", "give exactly one of --manifest-file and --manifest-configmap")
    if manifest_file is not None:
        try:
            return json.loads(Path(manifest_file).read_text())
        except OSError as err:
            raise bad("--manifest-file", f"cannot read it ({type(err).__name__})") from None
        except ValueError:
            raise bad("--manifest-file", "not JSON") from None
    namespace, name = parse_configmap_ref(manifest_configmap)

    def read():
        try:
            data = context["configmap_api"]().read_namespaced_config_map(name, namespace).data or {}
        except Exception as err:  # noqa: BLE001 - the API server's failures are retried, a 404 is a wrong flag
            if getattr(err, "status", None) == 404:
                raise bad("--manifest-configmap", f"{manifest_configmap} does not exist") from None
            raise Retryable(AgentError(reasons.SourceUnreachable, f"reading ConfigMap {manifest_configmap}: "
                                                            f"{type(err).__name__}")) from None
        if "manifest.json" not in data:
            raise bad("--manifest-configmap", f"{manifest_configmap} has no key manifest.json")
        try:
            return json.loads(data["manifest.json"])
        except ValueError:
            raise bad("--manifest-configmap", "manifest.json is not JSON") from None

    return policy.run(read, f"reading ConfigMap {manifest_configmap}")


def _mirror_location(bucket, prefix, region, endpoint, credentials_dir) -> S3Location | None:
    """The S3 mirror of --mirror-bucket, if any."""
    if bucket is None:
        for flag, value in (("--mirror-endpoint", endpoint), ("--mirror-credentials-dir", credentials_dir)):
            if value is not None:
                raise bad(flag, "only with --mirror-bucket")
        return None
    return S3Location(bucket, prefix, region, endpoint, credentials_dir)


def _mirror_registry(repository: str | None, registry_config: str | None, plain_http: bool, progress: Progress,
                     concurrency: int) -> RegistryClient | None:
    """The OCI mirror's registry client (--mirror-oci-repository); its credentials are hidden from logs."""
    if repository is None:
        for flag, given in (("--mirror-registry-config", registry_config is not None),
                            ("--mirror-plain-http", plain_http)):
            if given:
                raise bad(flag, "only with --mirror-oci-repository")
        return None
    host, path = check_oci_repository(repository)
    credentials = read_registry_config(registry_config, host, "--mirror-registry-config") if registry_config \
        else None
    client = RegistryClient(OciReference(host, path, None, None), credentials, plain_http, _policy(progress),
                            pool_size=concurrency, timeout=read_timeout_from_env(), on_secret=hide,
                            secret_field="spec.distribution.mirror.oci.pushSecretRef, --mirror-registry-config",
                            action="push to")
    hide(client.secrets)
    return client


def _mirror_config(location: S3Location | None, registry: RegistryClient | None, role, on_missing,
                   progress: Progress, concurrency: int) -> MirrorConfig | None:
    """The fleet mirror of --mirror-bucket (S3) or --mirror-oci-repository (a registry), not both."""
    if location is None and registry is None:
        if role is not None:
            raise bad("--mirror-role", "only with --mirror-bucket or --mirror-oci-repository")
        return None
    if location is not None and registry is not None:
        raise bad("--mirror-oci-repository", "not with --mirror-bucket: give one fleet mirror")
    if role not in (PUBLISHER, READER):
        raise bad("--mirror-role", f"{role!r} is not publisher or reader")
    if on_missing not in (ORIGIN, FAIL):
        raise bad("--mirror-on-missing", f"{on_missing!r} is not origin or fail")
    store: Store
    if registry is not None:
        store = OciStore(registry, concurrency)
    else:
        assert location is not None
        store = S3Store(_s3_client(location, progress, concurrency), location.prefix, concurrency, progress.note)
    return MirrorConfig(store, role, on_missing)


@click.command()
@click.option("--dest", required=True)
@click.option("--repo", help="ORG/NAME, the repo fetched into --dest  [required; not with --manifest-file]")
@click.option("--revision", help="the ref or commit fetched (default: the only commit under --dest, else main)")
@click.option("--termination-log", default=DEFAULT_TERMINATION_LOG, show_default=True)
@click.option("--layout", "layout_name", help="flat: an existing volume checked in place (spec.source.volume)")
@click.option("--manifest-file", help="flat: the pinned manifest to check against")
@click.option("--manifest-digest", "pinned_digest", help="flat: the manifest's resolved digest")
@click.option("--endpoint", default=DEFAULT_ENDPOINT, show_default=True)
@click.option("--token-file")
@click.option("--allow", multiple=True)
@click.option("--ignore", multiple=True)
@click.option("--progress-file")
@click.option("--progress-configmap", help="NAMESPACE/NAME")
def verify(dest, repo, revision, termination_log, layout_name, manifest_file, pinned_digest, endpoint, token_file,
           allow, ignore, progress_file, progress_configmap) -> None:
    """Re-hash every file of the snapshot against its manifests; exit 19 naming the bad files. With --layout
    flat, an existing volume against --manifest-file or the Hub listing of --repo at --revision: exit 21 naming
    up to 5 files."""
    context["termination"] = Path(termination_log)
    progress = open_progress(VERIFY_FIELDS, progress_file, progress_configmap)
    dest_path = check_dest(dest)
    progress.measure = lambda: volume_usage(dest_path)
    if layout_name is not None:
        if layout_name != "flat":
            raise bad("--layout", f"{layout_name!r}: verify checks an existing volume in place, --layout flat")
        progress.phase("Verifying")
        if manifest_file is not None:
            no_hub_repo(repo)
            entries = manifest_entries(read_volume_manifest(Path(manifest_file)))
        else:
            client = _client(endpoint, read_token(token_file), progress)
            _, entries = _listing(client, check_repo(need_repo(repo, "or --manifest-file")),
                                  check_revision(revision or "main"), allow, ignore)
        click.echo(json.dumps(verify_in_place(dest_path, entries, pinned_digest), sort_keys=True))
        return
    check_repo(need_repo(repo, "the repo fetched into --dest"))
    click.echo(json.dumps({**run_verify(dest_path, repo, revision), **volume_usage(dest_path)}, sort_keys=True))


@click.command()
@click.option("--dest", required=True)
@click.option("--repo", required=True)
@click.option("--keep", multiple=True, help="a commit (40 hex) to keep, repeatable; at least one")
@click.option("--wait", is_flag=True, help="wait for another writer instead of exiting 16")
@click.option("--progress-file")
@click.option("--progress-configmap", help="NAMESPACE/NAME")
@click.option("--termination-log", default=DEFAULT_TERMINATION_LOG, show_default=True)
def prune(dest, repo, keep, wait, progress_file, progress_configmap, termination_log) -> None:
    """Remove every commit of REPO under DEST but the kept ones: refs, snapshots, manifests, unshared blobs."""
    context["termination"] = Path(termination_log)
    progress = open_progress(PRUNE_FIELDS, progress_file, progress_configmap)
    check_repo(repo)
    if not keep:
        raise bad("--keep", "not given: a prune must keep at least one commit (the one the volume serves)")
    for commit in keep:
        if not (GIT_COMMIT.fullmatch(commit) or S3_COMMIT.fullmatch(commit) or OCI_COMMIT.fullmatch(commit)):
            raise bad("--keep", f"{commit!r} is not a 40-hex commit (or an S3 or OCI source's s3- or oci- commit)")
    dest_path = check_dest(dest)
    if not dest_path.is_dir():
        raise bad("--dest", f"{dest!r} does not exist: pass the cache volume's mount path")
    progress.measure = lambda: volume_usage(dest_path)
    click.echo(json.dumps(run_prune(dest_path, repo, frozenset(keep), progress, wait), sort_keys=True))
