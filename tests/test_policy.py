"""The policy loader: built-in protections survive a policy, and what it accepts a sweep can run."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from agent.cli.main import main
from agent.config.policy import (
    MAX_SLICES,
    Policy,
    PolicyError,
    load_policy,
    parse_policy,
    slices_read,
    stretch_span,
)
from agent.graph.deps import sweep_grid
from agent.graph.service import SweepService
from agent.guardrail.protection import protection_reason
from agent.planning.policy_model import PolicyModel
from agent.wiring import simulated_deps
from core.actions import History
from core.cluster import JobInfo
from sim.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)


def _job(namespace: str = "ml", **fields: Any) -> JobInfo:
    return JobInfo(id=f"{namespace}/nb", scheduler="kubernetes", namespace=namespace, name="nb", user="carol",
                   **fields)


def _why(job: JobInfo, policy: Policy) -> str | None:
    return protection_reason(job, policy, History(), NOW)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return path


# --- 1. A policy adds to the built-in protections; only remove_builtin takes one away ---------------------------


@pytest.mark.parametrize("protection, job", [
    ({"namespaces": ["prod"]}, _job("kube-system")),
    ({"annotations": {"team": "infra"}}, _job(annotations={"karpenter.sh/do-not-disrupt": "true"})),
    ({"annotations": {"team": "infra"}}, _job(annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"})),
    ({"annotations": {"team": "infra"}}, _job(annotations={"steward.io/protected": "true"})),
    ({"labels": {"tier": "gold"}}, _job(labels={"steward.io/protected": "true"})),
    ({"namespaces": [], "labels": {}, "annotations": {}}, _job("kube-system")),
])
def test_a_policy_protection_list_adds_to_the_builtins(protection, job):
    policy = parse_policy({"protection": protection})
    assert _why(job, policy) is not None
    assert _why(_job(), policy) is None  # and an ordinary job is still not protected


def test_the_policy_own_entries_protect_too():
    policy = parse_policy({"protection": {"namespaces": ["prod"], "annotations": {"team": "infra"}}})
    assert "protection.namespaces" in (_why(_job("prod"), policy) or "")
    assert "protection.annotations" in (_why(_job(annotations={"team": "INFRA"}), policy) or "")


def test_a_builtin_is_removed_only_by_name():
    policy = parse_policy({"protection": {"remove_builtin": {
        "namespaces": ["kube-system"], "annotations": ["karpenter.sh/do-not-disrupt"]}}})
    assert _why(_job("kube-system"), policy) is None
    assert _why(_job(annotations={"karpenter.sh/do-not-disrupt": "true"}), policy) is None
    # The others stay.
    assert _why(_job(annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}), policy)
    assert _why(_job(labels={"steward.io/protected": "true"}), policy)
    assert policy.protection.removed() == ["namespace kube-system", "annotation karpenter.sh/do-not-disrupt=true"]


def test_a_builtin_value_changes_only_after_its_removal():
    with pytest.raises(PolicyError, match=r"^p\.yaml: protection\.labels: .*remove_builtin\.labels"):
        parse_policy({"protection": {"labels": {"steward.io/protected": "yes"}}}, "p.yaml")
    policy = parse_policy({"protection": {"remove_builtin": {"labels": ["steward.io/protected"]},
                                          "labels": {"steward.io/protected": "yes"}}})
    assert _why(_job(labels={"steward.io/protected": "yes"}), policy)
    assert _why(_job(labels={"steward.io/protected": "true"}), policy) is None
    assert policy.protection.removed() == ["label steward.io/protected=true"]
    assert policy.protection.added() == ["label steward.io/protected=yes"]


@pytest.mark.parametrize("protection, key", [
    ({"remove_builtin": {"namespaces": ["kube-sytem"]}}, "protection.remove_builtin.namespaces"),
    ({"remove_builtin": {"annotations": ["team"]}}, "protection.remove_builtin.annotations"),
    ({"remove_builtin": {"namespaces": ["kube-system"]}, "namespaces": ["kube-system"]}, "protection.namespaces"),
    ({"remove_builtin": {"labels": ["steward.io/protected"]}, "labels": {"steward.io/protected": "TRUE"}},
     "protection.labels"),
    ({"remove_builtin": {"users": ["root"]}}, "protection.remove_builtin.users"),
])
def test_a_removal_that_names_no_builtin_or_contradicts_itself_is_an_error(protection, key):
    with pytest.raises(PolicyError) as exc:
        parse_policy({"protection": protection}, "p.yaml")
    assert str(exc.value).startswith(f"p.yaml: {key}: "), str(exc.value)


def test_restating_the_builtins_is_harmless_and_validation_is_idempotent():
    example = load_policy(ROOT / "agent" / "assets" / "policy.example.yaml")
    assert example.protection.removed() == [] and example.protection.added() == ["namespace prod"]
    for data in ({}, {"protection": {"remove_builtin": {"namespaces": ["kube-system"],
                                                        "labels": ["steward.io/protected"]},
                                     "labels": {"steward.io/protected": "yes"}, "users": ["bot"]}}):
        policy = parse_policy(data)
        assert parse_policy(policy.model_dump(mode="json")) == policy


@pytest.mark.parametrize("text, key, lines", [
    # a second block of a long policy edited by two people: YAML kept only the second, ml-team lost its protection
    ("protection:\n  namespaces: [ml-team]\nlevels:\n  max_auto: 2\nprotection:\n  users: [frank]\n",
     "protection", "lines 1 and 5"),
    ("protection:\n  namespaces: [prod]\n  users: [frank]\n  namespaces: [staging]\n", "namespaces", "lines 2 and 4"),
])
def test_a_key_given_twice_is_refused_not_silently_dropped(tmp_path, capsys, text, key, lines):
    path = _write(tmp_path, text)
    with pytest.raises(PolicyError, match=f"key '{key}' appears twice in one mapping \\({lines}\\)"):
        load_policy(path)
    assert main(["policy", "check", str(path)]) == 2
    assert f"key '{key}' appears twice" in capsys.readouterr().err
    # a merge key's mapping may still be overridden: that is YAML's way of saying "like that one, but"
    path = _write(tmp_path, "detectors:\n  idle: &idle {window: 2h}\n  zombie:\n    <<: *idle\n    window: 45m\n")
    assert load_policy(path).detectors.zombie.window == parse_policy({"detectors": {"zombie": {"window": "45m"}}}
                                                                     ).detectors.zombie.window


def test_policy_check_prints_what_the_file_added_and_removed(tmp_path, capsys):
    path = _write(tmp_path, "protection:\n  namespaces: [prod]\n  remove_builtin:\n"
                            "    annotations: [cluster-autoscaler.kubernetes.io/safe-to-evict]\n")
    assert main(["policy", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{path}: protection added: namespace prod" in out
    assert f"{path}: WARNING: built-in protection removed: annotation " \
           "cluster-autoscaler.kubernetes.io/safe-to-evict=false" in out

    path = _write(tmp_path, "protection: {users: [oncall-bot]}\n")
    assert main(["policy", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "protection added: user oncall-bot" in out and "built-in protection kept: all" in out
    assert "removed" not in out and "NOTE" not in out

    path = _write(tmp_path, "notifications: {outside_hours: defer}\n")
    assert main(["policy", "check", str(path)]) == 0
    assert (f"{path}: NOTE: owner warnings, and so every stop, wait for working hours (09:00-19:00 Asia/Shanghai, "
            "weekdays): jobs left idle overnight or over a weekend are not reclaimed until then") in capsys.readouterr().out


# --- 2. Values that would crash or switch off a sweep are refused, naming file and key --------------------------


INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize("data, key", [
    ({"detectors": {"slice": 0}}, "detectors.slice"),
    ({"detectors": {"slice": "0s"}}, "detectors.slice"),
    ({"detectors": {"idle": {"window": 0}}}, "detectors.idle.window"),
    ({"detectors": {"zombie": {"window": -60}}}, "detectors.zombie.window"),
    ({"detectors": {"overprovisioned": {"window": INF}}}, "detectors.overprovisioned.window"),
    ({"detectors": {"pools": {"empty_window": 0}}}, "detectors.pools.empty_window"),
    ({"detectors": {"longtail": {"lookback": 0}}}, "detectors.longtail.lookback"),
    ({"detectors": {"longtail": {"history_slice": 0}}}, "detectors.longtail.history_slice"),
    ({"detectors": {"idle": {"util_threshold_pct": NAN}}}, "detectors.idle.util_threshold_pct"),
    ({"detectors": {"idle": {"min_coverage": 0}}}, "detectors.idle.min_coverage"),
    ({"detectors": {"zombie": {"cpu_threshold_pct": INF}}}, "detectors.zombie.cpu_threshold_pct"),
    ({"detectors": {"zombie": {"log_cadence_factor": NAN}}}, "detectors.zombie.log_cadence_factor"),
    ({"detectors": {"overprovisioned": {"ratio": INF}}}, "detectors.overprovisioned.ratio"),
    ({"detectors": {"longtail": {"quiet_factor": INF}}}, "detectors.longtail.quiet_factor"),
    ({"detectors": {"longtail": {"io_threshold_mbps": INF}}}, "detectors.longtail.io_threshold_mbps"),
    ({"detectors": {"longtail": {"cpu_active_pct": NAN}}}, "detectors.longtail.cpu_active_pct"),
    ({"detectors": {"node_health": {"max_temp_c": NAN}}}, "detectors.node_health.max_temp_c"),
    ({"detectors": {"node_health": {"max_temp_c": -5}}}, "detectors.node_health.max_temp_c"),
    ({"detectors": {"node_health": {"max_temp_c": 1000}}}, "detectors.node_health.max_temp_c"),
    ({"warning": {"min_notice": INF}}, "warning.min_notice"),
    ({"warning": {"min_notice": -1}}, "warning.min_notice"),
    ({"warning": {"min_notice": 10**400}}, "warning.min_notice"),
    ({"warning": {"repeat_every": 0}}, "warning.repeat_every"),
    ({"warning": {"repeat_every": "99999d"}}, "warning.repeat_every"),
    ({"stop": {"grace_period": INF}}, "stop.grace_period"),
    ({"stop": {"grace_period": NAN}}, "stop.grace_period"),
    ({"approvals": {"expire_after": 0}}, "approvals.expire_after"),
    ({"reserve": {"fraction": NAN}}, "reserve.fraction"),
    # Windows are whole slices, and a sweep reads a bounded number of them.
    ({"detectors": {"slice": "2h"}}, "detectors"),
    ({"detectors": {"slice": "10m", "zombie": {"window": "5m"}}}, "detectors"),
    ({"detectors": {"slice": "1s", "idle": {"window": "1d"}}}, "detectors"),
    ({"detectors": {"slice": "1s", "longtail": {"lookback": "300d", "history_slice": "1s"}}}, "detectors"),
    # A stop must be able to land: the notice runs out before the next warning, and a sweep sees a quiet stretch
    # back to the oldest warning or request that may count (stretch_span), in a bounded number of slices.
    ({"warning": {"min_notice": "5h"}}, "(top level)"),
    ({"detectors": {"slice": "1m", "longtail": {"history_slice": "1m"}}, "approvals": {"expire_after": "30d"}},
     "(top level)"),
])
def test_a_value_that_would_crash_or_disable_a_sweep_is_refused(tmp_path, data, key):
    path = _write(tmp_path, yaml.safe_dump(data))
    with pytest.raises(PolicyError) as exc:
        load_policy(path)
    assert str(exc.value).startswith(f"{path}: {key}: "), str(exc.value)


def test_zero_notice_and_zero_grace_stay_allowed():
    policy = parse_policy({"warning": {"min_notice": 0}, "stop": {"grace_period": "0s"}})
    assert policy.warning.min_notice == 0 and policy.stop.grace_period == 0


def test_the_slice_limit_is_the_grid_a_sweep_reads():
    def detectors(window_s: int) -> dict[str, Any]:
        # A warning's and a request's life (stretch_span) within the fine slices too: no coarse history.
        return {"detectors": {"slice": "1s", "idle": {"window": window_s},
                              "longtail": {"lookback": "1h", "history_slice": "1s"}},
                "warning": {"repeat_every": "1h", "min_notice": 0}, "approvals": {"expire_after": "1h"}}

    policy = parse_policy(detectors(MAX_SLICES))
    grid = sweep_grid(policy)
    assert slices_read(policy.detectors, stretch_span(policy)) == (round(grid.lookback_s / grid.slice_s), 0) == (
        MAX_SLICES, 0)
    with pytest.raises(PolicyError, match=f"would read {MAX_SLICES + 1} slices"):
        parse_policy(detectors(MAX_SLICES + 1))


# --- 3. Whatever the loader accepts, a sweep runs ----------------------------------------------------------------


DURATIONS = st.sampled_from(["1s", "30s", "1m", "5m", "15m", "1h", "2h", "6h", "1d", 60, 300, 900.5, "1.5h"])
PCT = st.floats(0, 100)
POSITIVE = st.floats(0.5, 20)
# Kinds a person could write by mistake: zero, negative, tiny, huge, not finite, the wrong type.
NUMBERS = st.sampled_from([0, "0s", -1, "-5m", 1e-9, 1e30, 10**400, float("nan"), float("inf"), -float("inf"),
                           "99999d"])
MISTAKES = st.one_of(
    NUMBERS,
    st.sampled_from(["soon", "", None, True, [], {}, [1, 2], "25:00", "12:00-12:00", "Mars/Base", 5]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**6), 10**6),
    st.text(max_size=4),
)
SCHEMA: dict[str, Any] = {
    "version": st.just(1),
    "mode": st.sampled_from(["enforce", "dry_run", "observe"]),
    "detectors": {
        "slice": DURATIONS,
        "idle": {"window": DURATIONS, "util_threshold_pct": PCT, "min_coverage": st.floats(0.05, 1)},
        "zombie": {"window": DURATIONS, "busy_threshold_pct": PCT, "cpu_threshold_pct": PCT,
                   "log_cadence_factor": POSITIVE},
        "overprovisioned": {"window": DURATIONS, "working_util_pct": PCT, "ratio": POSITIVE,
                            "min_gpus": st.integers(2, 16)},
        "longtail": {"lookback": DURATIONS, "history_slice": DURATIONS, "quiet_factor": POSITIVE,
                     "quiet_share": st.floats(0, 1), "io_threshold_mbps": POSITIVE, "cpu_active_pct": PCT},
        "node_health": {"max_temp_c": st.floats(40, 120), "ignore_xids": st.lists(st.integers(1, 120), max_size=3)},
        "pools": {"empty_window": DURATIONS, "scale_down_start": st.sampled_from(["20:00", "07:00", "00:00"]),
                  "scale_down_end": st.sampled_from(["07:00", "20:00", "23:59"])},
    },
    "protection": {
        "namespaces": st.lists(st.sampled_from(["prod", "ml-team", "kube-system"]), max_size=2),
        "users": st.lists(st.sampled_from(["carol", "alice"]), max_size=2),
        "projects": st.lists(st.sampled_from(["ml-team"]), max_size=1),
        "labels": st.dictionaries(st.sampled_from(["app", "steward.io/protected"]), st.sampled_from(["jupyter", "true"]),
                                  max_size=2),
        "annotations": st.dictionaries(st.sampled_from(["team", "karpenter.sh/do-not-disrupt"]),
                                       st.sampled_from(["x", "true"]), max_size=2),
        "priorities": st.lists(st.sampled_from(["low", "normal", "high"]), max_size=2),
        "jobs": st.lists(st.sampled_from(["ml-team/jupyter-carol"]), max_size=1),
        "remove_builtin": {"namespaces": st.just(["kube-system"]),
                           "annotations": st.lists(st.sampled_from(["karpenter.sh/do-not-disrupt"]), max_size=1)},
    },
    "levels": {"max_auto": st.integers(0, 4), "max": st.integers(0, 4),
               "require_approval": st.lists(st.integers(1, 4), max_size=3, unique=True),
               "overrides": st.lists(st.fixed_dictionaries({"namespace": st.just("ml-team"),
                                                            "max_auto": st.integers(0, 4)}), max_size=1)},
    "warning": {"min_notice": DURATIONS, "repeat_every": DURATIONS},
    "stop": {"grace_period": DURATIONS},
    "rate_limits": {"stops_per_hour": st.integers(0, 30),
                    "circuit_breaker": {"max_failures_per_hour": st.integers(1, 5),
                                        "max_reclaimed_gpus_per_hour": st.integers(1, 100)}},
    "reserve": {"fraction": st.floats(0, 1)},
    "approvals": {"expire_after": DURATIONS},
    "notifications": {"working_hours": st.sampled_from(["09:00-19:00", "22:00-06:00"]),
                      "timezone": st.sampled_from(["UTC", "Asia/Shanghai"]), "weekdays_only": st.booleans(),
                      "outside_hours": st.sampled_from(["defer", "send"])},
}


@st.composite
def _section(draw: st.DrawFn, schema: dict[str, Any]) -> dict[str, Any]:
    """A random subset of the section's keys, with plausible values."""
    out: dict[str, Any] = {}
    for key in draw(st.lists(st.sampled_from(sorted(schema)), unique=True, max_size=5)):
        out[key] = draw(_section(schema[key])) if isinstance(schema[key], dict) else draw(schema[key])
    return out


