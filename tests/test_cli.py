"""The `steward` command line: the demo sweep, eval's JSON document, and errors that name file and key."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agent.cli.main import main

SCENARIOS = Path(__file__).resolve().parent.parent / "evals" / "scenarios"


@pytest.fixture(autouse=True)
def _data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("STEWARD_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("STEWARD_RUNBOOKS_ENABLED", "false")  # tests/test_runbooks.py covers retrieval


def test_demo_sweep_reports_findings_actions_and_the_audit_log(capsys, tmp_path):
    assert main(["sweep"]) == 0
    out = capsys.readouterr().out
    assert "What the agent did along the way" in out
    assert "force_terminate  cv-team/augment-worker" in out and "approved by oncall-lead: executed" in out
    assert "Waiting for a human" in out and "resize_pool a100-ondemand" in out
    assert "Reclaimed so far" in out and "Audit log:" in out
    assert not [line for line in out.splitlines() if "prod/llm-serving" in line and "terminate" in line]
    # The timeline says why (the finding kind) and the counts read as English: "1 forced stop", "72 sweeps".
    assert re.search(r"notify +cv-team/detector-train +zombie +level 1 +executed", out)
    assert re.search(r"terminate +ml-team/jupyter-carol +idle +level 2 +executed", out)
    assert "1 forced stop," in out and "forced stops" not in out and "(72 sweeps;" in out


def test_sweep_once_json(capsys):
    assert main(["sweep", "--once", "--at", "3h", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["state"]["observed"]["jobs"] > 0 and doc["state"]["findings"]


def test_eval_json_has_the_documented_shape(capsys):
    assert main(["eval", str(SCENARIOS / "idle-notebook.yaml"), str(SCENARIOS / "longtail-periodic.yaml"),
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    names = [s["name"] for s in doc["scenarios"]]
    assert names == ["idle-notebook", "longtail-periodic"]
    idle = doc["scenarios"][0]
    assert {"job", "kind", "first_at_s", "evidence"} <= set(idle["findings"][0])
    assert {"job", "action", "level", "at_s", "status", "reason"} <= set(idle["actions"][0])
    assert {"detected", "missed", "false_positives", "false_kills", "reclaimed_gpu_hours"} <= set(idle["score"])
    assert idle["score"]["detected"] == 1 and idle["score"]["false_kills"] == 0


def test_policy_check_names_file_and_key(tmp_path, capsys):
    bad = tmp_path / "policy.yaml"
    bad.write_text("version: 1\nlevels: {max_auto: 7}\nwarning: {min_notice: soon}\n")
    assert main(["policy", "check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: levels.max_auto" in err and f"{bad}: warning.min_notice" in err and "'soon'" in err
    # In Chinese: said in Chinese, the validator's own words kept (they name the keys as the file has them).
    assert main(["policy", "check", str(bad), "--lang", "zh"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("错误：策略文件无效") and f"{bad}: levels.max_auto" in err
    good = tmp_path / "good.yaml"
    good.write_text("version: 1\nnotifications: {outside_hours: defer}\n")
    assert main(["policy", "check", str(good), "--lang", "zh"]) == 0
    out = capsys.readouterr().out
    assert "校验通过" in out and "内置保护全部保留" in out and "注意：给所有者的警告" in out


def test_bad_scenario_names_file_and_key(tmp_path, capsys):
    bad = tmp_path / "s.yaml"
    bad.write_text("version: 1\nname: x\nduration: 1h\njobs: [{id: a/b, gpus: -1}, {id: nope}]\n")
    assert main(["sweep", "--scenario", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: jobs[0].gpus" in err and f"{bad}: jobs[1].id" in err


def test_unreadable_and_non_yaml_files_are_named(tmp_path, capsys):
    assert main(["policy", "check", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml: cannot read" in capsys.readouterr().err
    broken = tmp_path / "broken.yaml"
    broken.write_text("levels: [unclosed\n")
    assert main(["policy", "check", str(broken)]) == 2
    assert "broken.yaml: not valid YAML" in capsys.readouterr().err
    # Saved as GBK by a Chinese Windows editor: named, with where, never a traceback (a policy and a scenario alike).
    gbk = tmp_path / "gbk.yaml"
    gbk.write_bytes("protection:\n  namespaces: [中文]\n".encode("gbk"))
    assert main(["policy", "check", str(gbk)]) == 2
    assert "gbk.yaml: not UTF-8 at byte 27 (line 2)" in capsys.readouterr().err
    assert main(["sweep", "--scenario", str(gbk)]) == 2
    assert "gbk.yaml: not UTF-8" in capsys.readouterr().err
    # Nested thousands deep: the parser's recursion is named, not a RecursionError traceback.
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    assert main(["policy", "check", str(deep)]) == 2
    assert "deep.yaml: nested too deeply to read" in capsys.readouterr().err


def test_a_bad_environment_variable_is_named_as_it_is_set(monkeypatch, capsys):
    monkeypatch.setenv("STEWARD_DISPLAY_TZ", "Beijing")
    assert main(["sweep"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: STEWARD_DISPLAY_TZ: ") and "Asia/Shanghai" in err and "pydantic" not in err
    monkeypatch.delenv("STEWARD_DISPLAY_TZ")
    monkeypatch.setenv("STEWARD_API_TOKENS", "notjson")
    assert main(["sweep"]) == 2
    assert "STEWARD_API_TOKENS: not valid JSON" in capsys.readouterr().err
