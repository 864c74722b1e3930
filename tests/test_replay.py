"""Trace replay: reading traces, the agent and baselines over a small synthetic trace, future-based scoring."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from agent.cli.main import main
from agent.config.policy import Policy
from evals.replay import run_agent, run_jds, run_naive
from evals.replay_score import oracle, score
from evals.trace import TraceError, load_trace

T0 = 1_700_000_000
STEP = 60
HOURS = 6


def _rows(container: str, utils: list[float], mem: str = "21474836480", start: int = 0) -> list[str]:
    return [f"{container},{T0 + (start + k) * STEP},{u},{mem}" for k, u in enumerate(utils)]


def _write(path: Path, rows: list[str], header: str = "container,timestamp,gpu_util_pct,gpu_mem_used_bytes",
           gz: bool = False) -> Path:
    text = "\n".join([header, *rows]) + "\n"
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    n = HOURS * 60 + 1
    idle_forever = [80.0] * 60 + [0.0] * (n - 60)  # worked one hour, then holds its GPU doing nothing
    comes_back = ([60.0] * 60 + [0.0] * 50 + [70.0] * 40) * 3  # quiet 50 minutes, then serves again
    comes_back = (comes_back + [70.0] * n)[:n]
    comes_back[-30:] = [70.0] * 30  # and is busy when the trace ends
    rows = _rows("idle-forever", idle_forever) + _rows("comes-back", comes_back)
    return _write(tmp_path / "trace.csv.gz", rows, gz=True)


def test_reads_gzip_and_detects_the_usual_columns(trace_file: Path):
    trace = load_trace(trace_file)
    assert trace.columns == {"id": "container", "time": "timestamp", "util": "gpu_util_pct",
                             "mem": "gpu_mem_used_bytes"}
    assert sorted(trace.containers) == ["comes-back", "idle-forever"]
    assert trace.interval_s == STEP and trace.duration_s == HOURS * 3600
    assert trace.containers["idle-forever"].mem_mb[0] == pytest.approx(20 * 1024)  # bytes -> MB


def test_other_column_names_are_detected_or_named(tmp_path: Path):
    plain = _write(tmp_path / "pods.csv", ["p1,0,5,100", "p1,60,0,100"], header="pod,time,utilization,fb_used_mb")
    trace = load_trace(plain)
    assert trace.columns == {"id": "pod", "time": "time", "util": "utilization", "mem": "fb_used_mb"}
    assert trace.containers["p1"].mem_mb[0] == 100.0  # MB stays MB
    odd = _write(tmp_path / "odd.csv", ["a,0,5", "a,60,0"], header="who,when,busy")
    with pytest.raises(TraceError, match="--id-col"):
        load_trace(odd)
    trace = load_trace(odd, id_col="who", time_col="when", util_col="busy")
    assert trace.columns["mem"] == "" and list(trace.containers) == ["a"]


def test_malformed_rows_name_the_row_and_column(tmp_path: Path):
    bad = _write(tmp_path / "bad.csv", ["c1,0,5,1", "c1,60,lots,1"])
    with pytest.raises(TraceError, match=r"row 3, column 'gpu_util_pct': 'lots' is not a number"):
        load_trace(bad)
    short = _write(tmp_path / "short.csv", ["c1,0,5,1", "c1,60"])
    with pytest.raises(TraceError, match="row 3 has 2 fields, the header has 4"):
        load_trace(short)
    with pytest.raises(TraceError, match="no column 'nope'"):
        load_trace(bad, util_col="nope")


def test_agent_stops_the_idle_container_and_spares_the_one_that_comes_back(trace_file: Path):
    trace = load_trace(trace_file)
    best = oracle(trace)
    assert best.cut_off_tails == 1 and best.ended_tails == 0  # only idle-forever has a final idle tail
    run = run_agent(trace, Policy())
    assert [cid for cid, _ in run.stops] == ["idle-forever"]
    warned = [at for cid, at in run.warnings if cid == "idle-forever"]
    assert warned and min(warned) < run.stops[0][1]  # warning first
    s = score(trace, run, best)
    assert s.false_kills == 0
    assert s.reclaimed_gpu_hours == pytest.approx((HOURS * 3600 - run.stops[0][1]) / 3600, abs=0.01)
    assert 0 < s.share_of_oracle < 1


def test_naive_baseline_false_kills_the_container_that_comes_back(trace_file: Path):
    trace = load_trace(trace_file)
    s = score(trace, run_naive(trace), oracle(trace))
    assert "comes-back" in s.false_kill_containers
    assert s.notifications == 0
    jds = score(trace, run_jds(trace), oracle(trace))  # 50-minute pauses never reach its 60-minute warning
    assert jds.false_kills == 0 and jds.stops == 1 and jds.notifications == 1


def test_a_container_that_really_ends_is_not_running_after_its_last_sample(tmp_path: Path):
    n = HOURS * 60 + 1
    rows = _rows("short-lived", [50.0] * 60 + [0.0] * 30) + _rows("whole-trace", [50.0] * n)
    trace = load_trace(_write(tmp_path / "t.csv", rows))
    short = trace.containers["short-lived"]
    assert trace.ended_inside(short) and trace.life_end(short) == short.last
    best = oracle(trace)
    assert best.ended_tails == 1 and best.ended_gpu_hours == pytest.approx(0.5, abs=0.02)
    run = run_agent(trace, Policy())
    assert run.stops == []  # gone before the idle window and notice ran out


def test_cli_prints_json_and_writes_self_contained_html(trace_file: Path, tmp_path: Path, capsys):
    html = tmp_path / "replay.html"
    assert main(["replay", str(trace_file), "--json", "--html", str(html)]) == 0
    doc = json.loads(capsys.readouterr().out)
    names = [p["name"] for p in doc["policies"]]
    assert names[0].startswith("agent") and len(names) == 3
    assert doc["policies"][0]["false_kills"] == 0
    page = html.read_text()
    assert "<svg" in page and "http://" not in page and "https://" not in page and "<script" not in page


def test_cli_reports_a_bad_trace_as_an_error(tmp_path: Path, capsys):
    bad = _write(tmp_path / "bad.csv", ["c1,0,5,1", "c1,x,5,1"])
    assert main(["replay", str(bad)]) == 2
    assert "row 3, column 'timestamp'" in capsys.readouterr().err
