"""The scenario simulator: lifecycle, signals, logs, stops, pool resizes and the exporter view."""

from __future__ import annotations

from datetime import timedelta

import pytest

from core.cluster import JobInfo
from sim.cluster import SimCluster
from sim.scenario import ScenarioError, demo_scenario_path, load_scenario, parse_scenario
from tools.protocols import Clock, JobScheduler, LogSource, MetricsSource, NodePools

H = 3600.0


def cluster(jobs: list[dict], **extra) -> SimCluster:
    data = {
        "name": "t",
        "duration": "6h",
        "pools": [{"name": "p", "gpus_per_node": 4, "nodes": 2, "min_nodes": 1, "max_nodes": 4,
                   "price_per_gpu_hour": 2.0}],
        "jobs": jobs,
        **extra,
    }
    return SimCluster(parse_scenario(data))


def job_of(sim: SimCluster, job_id: str) -> JobInfo:
    info = sim.get_job(job_id)
    assert info is not None, job_id
    return info


def series_of(sim: SimCluster, job: str, lookback: float = H, slice_s: float = 300):
    return [s for s in sim.gpu_series(sim.now(), lookback, slice_s) if s.job == job]


def test_demo_loads_and_implements_every_protocol():
    scenario = load_scenario(demo_scenario_path())
    assert scenario.name == "demo-cluster"
    judged = {t.job for t in scenario.truth if t.job}
    assert judged == {j.id for j in scenario.jobs}
    sim = SimCluster(scenario)
    for proto in (MetricsSource, JobScheduler, LogSource, NodePools, Clock):
        assert isinstance(sim, proto)
    assert all(j.state == "running" for j in sim.list_jobs())
    sim.advance_to(4 * H)
    pools = {p.name: p for p in sim.list_pools()}
    assert pools["a100-ondemand"].nodes == 4 and pools["a100-ondemand"].busy_nodes == 2
    assert pools["a100-ondemand"].currency == "USD"
    assert job_of(sim, "cv-team/batch-embed").state == "completed"


def test_placement_first_fit_and_pending_until_room():
    sim = cluster([
        {"id": "a/big", "gpus": 4, "end": "1h"},
        {"id": "a/pinned", "gpus": 2, "node": "p-1"},
        {"id": "a/fits", "gpus": 2},
        {"id": "a/waits", "gpus": 4},
    ])
    jobs = {j.id: j for j in sim.list_jobs()}
    assert jobs["a/big"].node == "p-0" and jobs["a/pinned"].node == "p-1" and jobs["a/fits"].node == "p-1"
    assert jobs["a/waits"].state == "pending" and jobs["a/waits"].node is None
    assert jobs["a/big"].owner_kind == "Pod" and jobs["a/big"].project == "a"
    sim.advance_to(H)
    waits = job_of(sim, "a/waits")
    assert waits.state == "running" and waits.node == "p-0" and waits.started_at == sim.now()
    assert job_of(sim, "a/big").state == "completed"
    assert "a/big" not in {j.id for j in sim.list_jobs()}
    assert sim.get_job("nope/nope") is None


def test_phase_inheritance_and_active_gpus():
    sim = cluster([{"id": "a/j", "gpus": 2, "phases": [
        {"duration": "30m", "gpu_util": 80, "gpu_mem_gb": 10, "active_gpus": 1, "cpu_pct": 200},
        {"gpu_util": 0},
    ]}])
    sim.advance_to(H)
    series = sorted(series_of(sim, "a/j"), key=lambda s: s.gpu)
    assert series[0].util_avg[0] == 80 and series[0].util_avg[-1] == 0
    assert series[1].util_max[0] == 0  # beyond active_gpus
    assert series[0].mem_used_mb == 10 * 1024  # memory and active_gpus inherited into phase 2
    assert series[1].mem_used_mb == 500
    io = sim.job_io_series(sim.now(), H, 300)[0]
    assert io.cpu_pct[-1] == 200
    assert series[0].engine_active_avg[0] == pytest.approx(0.8)


