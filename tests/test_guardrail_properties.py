"""Property tests: the guardrail's safety invariants hold for any action, facts, policy and history."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from agent.config.policy import PROTECTED_ANNOTATIONS, Policy
from agent.guardrail.decide import Facts, decide
from core.actions import (
    ACTION_LEVELS,
    STOP_ACTIONS,
    STOPPABLE_KINDS,
    Exemption,
    Finding,
    History,
    HistoryEntry,
    ProposedAction,
)
from core.cluster import JobInfo, PoolInfo

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
JOBS = ["ml/train-1", "ml/train-2", "gpu/sweep-7"]
NODES = ["gpu-node-3"]
POOLS = ["a100-od"]
NAMESPACES = ["ml", "research", "gpu", "kube-system"]
USERS = ["alice", "bob", "carol"]
PROJECTS = ["vision", "nlp"]
ANNOTATIONS = [*PROTECTED_ANNOTATIONS, "team"]
VALUES = ["true", "True", "TRUE", "false", "False", "yes"]

PROPERTY = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

minutes = st.integers(min_value=-6 * 60, max_value=30)  # history from 6h ago to slightly in the future


def at(offset: int) -> datetime:
    return NOW + timedelta(minutes=offset)


jobs = st.builds(
    JobInfo,
    id=st.sampled_from(JOBS),
    scheduler=st.sampled_from(["kubernetes", "slurm"]),
    namespace=st.sampled_from(NAMESPACES),
    name=st.just("job"),
    user=st.sampled_from(USERS),
    project=st.none() | st.sampled_from(PROJECTS),
    gpus=st.integers(0, 32),
    state=st.sampled_from(["pending", "running", "stopping", "completed", "failed", "cancelled"]),
    priority=st.sampled_from(["low", "normal", "high"]),
    labels=st.dictionaries(st.sampled_from(["steward.io/protected", "team"]), st.sampled_from(VALUES), max_size=2),
    annotations=st.dictionaries(st.sampled_from(ANNOTATIONS), st.sampled_from(VALUES), max_size=3),
    qos=st.none() | st.sampled_from(["normal", "urgent"]),
)

pools = st.builds(
    PoolInfo,
    name=st.sampled_from(POOLS),
    gpus_per_node=st.sampled_from([1, 4, 8]),
    nodes=st.integers(0, 12),
    min_nodes=st.integers(0, 3),
    max_nodes=st.none() | st.integers(0, 12),
    busy_nodes=st.integers(0, 12),
    used_gpus=st.none() | st.integers(0, 16),
)

findings = st.builds(
    Finding,
    kind=st.sampled_from(["idle", "zombie", "overprovisioned", "node_health", "oversized"]),
    target=st.sampled_from(JOBS + NODES + POOLS),
    target_type=st.sampled_from(["job", "node", "pool"]),
    since=st.just(at(-120)),
    detected_at=st.just(NOW),
    evidence=st.just("numbers"),
)

finding_kinds = st.none() | st.sampled_from(["idle", "zombie", "overprovisioned", "node_health", "oversized"])
action_kinds = st.sampled_from(list(ACTION_LEVELS))
statuses = st.sampled_from(["executed", "executed", "failed", "blocked", "dry_run", "pending_approval"])

entries = st.builds(
    HistoryEntry,
    action=action_kinds,
    target=st.sampled_from(JOBS),
    status=statuses,
    at=minutes.map(at),
    finding_kind=finding_kinds,
    gpus=st.integers(0, 32),
    deadline=st.none() | minutes.map(at),
)

exemptions = st.builds(
    Exemption, target=st.sampled_from(JOBS), until=minutes.map(at), by=st.just("alice"), reason=st.just("demo")
)


def _lists(draw, values, lenient):
    return [] if lenient else draw(st.lists(st.sampled_from(values), max_size=1))


@st.composite
def policies(draw) -> Policy:
    lenient = draw(st.integers(0, 3)) > 0  # lenient policies let actions through, so the properties are not vacuous
    hard_max = draw(st.sampled_from([2, 3, 4, 4, 4]) if lenient else st.integers(0, 4))
    scope = st.one_of(
        st.fixed_dictionaries({"namespace": st.sampled_from(NAMESPACES)}),
        st.fixed_dictionaries({"project": st.sampled_from(PROJECTS)}),
    )
    overrides = draw(
        st.lists(
            scope.flatmap(
                lambda where: st.fixed_dictionaries(
                    {**{k: st.just(v) for k, v in where.items()}, "max_auto": st.none() | st.integers(0, 4)},
                    optional={"max": st.integers(0, 4)},
                )
            ),
            max_size=0 if lenient else 2,
        )
    )
    data = {
        "mode": draw(st.sampled_from(["enforce", "dry_run"] if lenient else ["enforce", "dry_run", "observe"])),
        "protection": {
            "namespaces": _lists(draw, NAMESPACES, lenient),
            "users": _lists(draw, USERS, lenient),
            "projects": _lists(draw, PROJECTS, lenient),
            "partitions": _lists(draw, NAMESPACES, lenient),
            "accounts": _lists(draw, PROJECTS, lenient),
            "qos": _lists(draw, ["urgent"], lenient),
            "priorities": _lists(draw, ["low", "normal", "high"], lenient),
            "jobs": _lists(draw, JOBS, lenient),
        },
        "levels": {
            "max": hard_max,
            "max_auto": draw(st.integers(2 if lenient else 0, hard_max)),
            "require_approval": draw(st.lists(st.integers(1, 4), max_size=2, unique=True)),
            "overrides": overrides,
        },
        "warning": {"min_notice": draw(st.sampled_from([0, 600, 1800, 7200])), "repeat_every": 4 * 3600},
        "stop": {"grace_period": draw(st.sampled_from([0, 300, 3600]))},
        "rate_limits": {
            "stops_per_hour": draw(st.integers(1 if lenient else 0, 5)),
            "circuit_breaker": {
                "max_failures_per_hour": draw(st.integers(1, 4)),
                "max_reclaimed_gpus_per_hour": draw(st.integers(1, 96)),
            },
        },
        "reserve": {"fraction": draw(st.sampled_from([0.0, 0.1, 0.25]))},
    }
    return Policy.model_validate(data)


TARGETS = {"notify": JOBS + NODES, "terminate": JOBS, "force_terminate": JOBS, "resize_pool": POOLS, "cordon": NODES}


@st.composite
def scenarios(draw):
    """(action, facts, policy, history) with random noise; most have target, facts and history aligned."""
    kind = draw(action_kinds)
    aligned = draw(st.integers(0, 3)) > 0
    target = draw(st.sampled_from(TARGETS[kind] if aligned else JOBS + NODES + POOLS))
    action = ProposedAction(
        action=kind,
        target=target,
        finding_kind=draw(finding_kinds),
        target_nodes=draw(st.none() | st.integers(-1, 13)),
    )
    job = draw(st.none() | jobs)
    pool = draw(st.none() | pools)
    current = draw(st.lists(findings, max_size=2))
    past = draw(st.lists(entries, max_size=5))
    if aligned:
        target_type = "pool" if target in POOLS else "node" if target in NODES else "job"
        if target_type == "job":
            job = draw(jobs).model_copy(update={"id": target, "state": draw(st.sampled_from(["running", "stopping"]))})
            if draw(st.integers(0, 3)) > 0:
                job = job.model_copy(update={"labels": {}, "annotations": {}})
        if target_type == "node":
            job = None
        if target_type == "pool":
            pool = draw(pools).model_copy(update={"name": target})
            busy = min(pool.busy_nodes, pool.nodes)
            pool = pool.model_copy(update={"busy_nodes": busy, "min_nodes": min(pool.min_nodes, busy)})
            shrink_to = draw(st.integers(busy, max(busy, pool.nodes - 1)))
            action = action.model_copy(update={"target_nodes": shrink_to})
        finding_kind = {"job": draw(st.sampled_from(["idle", "zombie"])), "node": "node_health", "pool": "oversized"}
        if draw(st.integers(0, 3)) > 0:
            action = action.model_copy(update={"finding_kind": draw(st.none() | st.just(finding_kind[target_type]))})
        stretch = draw(st.sampled_from([-360, -120]))  # a stretch of waste that began 6 h or 2 h ago
        current.append(
            Finding(
                kind=finding_kind[target_type],
                target=target,
                target_type=target_type,
                since=at(stretch),
                detected_at=NOW,
                evidence="numbers",
            )
        )
        # A warning about this stretch of waste, or (when it began 2 h ago) sometimes about an earlier one.
        when = at(draw(st.integers(max(stretch, -300), 0)))
        past.append(HistoryEntry(action="notify", target=target, status="executed", at=when,
                                 finding_kind=finding_kind[target_type], deadline=when))
        # Forced stops need an earlier graceful one: give that path enough cases to be explored. A graceful stop on
        # record makes the job stopping (signalled_state), so a second one is refused: a terminate gets none here.
        if kind != "terminate" and draw(st.integers(0, 3)) > (0 if kind == "force_terminate" else 1):
            past.append(HistoryEntry(action="terminate", target=target, status="executed", at=when))
    history = History(
        entries=past,
        exemptions=draw(st.lists(exemptions, max_size=1)),
        pending_approvals=[action.key()] if draw(st.integers(0, 9)) == 0 else [],
    )
    now = NOW if draw(st.booleans()) else NOW.replace(tzinfo=None)  # naive clocks are read as UTC
    facts = Facts(now=now, job=job, pool=pool, findings=current, cluster_gpus=draw(st.integers(0, 1024)))
    return action, facts, draw(policies()), history


def protected(job: JobInfo, policy: Policy, history: History) -> bool:
    """An independent reading of the protection rules."""
    rules = policy.protection
    return (
        job.id in rules.jobs
        or job.namespace in rules.namespaces + rules.partitions
        or job.user in rules.users
        or (job.project is not None and job.project in rules.projects + rules.accounts)
        or (job.qos is not None and job.qos in rules.qos)
        or job.priority in rules.priorities
        or any(job.labels.get(k, "").lower() == v.lower() for k, v in rules.labels.items() if k in job.labels)
        or any(
            job.annotations.get(k, "").lower() == v.lower()
            for k, v in rules.annotations.items()
            if k in job.annotations
        )
        or any(e.target == job.id and e.until > NOW for e in history.exemptions)
    )


def both(action, facts, policy, history):
    return decide(action, facts, policy, history), decide(action, facts, policy, history, approved=True)


PROTECT_WAYS = [
    "namespace",
    "user",
    "project",
    "label",
    "karpenter",
    "safe-to-evict",
    "exemption",
    "job",
    "partition",
    "qos",
]


@PROPERTY
@given(scenarios(), st.sampled_from(PROTECT_WAYS))
def test_a_protected_target_is_never_touched(scenario, way):
    action, facts, policy, history = scenario
    job = facts.job or JobInfo(id=action.target, scheduler="kubernetes", namespace="ml", name="j", user="alice")
    job = job.model_copy(update={"id": action.target, "project": job.project or "vision", "qos": "urgent"})
    rules = policy.protection.model_copy(deep=True)
    if way == "namespace":
        rules.namespaces.append(job.namespace)
    elif way == "user":
        rules.users.append(job.user)
    elif way == "project":
        rules.projects.append(job.project)
    elif way == "label":
        job = job.model_copy(update={"labels": {**job.labels, "steward.io/protected": "True"}})
    elif way == "karpenter":
        job = job.model_copy(update={"annotations": {**job.annotations, "karpenter.sh/do-not-disrupt": "true"}})
    elif way == "safe-to-evict":
        annotations = {**job.annotations, "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
        job = job.model_copy(update={"annotations": annotations})
    elif way == "exemption":
        until = NOW + timedelta(minutes=1)
        history = history.model_copy(update={"exemptions": [Exemption(target=job.id, until=until, by="bob")]})
    elif way == "job":
        rules.jobs.append(job.id)
    elif way == "partition":
        rules.partitions.append(job.namespace)
    elif way == "qos":
        rules.qos.append("urgent")
    policy = policy.model_copy(update={"protection": rules})
    if action.action in ("resize_pool", "cordon"):  # about a pool or a node: job protection is not theirs
        action = action.model_copy(update={"action": "terminate"})
    facts = facts.model_copy(update={"job": job})
    assert protected(job, policy, history)
    for d in both(action, facts, policy, history):
        assert d.verdict == "deny", d


@PROPERTY
@given(scenarios())
def test_protected_jobs_are_never_allowed(scenario):
    action, facts, policy, history = scenario
    if facts.job is not None and action.action not in ("resize_pool", "cordon") and protected(facts.job, policy, history):
        for d in both(action, facts, policy, history):
            assert d.verdict == "deny", d


def _warned_in_time(action, facts, policy, history) -> bool:
    """A delivered warning to this very job (same uid), about this kind of waste, stating a deadline, in time."""
    notice = timedelta(seconds=policy.warning.min_notice)
    uid = (facts.job.uid or None) if facts.job is not None else action.target_uid
    return any(
        e.action == "notify" and e.status == "executed" and e.target == action.target and e.at + notice <= NOW
        and e.deadline is not None and (action.finding_kind is None or e.finding_kind == action.finding_kind)
        and (uid is None or e.target_uid == uid)
        for e in history.entries
    )


@PROPERTY
@given(scenarios())
def test_no_stop_without_an_earlier_warning(scenario):
    action, facts, policy, history = scenario
    if action.action in STOP_ACTIONS:
        for d in both(action, facts, policy, history):
            if d.verdict == "allow":
                assert _warned_in_time(action, facts, policy, history)


@PROPERTY
@given(scenarios(), st.sampled_from(sorted(STOP_ACTIONS)),
       st.sampled_from(["drop", "late", "failed", "elsewhere", "advice", "other_kind", "namesake"]))
def test_a_stop_without_a_timely_warning_is_never_allowed(scenario, stop, way):
    action, facts, policy, history = scenario
    action = action.model_copy(update={"action": stop})
    if way == "namesake" and facts.job is not None:  # the job now under this name is a new one
        facts = facts.model_copy(update={"job": facts.job.model_copy(update={"uid": "uid-new"})})
    notice = timedelta(seconds=policy.warning.min_notice)
    if way == "other_kind":  # the stop is for a kind no warning to this target was about (else: drop them)
        warned_kinds = {e.finding_kind for e in history.entries if e.action == "notify" and e.target == action.target}
        other_kind = next((k for k in ("idle", "zombie") if k not in warned_kinds), None)
        if other_kind is not None:
            action = action.model_copy(update={"finding_kind": other_kind})
    kept: list[HistoryEntry] = []
    for e in history.entries:
        if e.action == "notify" and e.status == "executed" and e.target == action.target and e.at + notice <= NOW:
            if way == "late":  # sent, but the notice period has not passed (or it is not sent yet)
                kept.append(e.model_copy(update={"at": NOW - notice + timedelta(minutes=1)}))
            elif way == "failed":
                kept.append(e.model_copy(update={"status": "failed"}))
            elif way == "elsewhere":
                kept.append(e.model_copy(update={"target": "ml/someone-else"}))
            elif way == "advice":  # a message that announced no stop (e.g. "request fewer GPUs next time")
                kept.append(e.model_copy(update={"deadline": None}))
            elif way == "other_kind" and other_kind is not None:  # warned about another kind of waste only
                kept.append(e)
            elif way == "namesake" and facts.job is not None:  # warned the earlier job of the same name
                kept.append(e.model_copy(update={"target_uid": "uid-old"}))
            continue
        kept.append(e)
    history = history.model_copy(update={"entries": kept})
    assert not _warned_in_time(action, facts, policy, history)
    for d in both(action, facts, policy, history):
        # A dry run escalates on its own dry-run steps, but its allows act on nothing.
        assert d.verdict != "allow" or d.dry_run, d


@PROPERTY
@given(scenarios(), st.sampled_from(sorted(STOP_ACTIONS)), st.sampled_from(["drop", "kind", "node", "elsewhere"]))
def test_a_stop_without_a_stoppable_finding_is_never_allowed(scenario, stop, way):
    action, facts, policy, history = scenario
    action = action.model_copy(update={"action": stop})
    kept: list[Finding] = []
    for f in facts.findings:
        if f.target == action.target and f.kind in STOPPABLE_KINDS:
            if way == "kind":
                kept.append(f.model_copy(update={"kind": "overprovisioned"}))
            elif way == "node":  # a node of the same name is not the job
                kept.append(f.model_copy(update={"target_type": "node", "kind": "node_health"}))
            elif way == "elsewhere":
                kept.append(f.model_copy(update={"target": "ml/someone-else"}))
            continue
        kept.append(f)
    facts = facts.model_copy(update={"findings": kept})
    for d in both(action, facts, policy, history):
        assert d.verdict != "allow", d


@PROPERTY
@given(scenarios())
def test_no_force_before_a_graceful_stop_and_its_grace_period(scenario):
    action, facts, policy, history = scenario
    action = action.model_copy(update={"action": "force_terminate"})
    grace = timedelta(seconds=policy.stop.grace_period)
    graceful = any(
        e.action == "terminate" and e.status == "executed" and e.target == action.target and e.at + grace <= NOW
        for e in history.entries
    )
    for d in both(action, facts, policy, history):
        if d.verdict == "allow" and not d.dry_run:
            assert graceful


@PROPERTY
@given(scenarios())
def test_a_dry_run_never_allows_a_real_action(scenario):
    action, facts, policy, history = scenario
    policy = policy.model_copy(update={"mode": "dry_run"})
    for d in both(action, facts, policy, history):
        assert d.verdict != "allow" or d.dry_run, d


@PROPERTY
@given(scenarios())
def test_no_level_above_the_scope_ceiling(scenario):
    action, facts, policy, history = scenario
    scope = (facts.job.namespace, facts.job.project) if facts.job and action.action != "resize_pool" else (None, None)
    _, hard_max = policy.levels_for(*scope)
    for d in both(action, facts, policy, history):
        assert d.level == ACTION_LEVELS[action.action]
        if d.verdict != "deny":
            assert d.level <= hard_max


@PROPERTY
@given(scenarios())
def test_no_stop_without_a_current_stoppable_finding(scenario):
    action, facts, policy, history = scenario
    if action.action in STOP_ACTIONS:
        flagged = any(f.target == action.target and f.kind in STOPPABLE_KINDS for f in facts.findings)
        for d in both(action, facts, policy, history):
            if d.verdict != "deny":
                assert flagged and facts.job is not None and facts.job.id == action.target


@PROPERTY
@given(scenarios())
def test_observe_mode_never_allows(scenario):
    action, facts, _, history = scenario
    policy = Policy(mode="observe")
    for d in both(action, facts, policy, history):
        assert d.verdict == "deny" and d.rule == "mode"


@PROPERTY
@given(scenarios())
def test_approval_never_turns_a_deny_into_allow(scenario):
    plain, approved = both(*scenario)
    if plain.verdict == "deny":
        assert approved == plain
    if plain.verdict == "allow" and plain.rule == "approval":
        # A dry run records what would wait for a human without asking one: approved, it is the same dry run.
        assert plain.dry_run and approved.verdict == "allow" and approved.dry_run
    elif plain.verdict == "allow":
        assert approved == plain
    assert approved.verdict != "needs_approval"


@PROPERTY
@given(scenarios(), st.booleans())
def test_decide_is_deterministic_and_pure(scenario, approved):
    before = copy.deepcopy([part.model_dump() for part in scenario])
    first = decide(*scenario, approved=approved)
    second = decide(*scenario, approved=approved)
    assert first == second
    assert [part.model_dump() for part in scenario] == before
    assert first.rule != "internal_error", first.reason
    assert first.reason


def test_the_scenarios_reach_every_verdict():
    """Guard against vacuous properties: random scenarios do produce allowed stops, approvals and resizes."""
    seen: set[tuple[str, str]] = set()
    wanted = {
        ("notify", "allow"),
        ("terminate", "allow"),
        ("terminate", "needs_approval"),
        ("force_terminate", "approved allow"),
        ("resize_pool", "approved allow"),
    }

    # A few fixed seeds, stopping once every verdict is seen: Hypothesis biases generation with constants it harvests
    # from the loaded modules, so one derandomized run's coverage moved with any change to the code under test (and
    # with which tests ran before it in the process).
    for k in range(6):
        @seed(k)
        @settings(max_examples=1500, deadline=None, database=None, phases=[Phase.generate])
        @given(scenarios())
        def record(scenario):
            seen.add((scenario[0].action, decide(*scenario).verdict))
            seen.add((scenario[0].action, "approved " + decide(*scenario, approved=True).verdict))

        record()
        if wanted <= seen:
            break
    assert wanted <= seen
