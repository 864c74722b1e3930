"""JSON nested deeply enough to break the 422 handler, though not the reader: a 500, not a 422 naming the field."""
from __future__ import annotations

from fastapi.testclient import TestClient

from server import create_app
from tests.test_server_api import START, settings_for


def test_a_field_holding_600_nested_arrays_is_a_422_not_a_500(tmp_path):
    app = create_app(settings_for(tmp_path), speed=0, start_s=START, run_scheduler=False)
    with TestClient(app, base_url="http://localhost", client=("127.0.0.1", 50000),
                    raise_server_exceptions=False) as client:
        # Read fine by json.loads (under the ~1000-level limit the 'nested too deeply' 422 names); the validation
        # error then echoes the input, and server._finite walks it recursively (two frames a level): RecursionError.
        for depth in (600, 800):
            body = '{"job": ' + "[" * depth + "]" * depth + ', "duration": "4h"}'
            resp = client.post("/api/exemptions", content=body, headers={"Content-Type": "application/json"})
            assert resp.status_code == 422, f"depth {depth}: {resp.status_code} {resp.text[:100]}"