def test_idle_gpu_memory_is_held_where_a_phase_says_so():
    """A rank waiting for its siblings keeps its model on the GPU (idle_gpu_mem_gb, inherited like the other keys);
    without it a GPU beyond active_gpus holds a CUDA context, as one whose task ended."""
    sim = cluster([{"id": "a/w", "gpus": 2, "phases": [
        {"duration": "30m", "gpu_util": 80, "gpu_mem_gb": 10, "active_gpus": 1, "idle_gpu_mem_gb": 9},
        {"gpu_util": 70},
    ]}])
    sim.advance_to(H // 2)
    series = sorted(series_of(sim, "a/w", H // 2), key=lambda s: s.gpu)
    assert series[1].util_max[-1] == 0 and series[1].mem_used_mb == 9 * 1024
    sim.advance_to(H)
    assert sorted(series_of(sim, "a/w"), key=lambda s: s.gpu)[1].mem_used_mb == 9 * 1024  # inherited


def test_noise_stays_within_range_and_is_deterministic():
    jobs = [{"id": "a/n", "gpus": 4, "phases": [{"gpu_util": [20, 40], "cpu_pct": [5, 10]}]}]
    sim = cluster(jobs)
    sim.advance_to(2 * H)
    series = series_of(sim, "a/n", 2 * H, 30)
    values = [v for s in series for v in s.util_max if v is not None]
    assert len(values) == 4 * 240 and all(20 <= v <= 40 for v in values)
    assert len(set(values)) > 100
    again = cluster(jobs)
    again.advance_to(2 * H)
    assert series_of(again, "a/n", 2 * H, 30) == series


def test_missing_metrics_and_out_of_range_util():
    sim = cluster([
        {"id": "a/gap", "gpus": 1, "phases": [{"duration": "30m", "gpu_util": 50}, {"metrics": "missing"}]},
        {"id": "a/broken", "gpus": 1, "phases": [{"gpu_util": 150}]},
    ])
    sim.advance_to(H)
    gap = series_of(sim, "a/gap")[0]
    assert gap.samples[:6] == [10] * 5 + [9] and gap.samples[6:] == [0] * 6 and gap.util_avg[-1] is None
    assert gap.expected == 10
    io = {s.job: s for s in sim.job_io_series(sim.now(), H, 300)}
    assert io["a/gap"].cpu_pct[-1] is None and io["a/gap"].cpu_pct[0] == 0
    broken = series_of(sim, "a/broken")[0]
    assert broken.samples == [0] * 12 and broken.util_max == [None] * 12
    assert 'pod="broken"} 150' in sim.exporter_text()
    assert 'pod="gap"' not in sim.exporter_text()
    sim.advance_to(3 * H)  # nothing at all from a/gap in the last hour: no series
    assert series_of(sim, "a/gap") == []


def test_slices_clip_at_scenario_start():
    sim = cluster([{"id": "a/j", "gpus": 1, "phases": [{"gpu_util": 10}]}])
    sim.advance_to(20 * 60)
    s = series_of(sim, "a/j", 6 * H, 300)[0]
    assert len(s.util_avg) == 4 and s.samples == [10, 10, 10, 10]


def test_loss_log_steps_grow_across_phases_and_lines_cycle():
    sim = cluster([
        {"id": "a/train", "gpus": 1, "phases": [
            {"duration": "20m", "log": "loss"}, {"duration": "10m", "log": "silent"}, {"log": "loss"}]},
        {"id": "a/dl", "gpus": 0, "end": "30m",
         "phases": [{"log": "lines", "lines": ["shard 1/9", "shard 2/9"], "log_every": "5m"}]},
    ])
    sim.advance_to(H)
    lines = sim.tail("a/train", sim.scenario.start, sim.now(), limit=1000)
    assert len(lines) == 40 + 60
    steps = [int(line.text.split("step=")[1].split()[0]) for line in lines]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    assert lines[0].text.startswith("2026-11-02T09:00:30Z step=")
    assert all(not (20 * 60 < (ln.at - sim.scenario.start).total_seconds() <= 30 * 60) for ln in lines)
    newest = sim.tail("a/train", sim.scenario.start, sim.now(), limit=5)
    assert newest == lines[-5:]
    dl = sim.tail("a/dl", sim.scenario.start, sim.now())
    assert [ln.text for ln in dl] == ["shard 1/9", "shard 2/9", "shard 1/9", "shard 2/9", "shard 1/9"]


def test_stop_semantics():
    sim = cluster([
        {"id": "a/exits", "gpus": 1},
        {"id": "a/stubborn", "gpus": 1, "sigterm": "ignores", "phases": [{"gpu_util": 0, "gpu_mem_gb": 5}]},
        {"id": "a/queued", "gpus": 4, "node": "p-0"},
    ])
    sim.advance_to(H)
    assert job_of(sim, "a/queued").state == "pending"
    assert sim.stop_job("a/exits", force=False, grace_s=300, reason="idle").status == "stopped"
    assert job_of(sim, "a/exits").state == "cancelled"
    assert sim.stop_job("a/exits", force=False, grace_s=300, reason="idle").status == "already_gone"
    assert job_of(sim, "a/queued").state == "pending"  # p-0 still has the stubborn job

    result = sim.stop_job("a/stubborn", force=False, grace_s=300, reason="idle")
    assert result.status == "stopping"
    info = job_of(sim, "a/stubborn")
    assert info.state == "stopping" and info.stop_requested_at == sim.now()
    sim.advance(600)
    assert sim.stop_job("a/stubborn", force=False, grace_s=300, reason="idle").status == "stopping"
    assert job_of(sim, "a/stubborn").stop_requested_at == sim.now() - timedelta(seconds=600)
    assert series_of(sim, "a/stubborn")[0].samples[-1] == 10  # still running and reporting
    assert sim.stop_job("a/stubborn", force=True, grace_s=0, reason="approved").status == "stopped"
    assert job_of(sim, "a/stubborn").state == "cancelled"
    assert sim.stop_offset("a/stubborn") == H + 600 and sim.stop_offset("a/exits") == H
    assert job_of(sim, "a/queued").state == "running"  # freed GPUs are reused at once
    assert sim.stop_job("x/unknown", force=True, grace_s=0, reason="").status == "already_gone"
    assert [(s.job, s.force) for s in sim.stops][:2] == [("a/exits", False), ("a/exits", False)]
    sim.advance(300)
    assert series_of(sim, "a/stubborn") == [] and "a/stubborn" not in {j.id for j in sim.list_jobs()}


def test_resize_refuses_busy_nodes_and_respects_bounds():
    sim = cluster([{"id": "a/j", "gpus": 1, "node": "p-0"}])
    assert sim.resize_pool("p", 2, reason="").status == "unchanged"
    assert sim.resize_pool("p", 0, reason="").status == "refused"  # below min_nodes
    assert sim.resize_pool("p", 5, reason="").status == "refused"  # above max_nodes
    grown = sim.resize_pool("p", 3, reason="")
    assert grown.status == "resized" and grown.nodes_after == 3
    assert [n.name for n in sim.list_nodes()] == ["p-0", "p-1", "p-2"]
    shrunk = sim.resize_pool("p", 1, reason="night")
    assert shrunk.status == "resized" and shrunk.removed_nodes == ["p-2", "p-1"]
    assert {s.node for s in sim.gpu_series(sim.now(), H, 300)} <= {"p-0"}
    assert sim.list_pools()[0].nodes == 1 and sim.list_pools()[0].busy_nodes == 1
    sim2 = cluster([{"id": "a/j", "gpus": 1, "node": "p-1"}, {"id": "a/k", "gpus": 1, "node": "p-0"}])
    refused = sim2.resize_pool("p", 1, reason="")
    assert refused.status == "refused" and "run no job" in refused.detail
    assert len(sim2.list_nodes()) == 2
    assert sim2.resize_pool("nope", 1, reason="").status == "error"


def test_exporter_text_labels():
    sim = cluster([
        {"id": "ml/notebook", "gpus": 1, "phases": [{"gpu_util": 42, "gpu_mem_gb": 2}]},
        {"id": "gpu-long/resnet", "scheduler": "slurm", "gpus": 1, "phases": [{"gpu_util": 7}]},
    ], nodes=[{"name": "hot", "gpus": 1, "events": [{"at": "10m", "gpu_temp_c": 93}, {"at": "20m", "xid": 79}]}])
    sim.advance_to(H)
    text = sim.exporter_text()
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                 "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS"):
        assert f"# TYPE {name} gauge" in text and f"# HELP {name} " in text
    assert 'device="nvidia0",modelName="A100-80GB",Hostname="p-0",container="main",namespace="ml",pod="notebook"} 42' \
        in text
    assert 'hpc_job="resnet"} 7' in text
    assert 'DCGM_FI_DEV_FB_USED{gpu="0",' in text and 'DCGM_FI_DEV_XID_ERRORS{gpu="0",' in text
    assert 'Hostname="hot"} 79' in text and 'Hostname="hot"} 93' in text
    hot = [s for s in sim.gpu_series(sim.now(), H, 300) if s.node == "hot"][0]
    assert hot.job is None and hot.xid_last == 79 and hot.temp_c_max == 93
    assert hot.xid_at == sim.scenario.start + timedelta(minutes=20)
    slurm = job_of(sim, "gpu-long/resnet")
    assert slurm.owner_kind == "batch" and slurm.namespace == "gpu-long"


def test_loader_rejects_malformed_scenario_naming_the_key():
    with pytest.raises(ScenarioError, match=r"jobs\[0\]\.gpus"):
        parse_scenario({"name": "bad", "duration": "1h", "jobs": [{"id": "a/b", "gpus": "many"}]})
    with pytest.raises(ScenarioError, match=r"jobs\[0\]\.node"):
        cluster([{"id": "a/b", "node": "p-7"}])


def test_namesakes_need_lifetimes_that_do_not_overlap():
    with pytest.raises(ScenarioError, match=r"jobs\[0\] and jobs\[1\] share the id 'a/bash'"):
        cluster([{"id": "a/bash"}, {"id": "a/bash", "submit": "2h"}])  # the first never ends
    with pytest.raises(ScenarioError, match=r"jobs\[0\] and jobs\[2\]"):
        cluster([{"id": "a/bash", "end": "2h"}, {"id": "a/x"}, {"id": "a/bash", "submit": "1h"}])
    with pytest.raises(ScenarioError, match=r"jobs\[0\] and jobs\[1\]"):  # listed later, submitted earlier
        cluster([{"id": "a/bash", "submit": "1h"}, {"id": "a/bash", "end": "2h"}])
    cluster([{"id": "a/bash", "end": "1h"}, {"id": "a/bash", "submit": "1h"}],
            approvals=[{"job": "a/bash", "decision": "approve", "at": "90m"}],
            truth=[{"job": "a/bash", "waste": "idle"}])


def test_namesakes_are_distinct_jobs_resolved_at_the_simulated_time():
    idle = [{"gpu_util": 0, "gpu_mem_gb": 4}]
    sim = cluster([{"id": "a/bash", "gpus": 1, "end": "1h", "phases": idle},
                   {"id": "a/bash", "gpus": 1, "submit": "90m", "phases": idle}])
    sim.advance_to(30 * 60)
    first = job_of(sim, "a/bash")
    sim.advance_to(70 * 60)
    assert sim.get_job("a/bash") is not None and job_of(sim, "a/bash").state == "completed"
    assert sim.stop_job("a/bash", force=True, reason="late").status == "already_gone"
    sim.advance_to(2 * H)
    second = job_of(sim, "a/bash")
    assert second.uid != first.uid and second.state == "running"
    assert second.started_at == sim.scenario.start + timedelta(seconds=90 * 60)
    # The earlier run's samples stay with it: the namesake's series starts at its own start.
    (series,) = series_of(sim, "a/bash", lookback=2 * H)
    assert sum(series.samples) == 30 * 60 / 30 + 1
    assert sim.stop_job("a/bash", force=False, uid=first.uid).status == "refused"
    assert sim.stop_job("a/bash", force=False, uid=second.uid).status == "stopped"
    assert sim.stop_offset("a/bash") == 2 * H and [r[1] for r in sim.stopped_runs()] == [2 * H]


def test_explicit_pool_nodes_count_toward_pool_size():
    sim = cluster([], nodes=[{"name": "special", "pool": "p"}])
    assert [n.name for n in sim.list_nodes()] == ["special", "p-0"]
    assert sim.list_pools()[0].nodes == 2


def test_backend_calls_per_sweep():
    sim = SimCluster(load_scenario(demo_scenario_path()))
    for i in range(72):
        sim.advance_to(i * 300)
        sim.gpu_series(sim.now(), 6 * H, 300)
        sim.job_io_series(sim.now(), 6 * H, 300)
    assert sim.backend_calls == 144
    sim.list_jobs(), sim.list_nodes(), sim.list_pools(), job_of(sim, "prod/llm-serving")
    sim.tail("prod/llm-serving", sim.now() - timedelta(minutes=5), sim.now())
    assert sim.backend_calls == 149
    with pytest.raises(ValueError):
        sim.advance_to(0)


def test_a_scrape_interval_that_does_not_divide_the_slice_still_makes_full_slices():
    """At a 200 s step a 5-minute slice holds 1 or 2 samples. The simulator expected round(1.5) = 2, so every other
    slice read 'incomplete', window coverage 75 %, and no job was ever judged idle; Prometheus and the coarse
    history expect the floor."""
    cluster = SimCluster(parse_scenario({
        "version": 1, "name": "slow-scrape", "duration": "3h", "step": "200s",
        "pools": [{"name": "a100", "gpus_per_node": 1, "nodes": 1, "price_per_gpu_hour": 2.0}],
        "jobs": [{"id": "ml/idle", "user": "u", "gpus": 1, "phases": [{"gpu_util": 0, "gpu_mem_gb": 10}]}]}))
    cluster.advance_to(2 * 3600)
    [series] = cluster.gpu_series(cluster.now(), 3600, 300)
    assert series.expected == 1 and all(n >= series.expected for n in series.samples), series.samples
