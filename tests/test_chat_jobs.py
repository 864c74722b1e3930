"""Chat that does the operator's and owner's jobs: why a job was flagged or stopped, what happens next and when,
`keep` through the ChatOps exemption path, what was done today; the reply in the question's language."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from agent.chatops.commands import KeepRequest, parse_keep
from agent.config.settings import ApiToken
from agent.graph.execute import fresh_facts
from agent.guardrail.decide import decide
from core.actions import ProposedAction
from tests.test_server_api import client_for, settings_for, sse_events

JOB = "ml-team/jupyter-carol"  # idle on the demo: warned at 15:35, stopped at 16:35 (an hour of notice)
CAROL = {"Authorization": "Bearer carol-token"}
BOB = {"Authorization": "Bearer bob-token"}


def _client(tmp_path):
    tokens = {"carol-token": ApiToken(name="carol", role="viewer"), "bob-token": ApiToken(name="bob", role="viewer"),
              "lead-token": ApiToken(name="lead", role="approver")}
    return client_for(settings_for(tmp_path, api_tokens=tokens), start_s=90 * 60)  # 15:30


def sweep_to(client, minutes: int) -> None:
    """Sweep every 5 simulated minutes until `minutes` after the demo's 14:00 start."""
    rt = client.app.state.runtime
    while rt.deps.clock.now().hour * 60 + rt.deps.clock.now().minute < 14 * 60 + minutes:
        with rt.graph_lock:
            rt.sim_clock.cluster.advance(300)
        assert client.post("/api/sweeps", headers={"Authorization": "Bearer lead-token"}).status_code == 200


def ask(client, message: str, headers: dict, **extra) -> tuple[dict, list[dict]]:
    events = sse_events(client.post("/api/chat", json={"message": message, **extra}, headers=headers).text)
    assert events[-1]["type"] == "done", events
    return events[0], events


@pytest.fixture
def client(tmp_path):
    with _client(tmp_path) as c:
        yield c


def test_parse_keep_takes_the_job_and_duration_in_either_order():
    assert parse_keep(f"keep {JOB} for 4h") == KeepRequest(4 * 3600.0, "4h", JOB, [])
    assert parse_keep("keep 4h") == KeepRequest(4 * 3600.0, "4h", None, [])
    assert parse_keep("保留 2小时 今晚演示") == KeepRequest(2 * 3600.0, "2h", "今晚演示", [])
    assert parse_keep("keep 30 minutes ml-team/x demo") == KeepRequest(1800.0, "30m", "ml-team/x", ["demo"])
    assert parse_keep("keep 1234 4h") == KeepRequest(4 * 3600.0, "4h", "1234", [])  # a Slurm id is not seconds
    assert parse_keep("keep it") == "it"  # a keep without a duration: refused with what was said
    assert parse_keep("keeper of the pool") is None and parse_keep("who is idle?") is None


def test_why_and_what_next_while_warned_in_both_languages(client):
    sweep_to(client, 95)  # 15:35: carol is warned; the earliest stop is 16:35
    start, events = ask(client, f"why did you flag {JOB}? what will happen to it?", CAROL)
    answer = events[-1]["answer"]
    assert start["intent"] == "job" and start["lang"] == "en"
    assert [e["name"] for e in events if e["type"] == "tool_call"] == ["job_status"]
    assert "Why: idle" in answer and "1 GPU" in answer and "15:35 UTC warned the owner" in answer
    assert "if it is still wasting at 16:35 UTC" in answer and "keep 4h" in answer

    # A Chinese question in the English UI gets Chinese; `jupyter` names the one job it can mean.
    start, events = ask(client, "为什么要停止 jupyter 任务?", CAROL, lang="en")
    answer = events[-1]["answer"]
    assert start["lang"] == "zh" and JOB in answer
    assert "原因：空闲" in answer and "15:35（UTC）警告了所有者" in answer and "16:35（UTC）" in answer


def test_a_stop_in_the_sweep_that_read_the_job_running_is_not_contradicted(client):
    """The 16:35 sweep read the notebook running, then stopped it: chat must not say "running now" above "stopped"."""
    sweep_to(client, 155)
    answer = ask(client, f"why did you stop {JOB}?", CAROL)[1][-1]["answer"]
    assert "no longer running" in answer and "running now" not in answer and "it was stopped at 16:35" in answer


def test_why_after_the_stop_names_the_stop_from_the_audit(client):
    sweep_to(client, 160)  # 16:40: carol's notebook was stopped at 16:35
    answer = ask(client, f"why did you stop {JOB}?", CAROL)[1][-1]["answer"]
    assert "no longer running" in answer and "16:35 UTC asked it to stop (SIGTERM): executed" in answer
    assert "Why: idle" in answer and "it was stopped at 16:35 UTC" in answer
    zh = ask(client, f"为什么停止了 {JOB}？", CAROL)[1][-1]["answer"]
    assert "已不在运行" in zh and "已于 16:35（UTC）被停止" in zh
    # The audited finding reads in Chinese too, rendered from the numbers the audit kept.
    assert "1 块 GPU 利用率最高 0.0%" in zh and "GPU at max" not in zh


