"""An exemption the API grants on a pool or a node holds as one on a job does: the pool is not resized, the node not
cordoned, while it is in force (agent/guardrail/target_rules.py protected_rule; the policy model does not propose the
resize). A resize asked for before the exemption and approved after it is refused when re-checked, and audited."""

from __future__ import annotations

from tests.test_server_api import advance, client_for, settings_for

POOL = "a100-ondemand"


def _resized(client) -> list:
    audit = client.app.state.runtime.deps.audit
    return [(e.target, e.status, e.data.get("detail")) for e in audit.entries(kind="execution", limit=500)
            if e.action == "resize_pool" and e.target == POOL and e.status == "executed"]


def test_a_pool_exemption_the_api_grants_keeps_the_steward_from_resizing_that_pool(tmp_path):
    with client_for(settings_for(tmp_path)) as client:
        granted = client.post("/api/exemptions", json={"job": POOL, "duration": "4h",
                                                        "reason": "capacity test tonight, keep all 4 nodes"})
        assert granted.status_code == 201, granted.text
        assert [e["target"] for e in client.get("/api/exemptions").json()["exemptions"]] == [POOL]

        advance(client, 300)  # 17:55: the demo's sweep finds the on-demand pool oversized
        sweep = client.post("/api/sweeps")
        assert sweep.status_code == 200, sweep.text
        for approval_id in sweep.json()["approvals_opened"]:
            client.post(f"/api/approvals/{approval_id}", json={"decision": "approve", "reason": "looks idle"})
        assert _resized(client) == [], (f"{POOL} was exempted until {granted.json()['until']} (201, listed in "
                                        f"/api/exemptions), yet the steward resized it")


def test_a_resize_approved_after_the_pool_was_exempted_is_refused_and_audited(tmp_path):
    with client_for(settings_for(tmp_path)) as client:
        advance(client, 300)
        sweep = client.post("/api/sweeps")
        assert sweep.status_code == 200, sweep.text
        rt = client.app.state.runtime
        asked = [a for a in rt.deps.approvals.pending() if a.action == "resize_pool" and a.target == POOL]
        assert asked, f"the demo asks no resize of {POOL}: {[(a.action, a.target) for a in rt.deps.approvals.pending()]}"
        granted = client.post("/api/exemptions", json={"job": POOL, "duration": "4h", "reason": "capacity test"})
        assert granted.status_code == 201, granted.text
        answer = client.post(f"/api/approvals/{asked[0].id}", json={"decision": "approve", "reason": "looks idle"})
        assert answer.status_code < 500, answer.text
        assert _resized(client) == []
        blocked = [e.reason for e in rt.deps.audit.entries(kind="execution", limit=500)
                   if e.action == "resize_pool" and e.target == POOL and e.status == "blocked"]
        assert blocked and "is protected: exempted by" in blocked[0] and "capacity test" in blocked[0], blocked
