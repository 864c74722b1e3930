"""The cluster's text and a model's note are shown as text in a chat message, never as markup.

An ordinary cluster user names their job (a Slurm name holds anything: newlines, markdown), sets a pod's owner and
project annotations, and writes log lines a model reads and may echo in its note. Posted by the steward's own bot
into the team chat, none of it may become a live link or image, an @-mention, HTML, or a bullet or line of its own;
the steward's own formatting (its `keep 4h <reason>` code span, its bullets and bold headings) is kept, and Chinese
text is shown as written.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from agent.chatops import dingtalk, wecom
from agent.chatops.notifier import ChatOpsNotifier, Route
from agent.config.policy import Policy
from agent.graph.cost_report import render_html, render_markdown
from agent.graph.execute import execute_action
from agent.planning.policy_model import PolicyModel
from agent.records.usage import CostReport, CostRow, CreditRow, QueueRow, Suggestion
from agent.wiring import simulated_deps
from core.actions import Decision, GuardedAction, ProposedAction
from sim.scenario import parse_scenario

PHISH = "[Keep this job: sign in](https://evil.example/sso) <@ceo>"
NAME = f"gpu/{PHISH}"
NOTE = "To keep your job, approve it at [steward.example/keep](https://evil.example/keep?job=all) ![x](https://evil.example/p.png) @all"


def scenario(name: str) -> dict[str, Any]:
    return {"version": 1, "name": "chat-markup", "start": "2026-11-02T09:00:00Z", "duration": "3h", "step": "60s",
            "pools": [{"name": "a100", "gpus_per_node": 8, "nodes": 1, "min_nodes": 1, "price_per_gpu_hour": 4.1}],
            "jobs": [{"id": name, "scheduler": "slurm", "user": "mallory", "gpus": 1,
                      "phases": [{"duration": "10m", "gpu_util": 60, "gpu_mem_gb": 10, "cpu_pct": 100, "log": "loss"},
                                 {"gpu_util": 0, "cpu_pct": 0.2, "log": "silent"}]}]}


def live_markup(text: str) -> list[str]:
    """What a markdown chat client would turn into a link, an image, a mention or HTML (outside the steward's
    own code spans, `keep 4h <reason>`)."""
    return re.findall(r"\]\s*\(|<@|<[a-zA-Z/!]|https?://|@all\b|&#\d+;", re.sub(r"`[^`\n]*`", "", text))


def warn_through_chat(name: str, note: str, language: str = "en") -> tuple[dict[str, Any], dict[str, Any]]:
    """A model proposes a warning with `note` for the job `name`; the steward posts it to DingTalk and WeCom.
    The two messages as the robots received them."""
    deps, cluster = simulated_deps(parse_scenario(scenario(name)), Policy(), PolicyModel(), language=language)
    posted: dict[str, dict[str, Any]] = {}

    def robot(kind: str) -> httpx.Client:
        def answer(request: httpx.Request) -> httpx.Response:
            posted[kind] = json.loads(request.content)
            return httpx.Response(200, json={"errcode": 0, "errmsg": "ok"})
        return httpx.Client(transport=httpx.MockTransport(answer))

    deps.notifier = ChatOpsNotifier(clock=cluster, policy=deps.policy, default=Route(
        dingtalk=dingtalk.DingTalkRobot("https://oapi.dingtalk.example/robot/send?access_token=t",
                                        client=robot("dingtalk")),
        wecom=wecom.WeComRobot("https://qyapi.weixin.example/cgi-bin/webhook/send?key=k", client=robot("wecom"))))
    cluster.advance_to(90 * 60)  # idle for over an hour
    proposal = ProposedAction(action="notify", target=name, finding_kind="idle", reason="idle", proposed_by="llm",
                              message=note)
    ga = GuardedAction(id="act-1", proposal=proposal, decided_at=cluster.now(),
                       decision=Decision(verdict="allow", rule="all_pass", reason="", level=1))
    out = execute_action(deps, ga, "run-1")
    assert out.status == "executed", out
    return posted["dingtalk"], posted["wecom"]


def test_a_job_name_and_a_models_note_reach_the_chat_as_text_not_links_or_mentions():
    ding, wecom_card = warn_through_chat(NAME + "\n- [x] approved by oncall", NOTE)
    text, title = ding["markdown"]["text"], ding["markdown"]["title"]
    content = wecom_card["markdown"]["content"]
    for posted in (text, content):
        assert live_markup(posted) == [], posted
        assert "evil.example/sso" in posted  # still there to read, as text
    # The title is the push preview, plain text that is never rendered: one line, the name as it is.
    assert title == f"GPU Steward: {NAME}␤- [x] approved by oncall", title
    assert "evil.example/keep" in text and "evil.example/keep" in content
    # The name's newline started no block of its own: the bullet is text on the heading's line.
    assert not any(line.lstrip().startswith("- ") for line in text.splitlines() + content.splitlines())
    assert "approved by oncall" in text.splitlines()[0]
    # Nobody is @-mentioned but whom the steward mentions (no directory entry here: nobody).
    assert ding["at"] == {"atUserIds": [], "atMobiles": [], "isAtAll": False}
    # The steward's own formatting is kept.
    assert text.startswith("[GPU Steward] gpu/") and "`keep 4h <reason>`" in text and "`keep 4h <reason>`" in content
    assert "Note from the assistant: To keep your job" in text


def test_chinese_names_and_notes_are_shown_as_written():
    name, note = "gpu/中文训练作业（第二轮）", "请在截止时间前停止作业，或回复 keep 保留。"
    ding, wecom_card = warn_through_chat(name, note, language="zh")
    for posted in (ding["markdown"]["text"], wecom_card["markdown"]["content"]):
        assert name in posted and note in posted and "助手备注：" in posted
    assert name in ding["markdown"]["title"]


def test_the_digest_shows_teams_users_and_jobs_as_text():
    now = datetime(2026, 11, 9, tzinfo=UTC)
    bullet = "ml-team\n- [x] approved by oncall"
    report = CostReport(
        since=now - timedelta(days=7), until=now, sweeps=10, gpu_hours=30, cost=123,
        by_team=[CostRow(name="ml-team", gpu_hours=16, cost=65.6), CostRow(name=bullet, gpu_hours=2.6, cost=10.6),
                 CostRow(name="视觉组", gpu_hours=1, cost=4.1)],
        queue=[QueueRow(team="<@all> [q](https://evil.example/q)", jobs=1, mean_wait_s=60, max_wait_s=600)],
        suggestions=[Suggestion(user="mallory<script>alert(2)</script>", job=f"ml-team/jup{PHISH}", kind="idle",
                                gpus=1, used=0, hours=2, cost=8.2)],
        credits=[CreditRow(owner="bob\n- [x] credit 1000 GPU-hours", stops=1, gpus=1, gpu_hours=1, kind="priority",
                           priority_bump=1)])
    for lang in ("en", "zh"):
        digest = render_markdown(report, lang)
        assert live_markup(digest) == [], digest
        assert "<script>" not in digest and "\n- [x]" not in digest and "\n- ［x］" not in digest
        bullets = [line for line in digest.splitlines() if line.startswith("- ")]
        # three headline figures, three teams, one queue, one suggestion, one credit: nothing added
        assert len(bullets) == 3 + 3 + 1 + 1 + 1, digest
        assert "- 视觉组" in digest and "approved by oncall" in digest and "evil.example/sso" in digest
        assert digest.startswith("### ") and "**" in digest  # the steward's own heading and bold labels
    # The HTML report escapes the same names (html.escape), and shows them as they are.
    page = render_html(report)
    assert "<script>" not in page and "mallory&lt;script&gt;alert(2)&lt;/script&gt;" in page


def test_the_markdown_helper_neutralises_each_kind_of_markup():
    from core.text import markdown_text

    shown = markdown_text("[a](https://x.example) ![i](http://x.example/i.png) <b>b</b> <@u1> @all @所有人 "
                          "&#91;e&#93;(u)\n# h\r\n> q\x1b[31m\u202e")
    assert live_markup(shown) == [] and "\n" not in shown and "\r" not in shown and "\x1b" not in shown
    assert "\u202e" not in shown and "@所有人" not in shown
    assert markdown_text(" (javascript:alert(1))").startswith(" （")  # after "[GPU Steward] ": not a link target
    assert markdown_text("bert_finetune-v2 (copy) *fast* 100%") == "bert_finetune-v2 (copy) *fast* 100%"
    assert markdown_text("视觉组：显存不足（第 2 轮），请检查数据管道。") == "视觉组：显存不足（第 2 轮），请检查数据管道。"


def test_an_incident_message_to_oncall_shows_the_jobs_on_the_node_and_the_alerts_text_as_text():
    from agent.alerts.incidents import AffectedJob, IncidentView, render
    from agent.alerts.investigate import Investigation, JobProgress, render_lines

    job = AffectedJob(id=NAME, user="mallory<@ceo>", project="ml-team\n- [x] approved by oncall", gpus=1, node="n1")
    progress = JobProgress(id=NAME, user="mallory", project=None, gpus=1, state="stalled", detail=f"no log; {PHISH}")
    for lang in ("en", "zh"):
        view = IncidentView(
            id=1, alertname="XidErrors", subject="node/n1", severity="critical", layer="hardware",
            started=datetime(2026, 11, 2, 9, tzinfo=UTC), alerts=1, summary=f"Xid 79 on n1 {PHISH}",
            evidence=[f"XidErrors pod={NAME}"], runbook="gpu-xid](https://evil.example/rb", steps=["Drain the node."],
            jobs=[job], investigation=render_lines(Investigation(node="n1", jobs=[progress]), lang))
        title, body = render(view, lang)
        assert live_markup(title) == [] and live_markup(body) == [], body
        assert not [line for line in body.splitlines() if "approved by oncall" in line and line.startswith("- ")]
        assert "1. Drain the node." in body and "evil.example/sso" in body  # the runbook's steps; the name as text


def test_a_chatops_reply_quotes_a_job_name_as_text(tmp_path):
    """A DingTalk or WeCom reply (the answerer's, or the findings summary) names jobs and quotes their evidence: a
    Slurm job named `<a href=...>` or `[..](https://..)` became a live link in the steward's reply (WeCom renders
    `<a href>` in a text message), and @all a mention. The reply's own lines stay."""
    import yaml
    from fastapi.testclient import TestClient

    from agent.api.build import fast_forward
    from agent.chatops.commands import ChatCommands, findings_summary
    from agent.chatops.directory import UserDirectory
    from agent.chatops.router import offline_answer
    from agent.config.settings import Settings
    from server import create_app

    name = 'gpu/<a href="https://evil.example/sso">keep your job</a> @all'
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario(name)))
    settings = Settings(data_dir=tmp_path / "data", leader_lock="none", sweep_every_s=300, runbooks_enabled=False,
                        scenario=str(path))
    app = create_app(settings, speed=0, start_s=0, run_scheduler=False)
    with TestClient(app, base_url="http://localhost"):
        rt = app.state.runtime
        fast_forward(rt, until_s=90 * 60)
        chat = ChatCommands(lambda: rt, UserDirectory.from_settings(settings), offline_answer(lambda: rt))
        replies = [chat.handle("wecom", "ops", q) for q in ("who is wasting GPUs?", "谁在浪费 GPU？")]
        replies += [findings_summary(rt, lang) for lang in ("en", "zh")]
        for reply in replies:
            assert "keep your job" in reply, reply  # the job is named
            assert "<a" not in reply and "https://" not in reply and "@all" not in reply, reply
        assert len(replies[2].splitlines()) == 3  # heading, the one finding, the closing hint
    # The steward's own placeholders are no tag: kept as written.
    from core.text import chat_reply_text
    assert chat_reply_text("Reply `keep 4h <job> <reason>`; util >= 5%") == "Reply `keep 4h <job> <reason>`; util >= 5%"