def test_keep_in_the_jobs_context_is_audited_and_the_guardrail_honours_it(client):
    sweep_to(client, 95)
    rt = client.app.state.runtime
    # Someone else's job: refused, and the refusal audited, never as an exemption.
    start, events = ask(client, "keep 4h", BOB, job=JOB)
    assert start["intent"] == "keep" and "Only carol (the owner) or an approver" in events[-1]["answer"]
    assert rt.deps.audit.entries(kind="exemption") == []
    refused = rt.deps.audit.entries(kind="decision", status="refused")
    assert refused[0].action == "keep" and refused[0].target == JOB and refused[0].data["by"] == "web:bob"
    # The Chinese audit view says the keep was not taken and why, not that a guardrail rule failed.
    zh = client.get("/api/audit", params={"kind": "decision", "lang": "zh"}, headers=CAROL).json()
    texts = [e["text"] for e in zh["entries"] if e["action"] == "keep"]
    assert texts and texts[0].startswith("未受理保留：只有作业所有者 carol") and "护栏" not in texts[0]
    # More than an owner may: refused.
    assert "at most 24h" in ask(client, f"keep {JOB} for 3d", CAROL)[1][-1]["answer"]
    # Less than a minute: it would end before the next sweep, audited as a keep that held nothing.
    assert "at least 1m" in ask(client, f"keep {JOB} for 30s", CAROL)[1][-1]["answer"]
    # The owner, in the job's context.
    answer = ask(client, "keep 4h finishing a demo", CAROL, job=JOB)[1][-1]["answer"]
    assert answer.startswith(f"OK: {JOB} is kept until") and "finishing a demo" in answer
    [kept] = rt.deps.audit.entries(kind="exemption")
    assert kept.target == JOB and kept.data["by"] == "web:carol" and kept.status == "granted"

    sweep_to(client, 160)  # past the deadline: it would have been stopped at 16:35
    assert rt.deps.scheduler.get_job(JOB).state == "running"
    facts = fresh_facts(rt.deps, "check", JOB, None)
    proposal = ProposedAction(action="terminate", target=JOB, reason="idle", finding_kind="idle")
    decision = decide(proposal, facts, rt.deps.policy, rt.deps.audit.history(rt.deps.clock.now()))
    assert decision.verdict == "deny" and decision.rule == "protected" and "web:carol" in decision.reason
    answer = ask(client, f"what will happen to {JOB}?", CAROL)[1][-1]["answer"]
    assert "Next: nothing. It is kept until 19:35 UTC by web:carol (finishing a demo)" in answer
    # The waste list says so too: it still wastes, and is not stopped before the keep ends.
    waste = ask(client, "who is wasting GPUs?", CAROL)[1][-1]["answer"]
    row = next(line for line in waste.splitlines() if JOB in line)
    assert row.endswith("(kept by web:carol until 19:35 UTC: not stopped before)"), row
    assert "已由 web:carol 保留至 19:35（UTC），期间不会停止" in ask(client, "谁在浪费 GPU？", CAROL)[1][-1]["answer"]


def test_keep_refuses_a_job_that_does_not_run_and_answers_in_chinese(client):
    sweep_to(client, 160)  # stopped at 16:35
    rt = client.app.state.runtime
    zh = ask(client, f"保留 {JOB} 4小时", CAROL)[1][-1]["answer"]
    assert zh == f"{JOB} 已取消，无需保留。"  # the scheduler still lists it, cancelled
    assert "nothing to keep" in ask(client, "keep ml-team/no-such-job 1h", CAROL)[1][-1]["answer"]
    assert rt.deps.audit.entries(kind="exemption") == []
    assert len(rt.deps.audit.entries(kind="decision", status="refused")) == 2
    # A keep without a duration says what is missing (it read the job's name as the duration).
    said = ask(client, f"keep {JOB} please, carol needs it tonight", CAROL)[1][-1]["answer"]
    assert said.startswith("Not kept: a keep needs a duration, e.g. `keep 4h <job> <reason>`"), said


def test_a_job_that_ignored_its_sigterm_can_be_kept_from_its_forced_stop(client):
    """augment-worker ignored SIGTERM and waits for an approved forced stop: "is stopping already, so there is
    nothing to keep" refused the one keep that still holds something back."""
    sweep_to(client, 200)
    rt = client.app.state.runtime
    job = "cv-team/augment-worker"
    assert rt.deps.scheduler.get_job(job).state == "stopping"
    said = ask(client, f"keep 2h {job} erin is debugging", {"Authorization": "Bearer lead-token"})[1][-1]["answer"]
    assert said.startswith(f"OK: {job} is kept until") and "holds off a forced stop" in said, said
    proposal = ProposedAction(action="force_terminate", target=job, reason="ignored SIGTERM", finding_kind="idle")
    facts = fresh_facts(rt.deps, "check", job, None)
    decision = decide(proposal, facts, rt.deps.policy, rt.deps.audit.history(rt.deps.clock.now()))
    assert decision.verdict == "deny" and decision.rule == "protected", decision


