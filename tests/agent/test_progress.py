"""Progress records: throttled, always at phase changes, to a file and a ConfigMap that may fail."""

from __future__ import annotations

import json

from fleetcache.agent.errors import AgentError
from fleetcache.agent.progress import FETCH_FIELDS, ConfigMapSink, Progress, configmap_data, write_termination
from fleetcache.exitcodes import BY_REASON
from tests.agent.conftest import fetch_args, run_agent
from tests.agent.test_resolve import RecordingCoreApi
from tests.support.sinks import ListSink


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def started(clock=None):
    sink = ListSink()
    progress = Progress([sink], FETCH_FIELDS, clock=clock or Clock())
    progress.phase("Hydrating", bytesTotal=1000, bytesDone=0, filesTotal=2, filesDone=0)
    return progress, sink


def test_every_phase_change_is_emitted():
    progress, sink = started()
    progress.phase("Verifying")
    progress.phase("Ready")
    assert [r["phase"] for r in sink.records] == ["Hydrating", "Verifying", "Ready"]


def test_small_steps_within_two_seconds_are_not_emitted():
    progress, sink = started()
    for _ in range(40):
        progress.update(bytes_delta=1)
    assert len(sink.records) == 1


def test_a_five_percent_step_is_emitted_at_once():
    progress, sink = started()
    progress.update(bytes_delta=49)
    progress.update(bytes_delta=1)
    assert [r["bytesDone"] for r in sink.records] == [0, 50]


def test_two_seconds_emit_even_a_small_step():
    clock = Clock()
    progress, sink = started(clock)
    clock.now = 2.0
    progress.update(bytes_delta=1, transferred=1)
    assert sink.records[-1]["bytesDone"] == 1 and sink.records[-1]["bytesPerSecond"] == 0


def test_a_failure_record_carries_reason_and_message_with_remedy():
    progress, sink = started()
    err = AgentError("SourceNotFound", "GET /api/models/x: HTTP 404")
    progress.fail(err.reason, err.message)
    record = sink.records[-1]
    assert record["phase"] == "Failed" and record["reason"] == "SourceNotFound"
    assert record["message"] == f"GET /api/models/x: HTTP 404. {BY_REASON['SourceNotFound'].remedy}"
    assert set(record) == set(FETCH_FIELDS)


def test_configmap_data_is_all_strings_with_empty_for_unset():
    assert configmap_data({"phase": "Hydrating", "bytesDone": 12, "reason": None}) == {
        "phase": "Hydrating", "bytesDone": "12", "reason": ""}


def test_configmap_sink_patches_the_latest_record_and_flushes_on_close():
    api = RecordingCoreApi()
    sink = ConfigMapSink("ns", "cm", api_factory=lambda: api)
    sink.emit({"phase": "Hydrating", "bytesDone": 1})
    sink.emit({"phase": "Ready", "bytesDone": 2})
    sink.close()
    assert api.patches[-1] == ("cm", "ns", {"data": {"phase": "Ready", "bytesDone": "2"}})


def test_a_configmap_that_cannot_be_patched_never_fails_the_fetch(hub, tiny, tmp_path):
    from fleetcache.agent import cli

    api = RecordingCoreApi(fail=True)
    argv = fetch_args(hub, tmp_path, "--progress-configmap", "ns/cm")
    assert cli.main(argv, configmap_api=lambda: api) == 0


def test_without_a_cluster_the_configmap_sink_warns_and_the_fetch_succeeds(hub, tiny, tmp_path):
    result = run_agent(*fetch_args(hub, tmp_path, "--progress-configmap", "ns/cm"))
    assert result.code == 0 and "could not patch ConfigMap ns/cm" in result.stderr


def test_the_fetch_patches_phases_in_order(hub, tiny, tmp_path):
    from fleetcache.agent import cli

    api = RecordingCoreApi()
    assert cli.main(fetch_args(hub, tmp_path, "--progress-configmap", "ns/cm"), configmap_api=lambda: api) == 0
    final = api.patches[-1][2]["data"]
    assert final["phase"] == "Ready" and final["bytesDone"] == final["bytesTotal"] and set(final) == set(FETCH_FIELDS)


def test_the_termination_message_is_written_only_where_the_file_exists(tmp_path):
    missing = tmp_path / "absent"
    write_termination(missing, {"phase": "Failed"})
    assert not missing.exists()
    present = tmp_path / "termination-log"
    present.touch()
    write_termination(present, {"phase": "Failed", "reason": "AuthFailed"})
    assert json.loads(present.read_text())["reason"] == "AuthFailed"