def _leaves(schema: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    return [p for k, v in schema.items()
            for p in (_leaves(v, (*prefix, k)) if isinstance(v, dict) else [(*prefix, k)])]


def _sections(schema: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    return [p for k, v in schema.items() if isinstance(v, dict) for p in [(*prefix, k), *_sections(v, (*prefix, k))]]


LEAVES = _leaves(SCHEMA) + [("detectors", "nonsense"), ("protection", "remove_builtin", "users")]
SECTIONS = _sections(SCHEMA)
# Durations, thresholds and factors: where a wrong number is easiest to write and hardest to see.
NUMERIC = [p for p in _leaves(SCHEMA) if p[0] in ("detectors", "warning", "stop", "approvals", "reserve")
           and p[-1] not in ("scale_down_start", "scale_down_end", "ignore_xids")]


@st.composite
def policy_files(draw: st.DrawFn) -> dict[str, Any]:
    """A plausible random subset of keys, then up to three mistakes: a wrong number in a numeric key, or any
    kind of wrong value in any key or section."""
    data = draw(_section(SCHEMA))
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.integers(0, 5))
        paths = NUMERIC if kind < 3 else LEAVES if kind < 5 else SECTIONS
        *parents, key = draw(st.sampled_from(paths))
        here = data
        for name in parents:
            if not isinstance(here.get(name), dict):
                here[name] = {}
            here = here[name]
        here[key] = draw(NUMBERS if kind < 3 else MISTAKES)
    return data


SCENARIO = load_scenario(ROOT / "evals" / "scenarios" / "idle-notebook.yaml")


def _load(data: dict[str, Any], folder: Path) -> tuple[Path, Policy | PolicyError]:
    """Through the real loader: written as YAML (NaN and infinity as .nan and .inf), read back from a file."""
    path = folder / "generated.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    try:
        return path, load_policy(path)
    except PolicyError as exc:
        return path, exc


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy_files())
def test_whatever_the_loader_accepts_a_sweep_runs(tmp_path_factory, data):
    path, loaded = _load(data, tmp_path_factory.getbasetemp())
    if isinstance(loaded, PolicyError):
        assert str(loaded).startswith(f"{path}: "), str(loaded)
        return
    policy = loaded
    grid = sweep_grid(policy)  # what one sweep reads per series, and what the loader bounds
    fine = round(grid.lookback_s / grid.slice_s)
    coarse = round(grid.history_lookback_s / grid.history_slice_s) if grid.history_lookback_s else 0
    assert fine <= MAX_SLICES and coarse <= MAX_SLICES, (fine, coarse)
    assert slices_read(policy.detectors, stretch_span(policy)) == (fine, coarse)
    deps, cluster = simulated_deps(SCENARIO, policy, PolicyModel())
    service = SweepService(deps)
    for minute in (75, 140):  # the notebook went quiet at 30m: a warning, then a stop (or their denials)
        cluster.advance_to(minute * 60)
        result = service.sweep()
        assert result.report


def test_the_generated_policies_are_not_all_refused(tmp_path):
    """Guard against a vacuous property: the generator yields accepted and refused files alike."""
    outcomes: list[bool] = []

    @settings(max_examples=200, deadline=None, database=None, phases=[Phase.generate], derandomize=True)
    @given(policy_files())
    def record(data):
        outcomes.append(isinstance(_load(data, tmp_path)[1], Policy))

    record()
    assert outcomes.count(True) >= 40 and outcomes.count(False) >= 40, (outcomes.count(True), len(outcomes))


def test_unquoted_clock_times_mean_what_was_written() -> None:
    """YAML 1.1 turns an unquoted 20:00 into the integer 1200; the policy reads it back as 20:00, not 00:20."""
    text = "detectors:\n  pools:\n    scale_down_start: 20:00\n    scale_down_end: 07:30\n"
    pools = parse_policy(yaml.safe_load(text)).detectors.pools
    assert (str(pools.scale_down_start), str(pools.scale_down_end)) == ("20:00:00", "07:30:00")
    with pytest.raises(PolicyError, match="not a time of day"):
        parse_policy({"detectors": {"pools": {"scale_down_start": 5000, "scale_down_end": "07:00"}}})
