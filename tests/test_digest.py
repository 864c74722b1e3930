"""The scheduled cost digest (agent/graph/digest.py): posted once per cron instant to the on-call route over the
real DingTalk robot protocol (a loopback robot that checks the signature), audited, leader only, retried after a
failed delivery, skipped when stale, and never posted twice across a restart."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from agent.chatops import dingtalk
from agent.chatops.notifier import ChatOpsNotifier, Route
from agent.config.policy import Policy
from agent.graph.digest import DigestError, DigestSchedule
from agent.planning.policy_model import PolicyModel
from agent.wiring import simulated_deps
from evals.suite import SCENARIO_DIR
from sim.scenario import load_scenario
from tests.sweeps import sweep_through
from tests.test_dingtalk import RobotServer

SEND_ANYTIME = Policy.model_validate({"notifications": {"outside_hours": "send"}})


@pytest.fixture
def robot():
    server = RobotServer("SEC" + "ab" * 16)
    yield server
    server.close()


def _swept(tmp_path: Path):
    scenario = load_scenario(SCENARIO_DIR / "idle-notebook.yaml")
    deps, cluster = simulated_deps(scenario, Policy(), PolicyModel(), data_dir=tmp_path)
    sweep_through(deps, cluster, scenario)
    return deps, cluster


def _notifier(cluster, robot, secret: str | None = None) -> ChatOpsNotifier:
    return ChatOpsNotifier(clock=cluster, policy=SEND_ANYTIME,
                           default=Route(dingtalk=dingtalk.DingTalkRobot(robot.url, secret or robot.secret)))


def test_posted_once_per_instant_audited_and_not_again_after_a_restart(tmp_path, robot):
    deps, cluster = _swept(tmp_path)
    deps.notifier = _notifier(cluster, robot)
    end = deps.audit.entries(kind="usage", limit=1)[0].at
    digest = DigestSchedule("0 * * * *", period_s=3 * 3600)
    instant = digest.instant(end)
    assert instant.minute == 0 and instant <= end
    assert digest.tick(deps, end, lambda: True) == "sent"
    [message] = robot.messages
    assert message["msgtype"] == "markdown" and "GPU" in message["markdown"]["title"]
    assert "ml-team" in message["markdown"]["text"] or "GPU-hours" in message["markdown"]["text"]
    [entry] = deps.audit.entries(kind="digest")
    assert entry.status == "executed" and entry.run_id == DigestSchedule.key(instant)
    assert entry.data["until"] == instant.isoformat() and entry.data["message"]
    assert digest.tick(deps, end + timedelta(minutes=5), lambda: True) == "not_due"
    restarted = DigestSchedule("0 * * * *", period_s=3 * 3600)  # another process, same audit log
    assert restarted.tick(deps, end + timedelta(minutes=10), lambda: True) == "done"
    assert len(robot.messages) == 1 and len(deps.audit.entries(kind="digest")) == 1
    assert deps.audit.verify().ok


def test_only_the_leader_posts(tmp_path, robot):
    deps, cluster = _swept(tmp_path)
    deps.notifier = _notifier(cluster, robot)
    end = deps.audit.entries(kind="usage", limit=1)[0].at
    assert DigestSchedule("0 * * * *").tick(deps, end, lambda: False) == "not_leader"
    assert robot.messages == [] and deps.audit.entries(kind="digest") == []


def test_a_failed_delivery_is_audited_and_retried_after_the_back_off(tmp_path, robot):
    deps, cluster = _swept(tmp_path)
    deps.notifier = _notifier(cluster, robot, secret="SECwrong")  # DingTalk answers errcode 310000
    end = deps.audit.entries(kind="usage", limit=1)[0].at
    digest = DigestSchedule("0 * * * *", retry_s=600)
    assert digest.tick(deps, end, lambda: True) == "failed"
    [failed] = deps.audit.entries(kind="digest")
    assert failed.status == "failed" and "310000" in (failed.reason or "")
    assert robot.messages == [] and robot.refused
    assert digest.tick(deps, end + timedelta(minutes=5), lambda: True) == "retry_later"
    deps.notifier = _notifier(cluster, robot)  # the secret is fixed
    assert digest.tick(deps, end + timedelta(minutes=11), lambda: True) == "sent"
    assert len(robot.messages) == 1
    assert [e.status for e in deps.audit.entries(kind="digest", newest_first=False)] == ["failed", "executed"]


def test_a_stale_instant_is_skipped_not_posted_late(tmp_path, robot):
    deps, cluster = _swept(tmp_path)
    deps.notifier = _notifier(cluster, robot)
    end = deps.audit.entries(kind="usage", limit=1)[0].at
    weekly = DigestSchedule("0 9 * * 1")  # Mondays 09:00
    instant = weekly.instant(end)
    assert instant.weekday() == 0 and instant.hour == 9
    late = instant + timedelta(days=2)
    assert weekly.instant(late) == instant and weekly.tick(deps, late, lambda: True) == "stale"
    assert robot.messages == [] and deps.audit.entries(kind="digest") == []


def test_chinese_digest_and_a_bad_cron_named(tmp_path, robot):
    deps, cluster = _swept(tmp_path)
    deps.notifier = _notifier(cluster, robot)
    end = deps.audit.entries(kind="usage", limit=1)[0].at
    assert DigestSchedule("0 * * * *", language="zh").tick(deps, end, lambda: True) == "sent"
    text = robot.messages[0]["markdown"]["text"]
    assert "GPU" in text and any("\u4e00" <= ch <= "\u9fff" for ch in text)
    with pytest.raises(DigestError, match="STEWARD_DIGEST_CRON 'every monday'"):
        DigestSchedule("every monday")


def test_serve_wires_the_digest_from_the_setting(tmp_path):
    from agent.api.build import simulated_runtime
    from agent.config.settings import Settings

    assert simulated_runtime(Settings(data_dir=tmp_path / "a"), speed=0).digest is None
    rt = simulated_runtime(Settings(data_dir=tmp_path / "b", digest_cron="0 9 * * 1", language="zh"), speed=0)
    assert rt.digest is not None and rt.digest.cron == "0 9 * * 1" and rt.digest.language == "zh"
