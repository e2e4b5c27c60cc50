"""The token goes only to the endpoint's host and never into any output."""

from __future__ import annotations

import json

import pytest

from fleetcache.devtools.testhub import Fault
from tests.agent.conftest import TOKEN, fetch_args, make_model, run_agent

PRIVATE = "acme/private"


def private_repo(hub, tmp_path):
    hub.add_repo(PRIVATE, make_model(2_000_000, shards=2), private=True)
    hub.add_token(TOKEN, repos=(PRIVATE,))
    token = tmp_path / "token"
    token.write_text(TOKEN)
    return token


def test_the_token_reaches_the_hub_but_never_the_cdn(hub, tmp_path):
    token = private_repo(hub, tmp_path)
    result = run_agent(*fetch_args(hub, tmp_path / "d", "--token-file", str(token), repo=PRIVATE))
    assert result.code == 0, result.stderr
    assert hub.requests("cdn") and all("Authorization" not in r.headers for r in hub.requests("cdn"))
    assert all(r.headers.get("Authorization") == f"Bearer {TOKEN}" for r in hub.requests("hub"))


def test_the_token_appears_in_no_output_of_a_run_with_faults_and_a_failure(hub, tmp_path):
    from fleetcache.agent import cli
    from tests.agent.test_resolve import RecordingCoreApi

    token = private_repo(hub, tmp_path)
    hub.inject(Fault("reset", host="cdn", after_bytes=1000, times=2))
    hub.inject(Fault("status", path="*tokenizer.json", status=404, times=None))
    progress, termination = tmp_path / "p.json", tmp_path / "termination"
    termination.touch()
    api = RecordingCoreApi()
    args = fetch_args(hub, tmp_path / "d", "--token-file", str(token), "--progress-file", str(progress),
                      "--termination-log", str(termination), "--progress-configmap", "ns/cm", repo=PRIVATE)
    result = run_agent(*args)
    assert cli.main(args, configmap_api=lambda: api) == result.code == 11
    outputs = [result.stdout, result.stderr, progress.read_text(), termination.read_text(), json.dumps(api.patches)]
    outputs += [p.read_bytes().decode(errors="replace") for p in (tmp_path / "d").rglob("*")
                if p.is_file() and not p.is_symlink()]
    assert api.patches and termination.read_text()
    assert not [o for o in outputs if TOKEN in o]


def test_a_same_host_redirect_keeps_the_token(hub, tmp_path):
    from fleetcache.agent.hub import HubClient, RetryPolicy

    token = private_repo(hub, tmp_path)
    client = HubClient(hub.endpoint, token.read_text(), RetryPolicy())
    resp = client.request("GET", f"{hub.endpoint}/{PRIVATE}/resolve/main/config.json")
    assert resp.status == 200 and hub.requests()[-1].headers["Authorization"] == f"Bearer {TOKEN}"


def test_the_token_is_not_sent_to_another_port_on_the_same_host(hub, tmp_path):
    from fleetcache.agent.hub import HubClient, Retryable, RetryPolicy

    assert hub.endpoint.split(":")[1] == hub.cdn_endpoint.split(":")[1]  # same host, other port
    client = HubClient(hub.endpoint, TOKEN, RetryPolicy())
    with pytest.raises(Retryable):  # a CDN 404 is retried through a fresh redirect
        client.request("GET", f"{hub.cdn_endpoint}/lfs/{'0' * 64}")
    assert "Authorization" not in hub.requests("cdn")[-1].headers