def test_a_keep_said_while_the_scheduler_does_not_answer_is_told_and_audited_not_a_500(client, monkeypatch):
    """The keep path read the job without a guard: squeue timing out raised through the chat (a 500 on a ChatOps
    callback, no reply), and the owner never learned the keep was not taken."""
    sweep_to(client, 95)
    rt = client.app.state.runtime

    def unreadable(job_id):
        raise RuntimeError("`squeue --json` timed out after 30s")

    monkeypatch.setattr(rt.deps.scheduler, "get_job", unreadable)
    answer = ask(client, f"keep {JOB} 4h", CAROL)[1][-1]["answer"]
    assert answer.startswith("Not kept: the cluster could not be read just now"), answer
    assert ask(client, f"保留 {JOB} 4小时", CAROL)[1][-1]["answer"].startswith("未保留：暂时无法读取集群")
    assert rt.deps.audit.entries(kind="exemption") == []
    assert len([e for e in rt.deps.audit.entries(kind="decision", status="refused") if e.action == "keep"]) == 2


def test_what_was_done_today(client):
    sweep_to(client, 95)
    done = client.app.state.runtime.deps.audit.entries(kind="execution")
    assert len(done) > 1
    start, events = ask(client, "what did you do today?", CAROL)
    answer = events[-1]["answer"]
    assert start["intent"] == "today" and f"Today (2026-11-02) I took {len(done)} actions:" in answer
    assert f"15:35 UTC warned the owner: **{JOB}** (level 1): executed (inbox to carol: sent)" in answer
    zh = ask(client, "今天做了什么？", CAROL)[1][-1]["answer"]
    assert f"今天（2026-11-02）共执行了 {len(done)} 项操作" in zh and "警告了所有者" in zh and "已执行" in zh


def test_a_question_about_one_kind_of_waste_says_none_of_that_kind_not_that_nobody_wastes(client):
    """"show me zombie jobs" after the demo's zombie was stopped, with idle jobs still found: it answered "Nobody is
    wasting GPUs right now", which the next question ("who is wasting?") contradicted."""
    sweep_to(client, 200)  # 17:20: detector-train was stopped as a zombie at 16:35; idle findings remain
    answer = ask(client, "show me zombie jobs", CAROL)[1][-1]["answer"]
    assert answer.startswith("The latest sweep found no zombie job.") and "Nobody" not in answer
    assert "stopped in the last 24 hours: **cv-team/detector-train** (16:35 UTC)" in answer
    assert "other findings: ask “who is wasting GPUs?”" in answer
    zh = ask(client, "有僵尸任务吗？", CAROL)[1][-1]["answer"]
    assert zh.startswith("最近一次巡检没有发现僵尸作业。") and "**cv-team/detector-train**，停止于 16:35（UTC）" in zh
    kept = ask(client, "keep research/lr-sweep 4h demo", {"Authorization": "Bearer lead-token"})[1][-1]["answer"]
    assert kept.startswith("OK: research/lr-sweep is kept until"), kept
    today = ask(client, "今天做了什么？", CAROL)[1][-1]["answer"]
    header, *items = today.splitlines()
    done = len(client.app.state.runtime.deps.audit.entries(kind="execution"))
    assert header == f"今天（2026-11-02）共执行了 {done} 项操作，另有 1 个作业被人工保留：" and len(items) == done + 1


def test_my_job_is_the_askers_and_a_name_written_before_job_is_a_name(client):
    """"why did you stop my notebook?" asked which job, citing the one it meant as its example; a bare name before
    "这个 job" got the same request, where a namespaced unknown one was said to be unknown."""
    sweep_to(client, 170)  # carol's notebook was stopped at 16:35: no longer running, no longer a finding
    for question, head in (("why did you stop my notebook?", f"**{JOB}**"), ("为什么停掉了我的 notebook？", f"**{JOB}**")):
        start, events = ask(client, question, CAROL)
        answer = events[-1]["answer"]
        assert start["intent"] == "job" and head in answer.splitlines()[0], answer
        assert "Which job" not in answer and "请指明作业" not in answer
    zh = ask(client, "llama-finetune-7b 这个 job 现在什么状态？", CAROL)[1][-1]["answer"]
    assert zh.startswith("我不知道作业 **llama-finetune-7b**"), zh


def test_a_quiet_window_under_way_is_said_to_be_under_way(client):
    """At 17:20 the pool's 17:00-22:00 window was listed as "17:00-22:00", read as one still to come."""
    sweep_to(client, 200)
    answer = ask(client, "which pool is quiet tonight?", CAROL)[1][-1]["answer"]
    assert "now (since 17:00)-22:00 UTC" in answer, answer
    zh = ask(client, "哪个节点池今晚空闲？", CAROL)[1][-1]["answer"]
    assert "现在（自 17:00 起）-22:00（UTC）" in zh, zh


