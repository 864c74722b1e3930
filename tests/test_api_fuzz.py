"""The API fuzzed from its own OpenAPI schema with schemathesis (issue 13): no operation answers 5xx, and with
access control on, nothing but health, metrics and the self-authenticating webhooks answers without credentials.

The app is the real one (`create_app` on the simulated demo cluster, the ChatOps webhooks and approve links
mounted), called in-process through schemathesis' ASGI transport. Examples per operation are capped so the
whole file stays around a minute.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from agent.api.guard import PUBLIC_PATHS, SELF_AUTHENTICATING
from agent.config.settings import ApiToken, Settings
from server import chatops_wiring, create_app
from tests.conftest import in_ci
from tests.test_server_api import START

try:
    import schemathesis
except ImportError:  # pragma: no cover - .ci/run installs it with the test extra
    if in_ci():
        raise
    pytest.skip("schemathesis is not installed (pip install -e '.[test]')", allow_module_level=True)
from schemathesis import GenerationMode  # noqa: E402

APPROVER_TOKEN = secrets.token_urlsafe(16)
FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
                database=None)


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("fuzz")
    config = Settings(data_dir=data_dir, leader_lock="none", api_tokens={APPROVER_TOKEN: ApiToken(name="fuzz",
                                                                                                   role="approver")},
                      dingtalk_app_secret=SecretStr(secrets.token_urlsafe(24)),
                      wecom_token=SecretStr("fuzz-token"), wecom_aes_key=SecretStr("a" * 43), wecom_corp_id="wwfuzz",
                      chatops_link_secret=SecretStr(secrets.token_urlsafe(24)),
                      chatops_public_url="http://testserver",
                      alert_webhook_token=SecretStr(secrets.token_urlsafe(24)))  # /api/alerts: 401 without it
    routers, listeners = chatops_wiring(config)
    app = create_app(config, speed=0, start_s=START, run_scheduler=False, extra_routers=routers, listeners=listeners)
    return schemathesis.openapi.from_asgi("/openapi.json", app)


def _public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(SELF_AUTHENTICATING)


def _described(case, response) -> str:
    return f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}"


def fuzz_each_operation(api_schema, check: Callable[[Any], None], *modes: GenerationMode) -> list[str]:
    """Runs `check` on generated cases of every operation (hypothesis shrinks a failure); the operations run."""
    ran = []
    for result in api_schema.get_all_operations():
        operation = result.ok()
        strategy = st.one_of(*(operation.as_strategy(generation_mode=mode) for mode in modes))

        @FUZZ
        @given(case=strategy)
        def run(case) -> None:
            check(case)

        run()
        ran.append(f"{operation.method.upper()} {operation.path}")
    return ran


def test_no_operation_answers_5xx(api_schema):
    def check(case) -> None:
        response = case.call(headers={"Authorization": f"Bearer {APPROVER_TOKEN}"})
        assert response.status_code < 500, _described(case, response)

    ran = fuzz_each_operation(api_schema, check, GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    assert "POST /api/chat" in ran and "POST /webhooks/wecom" in ran


def test_only_health_metrics_and_webhooks_answer_without_credentials(api_schema):
    def check(case) -> None:
        response = case.call()
        if _public(case.path):
            assert response.status_code < 500, _described(case, response)
        else:
            assert response.status_code == 401, _described(case, response)

    fuzz_each_operation(api_schema, check, GenerationMode.POSITIVE)


def test_the_schema_covers_the_guarded_and_the_public_operations(api_schema):
    paths = set(api_schema.raw_schema["paths"])
    assert {"/api/chat", "/api/sweeps", "/api/exemptions", "/api/approvals/{approval_id}", "/healthz", "/metrics",
            "/webhooks/dingtalk", "/webhooks/wecom", "/chatops/approve"} <= paths
    assert [p for p in paths if not _public(p)] and [p for p in paths if _public(p)]
