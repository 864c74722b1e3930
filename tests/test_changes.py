"""Change governance (docs/changes.md): the change store on SQLite and Postgres, detection at each sweep (driver and
CUDA versions from node labels, images, the policy), the impact report and its rule, the CLI and the API, and the
driver-upgrade-failures scenario, whose upgrade is followed by failures and XIDs and is flagged."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from agent.cli.main import main as steward
from agent.config.policy import Policy
from agent.config.settings import ApiToken, Settings
from agent.planning.policy_model import PolicyModel
from agent.records.audit import AuditLog
from agent.records.change_impact import MIN_EVENTS, collect_signals, detect, impact, render_impact, watch
from agent.records.changes import ChangeStore
from agent.wiring import simulated_deps
from core.cluster import GpuSeries, JobInfo, NodeInfo
from core.observation import Observation
from server import create_app
from sim.scenario import load_scenario
from tests.sweeps import sweep_through

T0 = datetime(2026, 11, 2, 6, 0, tzinfo=UTC)
SCENARIO = Path(__file__).resolve().parent.parent / "evals" / "scenarios" / "driver-upgrade-failures.yaml"
H = timedelta(hours=1)


@pytest.fixture(params=["sqlite", "postgres"])
def where(request, tmp_path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "changes.sqlite")
    return str(request.getfixturevalue("postgres_url"))


def test_a_change_is_recorded_once_by_its_key_and_kept_across_a_restart(where):
    store = ChangeStore(where)
    first, added = store.record(key="driver:550", kind="driver", target="NVIDIA driver 550", description="535 -> 550",
                                at=T0, now=T0, source="detected", by="steward", detail={"nodes": ["a"]})
    again, added_again = store.record(key="driver:550", kind="driver", target="x", description="y", at=T0 + H,
                                      now=T0 + H, source="detected", by="steward")
    assert added and not added_again and again == first
    other, _ = store.record(key="policy:1", kind="policy", target="policy", description="", at=T0 + H, now=T0 + H,
                            source="detected", by="steward")
    assert other.id == first.id + 1  # a repeated key uses up no id
    assert store.add_signal("xid:a:0:79:t", "xid", T0 + H, "a GPU 0") and not store.add_signal(
        "xid:a:0:79:t", "xid", T0 + H, "a GPU 0")
    assert store.flag(first.id, T0 + 2 * H, {"flagged": True}) and not store.flag(first.id, T0 + 3 * H, {})
    store.close()
    reopened = ChangeStore(where)  # a restart, or another replica
    assert [c.key for c in reopened.changes()] == ["policy:1", "driver:550"]
    assert reopened.get(first.id).flagged_at == T0 + 2 * H  # type: ignore[union-attr]
    assert reopened.get(first.id).detail == {"nodes": ["a"]}  # type: ignore[union-attr]
    assert [s[1] for s in reopened.signals("xid", T0, T0 + 2 * H)] == ["a GPU 0"]
    assert reopened.changes(kind="driver", since=T0, until=T0)[0].id == first.id


def _obs(at: datetime, labels: dict[str, str], image: str = "img:1", xid_at: datetime | None = None) -> Observation:
    job = JobInfo(id="ml/train-0", uid="u1", scheduler="kubernetes", namespace="ml", name="train-0", user="a",
                  gpus=1, node="n1", labels={"app": "train"}, image=image, started_at=T0, submitted_at=T0)
    gpus = [GpuSeries(job=None, node="n1", gpu=0, slice_s=60, util_max=[], util_avg=[], samples=[], expected=1,
                      xid_last=79 if xid_at else 0, xid_at=xid_at)]
    return Observation(at=at, slice_s=60, lookback_s=3600, jobs=[job],
                       nodes=[NodeInfo(name="n1", gpus=8, labels=labels)], gpus=gpus)


def test_detection_takes_a_baseline_then_records_each_new_version_once():
    store, audit, policy = ChangeStore(), AuditLog(":memory:"), Policy()
    gfd = {"nvidia.com/cuda.driver.major": "535", "nvidia.com/cuda.driver.minor": "154",
           "nvidia.com/cuda.driver.rev": "05"}
    assert detect(store, audit, _obs(T0, gfd), policy, "r1") == []  # the first reading is the baseline
    assert detect(store, audit, _obs(T0 + H, gfd), policy, "r2") == []
    dcgm = {"DRIVER_VERSION": "550.54.15", "nvidia.com/cuda.runtime-version.full": "12.4"}
    found = detect(store, audit, _obs(T0 + 2 * H, dcgm, image="img:2"), policy.model_copy(
        update={"mode": "observe"}), "r3")
    assert sorted(c.kind for c in found) == ["driver", "image", "policy"]  # CUDA had no baseline: not a change
    driver = next(c for c in found if c.kind == "driver")
    assert driver.description == "NVIDIA driver 535.154.05 -> 550.54.15 (node labels)" and driver.at == T0 + 2 * H
    image = next(c for c in found if c.kind == "image")
    assert image.target == "ml/train" and image.detail["from"] == "img:1"
    assert detect(store, audit, _obs(T0 + 3 * H, dcgm, image="img:2"), policy.model_copy(
        update={"mode": "observe"}), "r4") == []  # seen: nothing new
    entries = audit.entries(kind="change", newest_first=False)
    assert [e.action for e in entries] == [c.kind for c in found]  # each on the audit timeline, once
    assert "检测到变更" in entries[0].data["reason_zh"]


def test_signals_are_counted_once_and_the_rule_needs_enough_events_and_a_doubling():
    store, audit = ChangeStore(), AuditLog(":memory:")
    change, _ = store.record(key="k", kind="driver", target="d", description="", at=T0 + 4 * H, now=T0 + 4 * H,
                             source="recorded", by="t")
    store.mark_observing(T0)
    for i in range(2):  # before: 2 XIDs
        obs = _obs(T0 + (1 + i) * H, {}, xid_at=T0 + (1 + i) * H)
        collect_signals(store, obs, [])
        collect_signals(store, obs, [])  # the same reading again adds nothing
    failed = [JobInfo(id=f"ci/j{i}", uid=f"f{i}", scheduler="kubernetes", namespace="ci", name=f"j{i}", user="c",
                      state="failed", ended_at=T0 + 4 * H + i * 10 * timedelta(minutes=1)) for i in range(MIN_EVENTS)]
    for i in range(3):  # after: 3 XIDs (not 2x of 2) and 3 failures (from none)
        collect_signals(store, _obs(T0 + 5 * H + i * timedelta(minutes=5), {},
                                    xid_at=T0 + 5 * H + i * timedelta(minutes=5)), failed)
    report = impact(store, change, T0 + 8 * H, audit)
    by = {m.name: m for m in report.measures}
    assert report.span_h == 4.0
    assert (by["xid_errors"].before, by["xid_errors"].after, by["xid_errors"].rose) == (2, 3, False)
    assert (by["job_failures"].before, by["job_failures"].after, by["job_failures"].rose) == (0, 3, True)
    assert report.flagged and report.runbook == "change-rollback"
    young = impact(store, change, T0 + 4 * H + timedelta(minutes=10), audit)
    assert young.too_early and not young.flagged
    assert "作业失败：0 → 3  ← 上升" in render_impact(report, "zh")
    assert "job failures: 0 -> 3  <- rise" in render_impact(report, "en")


def test_the_span_ends_at_the_next_change_and_starts_no_earlier_than_watching():
    store = ChangeStore()
    store.mark_observing(T0)
    first, _ = store.record(key="a", kind="other", target="a", description="", at=T0 + 3 * H, now=T0, source="recorded",
                            by="t")
    store.record(key="b", kind="other", target="b", description="", at=T0 + 4 * H, now=T0, source="recorded", by="t")
    assert impact(store, first, T0 + 10 * H).span_h == 1.0  # up to the next change
    early, _ = store.record(key="c", kind="other", target="c", description="", at=T0 + timedelta(minutes=10),
                            now=T0, source="recorded", by="t")
    assert impact(store, early, T0 + 10 * H).too_early  # 10 minutes of watching before it


def test_the_driver_upgrade_scenario_is_flagged_with_failures_and_xids():
    scenario = load_scenario(SCENARIO)
    deps, cluster = simulated_deps(scenario, Policy(), PolicyModel())
    sweep_through(deps, cluster, scenario, trigger="eval")
    store: ChangeStore = deps.changes
    changes = {c.kind: c for c in store.changes()}
    assert set(changes) == {"driver", "cuda", "scheduler"}
    driver = changes["driver"]
    assert driver.source == "detected" and driver.detail["nodes"] == ["gpu-a-1", "gpu-a-2"]
    assert driver.at == scenario.start + 4 * H and driver.flagged_at is not None
    assert changes["scheduler"].flagged_at is None and changes["scheduler"].by == "carol"  # no rise followed it
    flagged = deps.audit.entries(kind="change_impact", target=driver.target)
    assert len(flagged) == 1 and "[rb:change-rollback]" in (flagged[0].reason or "")
    final = impact(store, driver, deps.clock.now(), deps.audit)
    by = {m.name: m for m in final.measures}
    assert (by["job_failures"].before, by["job_failures"].after) == (1, 4) and by["job_failures"].rose
    assert (by["xid_errors"].before, by["xid_errors"].after) == (0, 3) and by["xid_errors"].rose
    assert not cluster.stops  # nothing was stopped for it


def test_the_scenario_passes_the_eval_with_no_false_kill():
    from evals.runner import run_scenario

    run = run_scenario(load_scenario(SCENARIO), Policy(), PolicyModel())
    assert run.score.passed and run.score.false_kills == 0


def test_watch_survives_a_repeat_of_the_same_reading():
    store, audit = ChangeStore(), AuditLog(":memory:")
    obs = _obs(T0, {"DRIVER_VERSION": "535"})
    people = [{"kind": "scheduler", "target": "volcano", "at": T0 - H, "by": "carol"}]
    first = watch(store, audit, obs, Policy(), "r1", people=people)
    assert len(first["recorded"]) == 1
    assert watch(store, audit, obs, Policy(), "r2", people=people)["recorded"] == []


# -- the CLI ---------------------------------------------------------------------------------------------------
def test_cli_records_lists_and_reports(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STEWARD_DATA_DIR", str(tmp_path))
    args = ["change", "record", "--kind", "driver", "--target", "a100", "--description", "535 -> 550",
            "--at", "2026-11-02T10:00:00Z", "--by", "ops"]
    assert steward(args) == 0
    assert "recorded change #1 (driver) a100" in capsys.readouterr().out
    assert steward(args) == 0 and "already recorded: change #1" in capsys.readouterr().out
    assert steward(["change", "record", "--kind", "driver", "--target", "  "]) == 2
    assert "invalid --target" in capsys.readouterr().err
    assert steward(["change", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(c["kind"], c["target"], c["by"]) for c in listed] == [("driver", "a100", "ops")]
    # No sweep has watched this data dir: nothing was counted, which is no "no rise".
    assert steward(["change", "impact", "1", "--now", "2026-11-02T16:00:00Z"]) == 0
    out = capsys.readouterr().out
    assert "no impact report yet" in out and "Verdict" not in out
    from agent.records.changes import ChangeStore

    ChangeStore(tmp_path / "changes.sqlite").mark_observing(datetime(2026, 11, 1, tzinfo=UTC))  # sweeps since
    assert steward(["change", "impact", "1", "--json", "--now", "2026-11-02T16:00:00Z"]) == 0
    [report] = json.loads(capsys.readouterr().out)
    assert report["span_h"] == 6.0 and not report["flagged"]
    assert steward(["change", "impact", "1", "--lang", "zh", "--now", "2026-11-02T16:00:00Z"]) == 0
    assert "结论：未见上升" in capsys.readouterr().out
    assert steward(["change", "impact", "7"]) == 1
    audit = AuditLog(tmp_path / "audit.sqlite")
    assert [e.status for e in audit.entries(kind="change")] == ["recorded"]


# -- the API ---------------------------------------------------------------------------------------------------
TOKENS = {"approver-token": ApiToken(name="ann", role="approver"), "viewer-token": ApiToken(name="vic", role="viewer")}


@pytest.fixture
def api(tmp_path):
    settings = Settings(data_dir=tmp_path, leader_lock="none", sweep_every_s=300, api_tokens=TOKENS)
    with TestClient(create_app(settings, speed=0, run_scheduler=False), base_url="http://localhost") as c:
        yield c


def _as(role: str) -> dict[str, str]:
    return {"authorization": f"Bearer {role}-token"}


def test_api_records_changes_for_approvers_and_lists_them_with_impact(api):
    body = {"kind": "image", "target": "ml/llm-serving", "description": "vllm 0.5 -> 0.6", "at": "2026-11-02T08:00:00Z"}
    assert api.post("/api/changes", json=body).status_code == 401
    assert api.post("/api/changes", json=body, headers=_as("viewer")).status_code == 403
    made = api.post("/api/changes", json=body, headers=_as("approver"))
    assert made.status_code == 201 and made.json()["change"]["by"] == "ann"
    again = api.post("/api/changes", json=body, headers=_as("approver"))
    assert again.status_code == 200 and again.json()["recorded"] is False
    page = api.get("/api/changes?lang=zh", headers=_as("viewer")).json()
    [view] = page["changes"]
    assert view["change"]["kind"] == "image" and "变更 #1（image）" in view["text"] and view["incidents"] == []
    audit = api.get("/api/audit?kind=change", headers=_as("viewer")).json()["entries"]
    assert audit[0]["target"] == "ml/llm-serving" and audit[0]["status"] == "recorded"


@pytest.mark.parametrize(("body", "field"), [
    ({"kind": "gpu", "target": "x"}, "kind"),
    ({"kind": "driver", "target": ""}, "target"),
    ({"kind": "driver", "target": "x", "at": "yesterday"}, "at"),
    ({"kind": "driver", "target": "x", "color": "red"}, "color"),
    ({"kind": "driver", "target": "x", "description": "a\nb"}, "description"),
])
def test_api_refuses_a_bad_field_naming_it(api, body, field):
    reply = api.post("/api/changes", json=body, headers=_as("approver"))
    assert reply.status_code == 422
    assert reply.json()["detail"][0]["loc"][-1] == field


@pytest.mark.parametrize("at", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00",
                                "0999-06-01T00:00:00Z", "1969-12-31T23:59:59Z", "2200-01-01T00:00:00Z"])
def test_api_refuses_a_time_outside_the_range_naming_it_in_english_and_chinese(api, at):
    """0001-01-01T00:00:00+01:00 has no UTC time (an OverflowError, a 500); year 999 was stored "999-..." and every
    later GET /api/changes was a 500."""
    reply = api.post("/api/changes", json={"kind": "driver", "target": "gpu-a", "description": "x", "at": at},
                     headers=_as("approver"))
    assert reply.status_code == 422, reply.text[:300]
    [error] = reply.json()["detail"]
    assert error["loc"][-1] == "at" and "1970-01-01" in error["msg"] and "须在" in error["msg"], error
    page = api.get("/api/changes", headers=_as("viewer"))
    assert page.status_code == 200 and page.json()["changes"] == []
    ok = {"kind": "driver", "target": "gpu-a", "at": "2199-12-31T23:59:59Z"}
    assert api.post("/api/changes", json=ok, headers=_as("approver")).status_code == 201


def test_a_stamp_has_four_year_digits_and_sorts_as_the_time_does():
    from agent.records.changes import stamp

    assert stamp(datetime(999, 6, 1, tzinfo=UTC)) == "0999-06-01T00:00:00.000000+00:00"
    assert stamp(datetime(2026, 11, 2, 6, 0, 0, 7)) == "2026-11-02T06:00:00.000007+00:00"
    times = [datetime(y, 1, 1, tzinfo=UTC) for y in (5, 999, 1000, 2026)]
    assert sorted(times, key=stamp) == times


def test_rows_an_older_version_stored_with_a_bad_time_are_left_out_and_logged(where, caplog):
    """Rows stored before times were bounded and padded (year 999 as "999-06-01...") broke every change list."""
    store = ChangeStore(where)
    good, _ = store.record(key="recorded:driver:a", kind="driver", target="a", description="", at=T0, now=T0,
                           source="recorded", by="ops")
    for n, at in enumerate(["999-06-01T00:00:00.000000+00:00", "1-01-01T00:00:00.000000+00:00",
                            "2-01-01T00:00:00.000000+00:00", "20-01-01T00:00:00.000000+00:00",
                            "0001-01-01T00:00:00.000000+00:00", "9999-12-31T00:00:00.000000+00:00"]):
        store._write("INSERT INTO changes (key, kind, target, description, at, recorded_at, source, by_whom, detail) "
                     "VALUES (?, 'driver', 'old', '', ?, ?, 'recorded', 'ops', '{}')", (f"old:{n}", at, at))
    with caplog.at_level("WARNING", logger="steward.changes"):
        assert [c.id for c in store.changes()] == [good.id]
        assert [c.id for c in store.changes(limit=1)] == [good.id]  # none takes the one place
    assert sum("left out of change lists" in r.getMessage() for r in caplog.records) == 6
    assert store.get(good.id + 1) is None and store.get(good.id) == good


def test_the_changes_page_survives_a_row_stored_with_a_short_year(api):
    store = api.app.state.runtime.deps.changes
    store._write("INSERT INTO changes (key, kind, target, description, at, recorded_at, source, by_whom, detail) "
                 "VALUES ('old', 'driver', 'old', '', '999-06-01T00:00:00.000000+00:00', "
                 "'2026-11-02T06:00:00.000000+00:00', 'recorded', 'ops', '{}')", ())
    body = {"kind": "image", "target": "ml/llm-serving", "at": "2026-11-02T08:00:00Z"}
    assert api.post("/api/changes", json=body, headers=_as("approver")).status_code == 201
    page = api.get("/api/changes", headers=_as("viewer"))
    assert page.status_code == 200, page.text[:300]
    assert [v["change"]["target"] for v in page.json()["changes"]] == ["ml/llm-serving"]


@pytest.mark.parametrize("args", [["record", "--kind", "driver", "--target", "a", "--at", "0001-01-01T00:00:00+01:00"],
                                  ["impact", "--now", "9999-12-31T23:59:59-01:00"]])
def test_cli_refuses_a_time_outside_the_range_not_a_traceback(tmp_path, monkeypatch, capsys, args):
    monkeypatch.setenv("STEWARD_DATA_DIR", str(tmp_path))
    with pytest.raises(SystemExit) as exited:
        steward(["change", *args])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "1970-01-01" in err and "须在" in err and "Traceback" not in err, err