def test_the_cost_answer_keeps_empty_nodes_waste_apart_from_the_jobs_cost(client):
    """"$322.06 for 58.6 GPU-hours ($230.82 of it on waste found)": $153.88 of that was the pool's empty nodes, which
    the jobs' cost does not hold, so 56 of 58.6 GPU-hours read wasted."""
    import re

    from agent.records.usage import build_report

    sweep_to(client, 300)  # 19:00: the on-demand pool has had empty nodes for hours
    rt = client.app.state.runtime
    report = build_report(rt.deps.audit, rt.deps.clock.now() - timedelta(days=7), rt.deps.clock.now())
    answer = ask(client, "how much did we spend this week?", CAROL)[1][-1]["answer"]
    held, empty = (float(x) for x in re.search(r"\(\$([\d.]+) of it on waste found in jobs; empty pool nodes found on "
                                               r"top: \$([\d.]+)\)", answer).groups())
    assert empty > 0 and held + empty == pytest.approx(report.waste_cost, abs=0.02)
    assert held <= report.cost


def test_what_a_probe_of_161_operator_questions_found_misread(client):
    """A second probe asked 161 questions and checked each against the APIs; these were answered with the help
    text, the waste list, every action of the day, "which one?" or the queue."""
    sweep_to(client, 160)

    def reply(question: str, intent: str) -> str:
        start, events = ask(client, question, CAROL)
        assert start["intent"] == intent, (question, start, events[-1]["answer"])
        return events[-1]["answer"]

    # Free GPUs named by model, or as 空卡: a count, not the help text or "no idle job".
    for question in ("how many free H100s are there?", "H100 还有多少空卡", "还有多少空闲的 H100 卡？"):
        assert re.search(r"H100-80GB[^\n]*(free|空闲)", reply(question, "status")), question
    # A user's jobs: each with its state, not "which one?"; "what happened to frank's job?" is frank's job's.
    grace = reply("what is grace running?", "job")
    assert grace.startswith("grace's jobs:") and "Which one?" not in grace
    assert grace.count("\n- **research/") == 2
    assert "gpu-long/resnet-ablation" in reply("what happened to frank's job?", "job").splitlines()[0]
    # A pool named: its plan, not "which job?" or the savings so far.
    assert "a100-ondemand" in reply("why does a100-ondemand need a resize?", "forecast")
    # 超配 is a kind of waste; a how-to about pending jobs is the runbooks'.
    assert "research/lr-sweep" in reply("有没有超配的作业？", "waste")
    assert reply("job stuck in pending for hours, how to debug", "runbook") != ""
    # "please kill X" is a request chat refuses; "will you kill it?" a question its story answers.
    assert reply("please kill research/lr-sweep, grace is on vacation", "job").startswith("Chat cannot stop jobs")
    assert not reply("is research/lr-sweep idle? will you kill it?", "job").startswith("Chat cannot stop jobs")
    # "who approved it?": the story says a person did, or that none was asked.
    story = reply(f"why was {JOB} stopped and who approved it?", "job")
    assert "automatic (level 2: the policy asks no approval for it)" in story, story
    assert "自动执行（级别 2：策略不要求审批）" in reply(f"为什么 {JOB} 被停了，谁批准的？", "job")


def test_with_a_model_keep_stays_a_command_and_the_model_reads_job_status(tmp_path):
    from langchain_core.messages import AIMessage

    from tests.scripted_model import ScriptedChatModel, rounds, tool_call

    model = ScriptedChatModel(script=rounds(
        AIMessage(content="", tool_calls=[tool_call("job_status", "c1", job="jupyter")]),
        AIMessage(content="Warned at 15:35; it is stopped at 16:35 if still idle."),
    ))
    tokens = {"carol-token": ApiToken(name="carol", role="viewer"), "lead-token": ApiToken(name="lead", role="approver")}
    with client_for(settings_for(tmp_path, api_tokens=tokens), start_s=90 * 60, chat_model=model) as c:
        sweep_to(c, 95)
        start, events = ask(c, "keep 4h", CAROL, job=JOB)
        assert start["answerer"] == "offline" and events[-1]["answer"].startswith(f"OK: {JOB} is kept until")
        assert model.bound_tools == []  # the model was not asked
        start, events = ask(c, "why was my notebook flagged?", CAROL)
        assert start["answerer"] != "offline" and "job_status" in model.bound_tools
        [result] = [e for e in events if e["type"] == "tool_result"]
        assert result["name"] == "job_status" and result["status"] == "ok"
        assert f"**{JOB}** (carol, 1 GPU)" in result["summary"] and "kept until" in result["summary"]


def test_chat_times_follow_the_display_zone(tmp_path):
    """STEWARD_DISPLAY_TZ=Asia/Shanghai: 15:35 UTC reads 23:35 Asia/Shanghai, as the UI and the report say it."""
    tokens = {"carol-token": ApiToken(name="carol", role="viewer"), "lead-token": ApiToken(name="lead", role="approver")}
    settings = settings_for(tmp_path, api_tokens=tokens).model_copy(update={"display_tz": "Asia/Shanghai"})
    with client_for(settings, start_s=90 * 60) as c:
        sweep_to(c, 95)
        _, events = ask(c, f"why did you flag {JOB}?", CAROL)
        answer = events[-1]["answer"]
        assert "23:35 Asia/Shanghai warned the owner" in answer and "UTC" not in answer, answer


