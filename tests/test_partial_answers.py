"""Half an answer is not an answer: a job is not judged idle on a reading that lacks what protects it.

Both cases were found by a prober on the fault world (tests/fault_world.py: the real sweep, the loopback Kubernetes
API server and a stand-in Prometheus answering from the simulator). A dataset download (GPU quiet, network at
60-90 MB/s) was warned and evicted when (1) only its node's cAdvisor scrape target was down, so Prometheus answered
the CPU/IO queries with no series for it and no warning, or (2) VictoriaMetrics' vmselect answered with
`"isPartial": true` (a vmstorage node down) and no `warnings` at all.
"""

from __future__ import annotations

import copy
import json

import pytest

from tests.fault_world import SCENARIO, SimPrometheus, World, executions

DL = "ml/dataset-download"


def scenario() -> dict:
    s = copy.deepcopy(SCENARIO)
    s["pools"][0]["nodes"] = 2
    s["jobs"].append({"id": DL, "user": "erin", "gpus": 1, "node": "a100-1",
                      "phases": [{"gpu_util": 0, "gpu_mem_gb": 2, "cpu_pct": 8, "net_rx_mbps": [60, 90]}]})
    return s


class NoCadvisor(SimPrometheus):
    """Node a100-1's kubelet/cAdvisor target is down: no container_* series for its pods; dcgm-exporter answers."""

    io_down = False

    def _range(self, name, wanted, start, end, step, n):
        out = super()._range(name, wanted, start, end, step, n)
        if self.io_down and name in ("cpu_pct", "net_rx_mbps", "disk_read_mbps", "disk_write_mbps"):
            return [s for s in out if s["metric"].get("pod") != "dataset-download"]
        return out


class VmPartial(SimPrometheus):
    """vmselect with a vmstorage node down: the CPU/IO answers lack the download's series and say isPartial."""

    partial = False

    def __call__(self, path, params):
        result = super().__call__(path, params)
        if not self.partial:
            return result
        is_io = "container_" in params["query"]
        if is_io and isinstance(result, list):
            result = [s for s in result if s["metric"].get("pod") != "dataset-download"]
        kind = "matrix" if path.endswith("query_range") else "vector"
        return json.dumps({"status": "success", "isPartial": is_io,
                           "data": {"resultType": kind, "result": result}}).encode()


def sweeps(world: World, svc, minutes: range) -> list:
    out = []
    for m in minutes:
        world.at(m)
        out.append(svc.sweep())
    return out


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path, scenario())
    yield w
    w.close()


def test_a_download_whose_io_series_vanished_is_not_judged_idle_and_the_report_says_so(world):
    world.metrics_answer.__class__ = NoCadvisor
    svc = world.service()
    world.metrics_answer.io_down = True
    runs = sweeps(world, svc, range(65, 125, 5))
    assert executions(svc.deps.audit, target=DL) == []
    assert not world.evictions("/api/v1/namespaces/ml/pods/dataset-download/eviction")
    report = runs[-1].state["report"]
    assert "idle not judged" in report and f"{DL} (CPU/disk read/disk write/network)" in report, report
    # The idle notebook beside it, whose I/O is read, is still warned and stopped: one job's gap is that job's only.
    assert [e.action for e in executions(svc.deps.audit)] == ["notify", "terminate"]


def test_the_same_download_with_its_io_read_is_left_alone(world):
    world.metrics_answer.__class__ = NoCadvisor
    svc = world.service()
    runs = sweeps(world, svc, range(65, 125, 5))
    assert executions(svc.deps.audit, target=DL) == []
    assert "idle not judged" not in runs[-1].state["report"]


def test_a_partial_victoriametrics_answer_marks_the_sweep_degraded_and_nothing_is_done(world):
    world.metrics_answer.__class__ = VmPartial
    svc = world.service()
    world.metrics_answer.partial = True
    runs = sweeps(world, svc, range(65, 125, 5))
    assert all(r.state["observed"]["degraded"] for r in runs)
    assert "isPartial" in " ".join(runs[-1].state["observed"]["degraded"])
    assert executions(svc.deps.audit, target=DL) == []


def test_response_warnings_read_victoriametrics_is_partial():
    from tools.prometheus import VM_PARTIAL, response_warnings

    assert response_warnings(b'{"status":"success","isPartial":true,"data":{"result":[]}}') == [VM_PARTIAL]
    assert response_warnings(b'{"status":"success","isPartial":false,"data":{"result":[]}}') == []
    assert response_warnings(b'{"isPartial":true,"warnings":["store down"]}') == ["store down", VM_PARTIAL]


def test_what_the_scheduler_left_out_is_a_note_and_every_other_job_is_judged(world):
    """A Slurm listing drops a row that did not check out (a job name forging another row) and names it: that job
    only. As `degraded` it would have stopped every idle finding in the cluster; as a note the report says it and the
    idle notebook beside it is warned as usual."""
    svc = world.service()
    note = "squeue row dropped (a field with a control character): job 4242 of user mallory is not judged"
    svc.deps.scheduler.warnings = [note]
    runs = sweeps(world, svc, range(65, 80, 5))
    assert runs[-1].state["observed"]["notes"] == [note] and runs[-1].state["observed"]["degraded"] == []
    assert f"scheduler note: {note}" in runs[-1].state["report"]
    assert [e.action for e in executions(svc.deps.audit)] == ["notify"]


class NoNotebookNetwork(SimPrometheus):
    """Only the notebook's network series is missing (a hostNetwork pod, a cri-o node: okd#1637); its CPU and disk,
    and every series of the training pod beside it, are read."""

    def _range(self, name, wanted, start, end, step, n):
        out = super()._range(name, wanted, start, end, step, n)
        if name == "net_rx_mbps":
            return [s for s in out if s["metric"].get("pod") != "idle-notebook"]
        return out


def test_a_job_missing_one_io_series_is_judged_and_its_stop_waits_for_a_person(world):
    """A reviewer: skipping every job that lacks one field hid every idle GPU job on such nodes ("No waste found").
    Only all of them missing leaves a job unjudged; one missing may be where it works: warned, stop for a person."""
    world.metrics_answer.__class__ = NoNotebookNetwork
    svc = world.service()
    runs = sweeps(world, svc, range(65, 185, 5))
    done = [(e.action, e.status) for e in executions(svc.deps.audit)]
    assert ("notify", "executed") in done and ("terminate", "executed") not in done, done
    assert "idle not judged" not in runs[-1].state["report"]
    [warning] = [e for e in executions(svc.deps.audit) if e.action == "notify"][:1]
    assert "network metrics are read for other jobs but not for it" in (warning.reason or ""), warning.reason