def test_cost_forecast_and_a_job_named_by_its_owner(client):
    """What a platform team asks beyond waste: the week's cost per team, the pools' plans, "carol's notebook"."""
    sweep_to(client, 100)
    start, events = ask(client, "上周各团队花了多少钱？", CAROL)
    zh = events[-1]["answer"]
    assert start["intent"] == "cost" and "各团队" in zh and "ml-team" in zh and "GPU 小时" in zh
    assert "steward report" in zh
    start, events = ask(client, "what did each team spend this week?", CAROL)
    assert start["intent"] == "cost" and "By team:" in events[-1]["answer"]
    # The pools: the demo's on-demand pool sits in its predicted quiet evening by now.
    start, events = ask(client, "明天晚上什么时候可以缩容？", CAROL)
    assert start["intent"] == "forecast" and "a100-ondemand" in events[-1]["answer"]
    # A question about pools is about pools: "idle" in it once matched the jobs' idle findings ("no waste"), and
    # "night" a job named nightly-eval.
    for question in ("哪个节点池晚上空闲？", "which pool is idle at night?"):
        start, events = ask(client, question, CAROL)
        assert start["intent"] == "forecast" and "a100-ondemand" in events[-1]["answer"], (question, events[-1])
    # A user, not a job: her one job answers; another user's several are listed.
    start, events = ask(client, "why did you warn carol's notebook?", BOB)
    assert start["intent"] == "job" and JOB in events[-1]["answer"] and "Why: idle" in events[-1]["answer"]


def test_a_model_that_is_down_still_gets_the_question_answered(tmp_path):
    """The model's endpoint refuses connections (a closed port on loopback): the built-in answerer replies, and
    says the model is away, instead of an error event and no answer."""
    from agent.config.settings import Settings
    from agent.planning.llm_planner import make_chat_model
    from tests.conftest import free_port

    model = make_chat_model(Settings(llm_base_url=f"http://127.0.0.1:{free_port()}/v1", llm_model="m",
                                     llm_api_key="x", llm_timeout_s=2))
    tokens = {"carol-token": ApiToken(name="carol", role="viewer"), "lead-token": ApiToken(name="lead", role="approver")}
    with client_for(settings_for(tmp_path, api_tokens=tokens), start_s=90 * 60, chat_model=model) as c:
        sweep_to(c, 95)
        events = sse_events(c.post("/api/chat", json={"message": "who is wasting GPUs?"}, headers=CAROL).text)
        assert not [e for e in events if e["type"] == "error"], events
        answer = events[-1]["answer"]
        assert events[-1]["type"] == "done" and "The model is unavailable" in answer and JOB in answer


def test_questions_operators_ask_beyond_one_job(client):
    """From a probe's 48 questions: the cluster's free GPUs, hung jobs only, waste by team, savings not cost,
    a job named in a "what happened" question, a user's jobs, and a pending stop named as an action in Chinese."""
    sweep_to(client, 100)

    def intent_and_answer(question: str) -> tuple[str, str]:
        start, events = ask(client, question, CAROL)
        return start["intent"], events[-1]["answer"]

    intent, zh = intent_and_answer("集群现在还剩多少张空闲的卡")
    assert intent == "status" and "空闲" in zh and "块中空闲" in zh
    intent, en = intent_and_answer("what's the status of the cluster")
    assert intent == "status" and "free" in en and "jobs running" in en
    intent, hung = intent_and_answer("which jobs are hung?")
    assert intent == "waste" and "cv-team/detector-train" in hung and "research/lr-sweep" not in hung
    intent, teams = intent_and_answer("which team is wasting the most?")
    assert teams.startswith("By team: ")
    assert intent_and_answer("这周省了多少钱？")[0] == "savings"
    assert intent_and_answer("what happened to detector-train")[0] == "job"
    intent, frank = intent_and_answer("what is frank running?")
    assert intent == "job" and "gpu-long/resnet-ablation" in frank


def test_chat_says_it_cannot_stop_a_job_and_names_a_protection(client):
    sweep_to(client, 100)
    zh = ask(client, "能帮我把 detector-train 直接杀掉吗", CAROL)[1][-1]["answer"]
    assert zh.startswith("聊天无法停止作业") and "cv-team/detector-train" in zh
    en = ask(client, "is prod/llm-serving gonna get killed?", CAROL)[1][-1]["answer"]
    assert "It is protected (" in en and "never stops it" in en
    # What comes next says the same: it read "the next sweep warns the owner; a stop can come ..." (a probe).
    assert "neither warned of a stop nor stopped" in en and "next sweep warns" not in en, en
    zh = ask(client, "prod/llm-serving 会被停止吗？", CAROL)[1][-1]["answer"]
    assert "它受保护" in zh and "不会收到停止警告" in zh and "下一次巡检会警告" not in zh, zh


def test_records_of_an_earlier_namesake_are_left_out_but_its_keep_holds():
    """Notebook pods come back under the same name: the new run's owner must not read the last run's finding or stop
    as this run's. A keep is the exception: the owner named the job, and the guardrail honours it by name."""
    from datetime import UTC, datetime, timedelta

    from agent.api.answerer import ChatContext, job_status
    from agent.config.policy import Policy
    from agent.guardrail.protection import protection_reason
    from agent.records.audit import AuditLog
    from core.cluster import JobInfo
    from core.observation import Observation

    now = datetime(2026, 11, 2, 22, 0, tzinfo=UTC)
    audit = AuditLog()
    audit.record("finding", at=now - timedelta(hours=2), run_id="r1", target=JOB, status="idle",
                 reason="idle for 1h", data={"kind": "idle", "target_uid": "uid-old"})
    audit.record("execution", at=now - timedelta(hours=1), run_id="r1", target=JOB, action="terminate",
                 status="executed", reason="idle", data={"target_uid": "uid-old", "detail": "stopped"})
    job = JobInfo(id=JOB, uid="uid-new", scheduler="kubernetes", namespace="ml-team", name="jupyter-carol",
                  user="carol", gpus=1, state="running", node="gpu-1", started_at=now - timedelta(minutes=40))
    obs = Observation(at=now, slice_s=300, lookback_s=3600, jobs=[job])
    ctx = ChatContext(findings=[], observation=obs, tools={}, audit=audit, pending=[], now=now, currency="CNY")
    answer = job_status(ctx, JOB, "en")
    assert "Why: idle" not in answer and "it was stopped" not in answer and "terminate" not in answer, answer
    assert "2 finding(s) or action(s) from the last day are about an earlier job under this name" in answer, answer
    assert "此前同名的另一个作业" in job_status(ctx, JOB, "zh")
    # The earlier run's keep, by name, holds for this run in the guardrail, and the chat says so.
    audit.record("exemption", at=now - timedelta(hours=3), run_id="chat", target=JOB, status="granted",
                 reason="demo tonight", data={"until": (now + timedelta(hours=5)).isoformat(), "by": "carol",
                                              "target_uid": "uid-old"})
    assert "exempted by carol" in (protection_reason(job, Policy(), audit.history(now), now) or "")
    assert "kept until" in job_status(ctx, JOB, "en")


def test_a_chatops_answer_right_after_a_keep_reads_the_keep_and_names_an_old_reading(tmp_path):
    """ChatOps answers from the newest reading held (a platform waits a few seconds), but reads keeps and approvals as
    of now: a keep granted a minute after the last sweep was answered "nothing is planned". When no sweep has
    finished for a while the answer says how old its reading is."""
    from fastapi.testclient import TestClient

    from agent.api.build import fast_forward
    from agent.chatops.commands import ChatCommands
    from agent.chatops.directory import UserDirectory
    from agent.chatops.router import offline_answer
    from agent.config.settings import Settings
    from server import create_app

    settings = Settings(data_dir=tmp_path, leader_lock="none", sweep_every_s=300, runbooks_enabled=False,
                        scenario="evals/scenarios/idle-notebook.yaml")
    app = create_app(settings, speed=0, start_s=0, run_scheduler=False)
    with TestClient(app, base_url="http://localhost"):
        rt = app.state.runtime
        fast_forward(rt, until_s=95 * 60)  # carol's notebook was warned
        with rt.graph_lock:
            rt.sim_clock.cluster.advance(120)  # two minutes after the sweep
        chat = ChatCommands(lambda: rt, UserDirectory.from_settings(settings), offline_answer(lambda: rt))
        assert chat.handle("wecom", "carol", f"keep 4h {JOB} demo tonight").startswith("OK")
        reply = chat.handle("wecom", "carol", f"is {JOB} kept? when will it be stopped?")
        assert "kept until" in reply and "newest reading" not in reply, reply
        with rt.graph_lock:
            rt.sim_clock.cluster.advance(40 * 60)  # no sweep finishes for 40 minutes
        reply = chat.handle("wecom", "carol", f"is {JOB} kept?")
        assert "The newest reading of the cluster is from" in reply and "42m ago" in reply, reply
        assert "集群" in chat.handle("wecom", "carol", f"{JOB} 保留了吗？")


def test_after_a_short_keep_lapses_the_owner_is_warned_again_before_any_stop(tmp_path):
    """A keep answers the warning before it. A 10-minute keep used to lapse into a stop at the very next sweep, on the
    warning the keep had answered; now the owner is warned again and has the full notice."""
    from datetime import timedelta

    from fastapi.testclient import TestClient

    from agent.api.build import fast_forward
    from agent.chatops.commands import ChatCommands
    from agent.chatops.directory import UserDirectory
    from agent.chatops.router import offline_answer
    from agent.config.settings import Settings
    from server import create_app

    settings = Settings(data_dir=tmp_path, leader_lock="none", sweep_every_s=300, runbooks_enabled=False,
                        scenario="evals/scenarios/idle-notebook.yaml")
    app = create_app(settings, speed=0, start_s=0, run_scheduler=False)
    with TestClient(app, base_url="http://localhost"):
        rt = app.state.runtime
        fast_forward(rt, until_s=100 * 60)  # warned at 95 min; the earliest stop is 155 min
        chat = ChatCommands(lambda: rt, UserDirectory.from_settings(settings), offline_answer(lambda: rt))
        assert chat.handle("wecom", "carol", "keep 10m ml-team/jupyter-carol one more plot").startswith("OK")
        fast_forward(rt, until_s=200 * 60)
        done = [e for e in rt.deps.audit.entries(kind="execution", target="ml-team/jupyter-carol", status="executed",
                                                 limit=100, newest_first=False)]
        warnings = [e.at for e in done if e.action == "notify"]
        stops = [e.at for e in done if e.action == "terminate"]
        assert len(warnings) == 2, done
        assert stops and stops[0] >= warnings[1] + timedelta(seconds=rt.deps.policy.warning.min_notice), (warnings, stops)


def test_what_operators_ask_that_fell_through_to_the_help_text(client):
    """A probe of 118 operator questions found these answered with the help text, another job's story, the approvals
    list or every team's numbers. Each now gets its own answer, from the same records the pages show."""
    sweep_to(client, 160)  # 16:40: carol's notebook was stopped at 16:35; cv-team's augment-worker is idle

    def reply(question: str, intent: str) -> str:
        start, events = ask(client, question, CAROL)
        assert start["intent"] == intent, (question, start, events[-1]["answer"])
        return events[-1]["answer"]

    # The scheduler's queue, not the approvals ("pending" meant both).
    assert reply("which jobs are pending in the queue?", "queue").startswith("No job is waiting to be scheduled")
    assert reply("哪些任务在排队", "queue").startswith("没有排队等待调度的作业")
    assert reply("any pending approvals?", "approvals") == "No approvals are waiting."
    # A count of free GPUs in a pool is the cluster's state, not the pools' forecast.
    assert "H100-80GB: 2 of 16 free" in reply("how many GPUs does the h100-reserved pool have free?", "status")
    # A job nobody knows: said so, never another job's story or the waste list.
    for question in ("why was ml-team/nonexistent-job stopped?", "is job nb-ghost-7 idle?"):
        answer = reply(question, "job")
        assert answer.startswith("I know no job **") and "Jobs I know:" in answer and "Why:" not in answer
    # One team's numbers when a team is named; a team nobody bills is named as unknown, not answered with all.
    one = reply("How much did ml-team spend this week?", "cost")
    assert one.startswith("**ml-team**'s GPU cost") and "cv-team" not in one
    assert "没有团队 **team-a**" in reply("team-a 这周花了多少钱", "cost")
    assert "By team:" in reply("how much did each team spend this week?", "cost")  # "each team" names none
    waste = reply("cv-team 浪费了多少", "waste")
    assert "cv-team/augment-worker" in waste and "research/lr-sweep" not in waste
    assert reply("is the ml-team wasting anything?", "waste").startswith("Nobody in team ml-team is wasting")
    # Overnight reaches into yesterday evening; keeps and protections have their own answer, in Chinese too.
    assert reply("昨晚你都干了啥", "today").startswith("最近 24 小时共执行了 9 项操作")
    kept = reply("谁保留了作业？有哪些豁免", "kept")
    assert "prod/llm-serving" in kept and "注解 steward.io/protected=true 在保护列表 protection.annotations 中" in kept
    assert "is in protection.annotations" in reply("which jobs are protected?", "kept")
    # An approval typed into chat, and a keep said in words: where to answer, and the syntax.
    assert "Approvals page" in reply("approve apr_123abc", "approvals")
    # An answer asked for in words: the same reply, not the savings the rest of the message asked about.
    assert reply("帮我 approve 一下 a100-ondemand 的 resize，then tell me how much we save", "approvals").startswith(
        "聊天不接受审批答复")
    assert reply("please deny the stop of cv-team/augment-worker", "approvals").startswith(
        "Chat does not take approval answers")
    # A question about an answer is not a request for one: the job's own story (a review).
    assert "Chat does not take" not in reply(f"did anyone approve the stop of {JOB}?", "job")
    assert "`保留 <时长> <作业> <原因>`" in reply("把 nb-alice 保留到明天", "keep")
    # The runbooks: this server has no index enabled, and says so rather than printing the help text.
    assert "STEWARD_RUNBOOKS_ENABLED" in reply("NCCL hang 怎么排查", "runbook")
    assert reply("give me a summary", "status").startswith("The cluster as read at")
    assert reply("hwo much did we sav", "savings").startswith("Reclaimed so far")
    # A review of the above: questions it had sent astray.
    for question in ("how is the cluster?", "集群怎么样", "which Slurm queue has free GPUs?"):
        assert reply(question, "status").startswith(("The cluster as read at 16:40 UTC", "16:40（UTC）读取的集群")), question
    for question in ("which team wastes the most?", "哪个团队浪费最多"):
        assert reply(question, "waste").startswith(("By team:", "按团队：")), question
    assert "By team:" in reply("GPU cost by team this week", "cost")
    assert reply("what is team prod spending?", "cost").startswith("**prod**'s GPU cost")  # "spending" is no "pending"
    for question in ("who is wasting A100-80GB?", "which long-running jobs are idle?", "who keeps wasting GPUs?",
                     "who was idle last night?", "晚上谁在浪费"):
        assert "I know no job" not in reply(question, "waste"), question
    assert reply("will ml-team/jupyter-carol be stopped tomorrow?", "job").startswith(f"**{JOB}**")
    assert reply("what did you do last night?", "today").startswith("In the last 24 hours")  # "night": no nightly-eval


def test_a_protected_jobs_reason_reads_in_chinese():
    from agent.api.answerer import protection_reason_zh

    assert protection_reason_zh("namespace 'prod' is in protection.namespaces") == "命名空间 'prod' 在保护列表 protection.namespaces 中"
    assert protection_reason_zh("job ml/x is listed in protection.jobs") == "作业 ml/x 在保护列表 protection.jobs 中"
    assert protection_reason_zh("exempted by carol until 18:00 UTC (demo)") == "由 carol 保留至 18:00 UTC（demo）"


def test_before_any_sweep_the_chat_says_none_has_run_not_that_nobody_wastes(client):
    """A server restarted after the demo ended (no sweep in this process) answered "Nobody is wasting GPUs right
    now: the latest sweep found no waste": no finding is no evidence when nothing was swept."""
    for message, said in (("who is wasting GPUs?", "No sweep has run yet"), ("谁在浪费 GPU？", "尚未运行过巡检")):
        answer = ask(client, message, CAROL)[1][-1]["answer"]
        assert answer.startswith(said) and "Nobody" not in answer and "没有人" not in answer
    sweep_to(client, 95)
    assert JOB in ask(client, "who is wasting GPUs?", CAROL)[1][-1]["answer"]


def test_a_partition_named_like_the_question_is_a_team_only_where_the_question_says_so():
    """"谁在浪费 GPU？" on a cluster with a Slurm partition `gpu` was answered "nobody in team gpu is wasting GPUs",
    hiding the idle jobs of every other team (and of `gpu` itself, billed to its account)."""
    from types import SimpleNamespace

    from agent.api.answerer import _team_named
    from core.cluster import JobInfo

    jobs = [JobInfo(id="gpu/bash", scheduler="slurm", namespace="gpu", name="bash", user="u", project="nlp-lab"),
            JobInfo(id="a100/train", scheduler="slurm", namespace="a100", name="train", user="u", project="cv"),
            JobInfo(id="ml-team/nb", scheduler="kubernetes", namespace="ml-team", name="nb", user="v")]
    ctx = SimpleNamespace(observation=SimpleNamespace(jobs=jobs), findings=[])
    jobs.append(JobInfo(id="p100/old", scheduler="slurm", namespace="p100", name="old", user="u"))
    for question in ("谁在浪费 GPU？", "who is wasting GPU?", "who is wasting a100 right now?", "idle gpu jobs?",
                     "what's the cost of GPU hours?", "idle P100 jobs?"):
        assert _team_named(ctx, question) == (None, None), question  # type: ignore[arg-type]
    for question in ("what did team gpu spend?", "who is wasting GPUs in gpu?", "gpu 团队本周花了多少？",
                     "idle jobs of the gpu partition"):
        assert _team_named(ctx, question) == ("gpu", None), question  # type: ignore[arg-type]
    assert _team_named(ctx, "who is wasting GPUs in nlp-lab?") == ("nlp-lab", None)  # type: ignore[arg-type]
    assert _team_named(ctx, "ml-team 谁在浪费 GPU") == ("ml-team", None)  # type: ignore[arg-type]


def test_a_protection_that_runs_out_says_what_follows_it():
    """A job kept by a keep-until annotation read "Next: nothing; being protected, it is neither warned of a stop nor
    stopped": after the time passes it may be, after a new warning (a review)."""
    from datetime import UTC, datetime, timedelta

    from agent.api.answerer import ChatContext, job_status
    from agent.config.policy import Policy
    from agent.records.audit import AuditLog
    from core.cluster import JobInfo
    from core.observation import Observation

    now = datetime(2026, 11, 2, 22, 0, tzinfo=UTC)
    until = (now + timedelta(hours=3)).isoformat()
    job = JobInfo(id=JOB, uid="u1", scheduler="kubernetes", namespace="ml-team", name="jupyter-carol", user="carol",
                  gpus=1, annotations={"steward.io/keep-until": until})
    ctx = ChatContext(findings=[], observation=Observation(at=now, slice_s=300, lookback_s=3600, jobs=[job]), tools={},
                      audit=AuditLog(), pending=[], now=now, currency="CNY", policy=Policy())
    en = job_status(ctx, JOB, "en")
    assert "Next: nothing while it is protected (until" in en and "after a new warning and its full notice" in en, en
    assert "此后若要停止，也须先重新警告并给足通知期" in job_status(ctx, JOB, "zh")
