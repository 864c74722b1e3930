"""The local model's pieces that need no model: OpenAI messages for a chat template, tool calls parsed from the
model's text, what may stream before a reply is complete, and the model file assembled from its parts."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json

import pytest

from agent.llm.chat_format import (
    RequestError,
    StreamedText,
    parse_reply,
    template_messages,
    tool_choice_prefill,
)
from agent.llm.model_files import MODELS, LocalModel, ModelFileError, assemble, model_for, part_files
from tests.conftest import in_ci

TOOLS = {"list_jobs", "query_gpu_metrics"}
TOOL_SPECS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in sorted(TOOLS)]


def _args(call):
    return json.loads(call["function"]["arguments"])


def test_tagged_tool_calls_become_openai_tool_calls_with_ids_and_string_arguments():
    text = ('I will look.\n<tool_call>\n{"name": "list_jobs", "arguments": {"state": "idle"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "query_gpu_metrics", "arguments": {"job": "团队/笔记本"}}\n</tool_call>')
    parsed = parse_reply(text, TOOLS)
    assert parsed.content == "I will look."
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["list_jobs", "query_gpu_metrics"]
    assert all(c["type"] == "function" and c["id"].startswith("call_") for c in parsed.tool_calls)
    assert len({c["id"] for c in parsed.tool_calls}) == 2
    assert isinstance(parsed.tool_calls[1]["function"]["arguments"], str)
    assert _args(parsed.tool_calls[1]) == {"job": "团队/笔记本"}
    assert "团队" in parsed.tool_calls[1]["function"]["arguments"]  # not \\u-escaped


def test_a_call_alone_has_null_content_and_odd_but_usable_shapes_are_accepted():
    only = parse_reply('<tool_call>\n{"name": "list_jobs", "arguments": {}}\n</tool_call>', TOOLS)
    assert only.content is None and len(only.tool_calls) == 1
    extra_brace = parse_reply('<tool_call>{"name": "list_jobs", "arguments": {"a": 1}}}</tool_call>', TOOLS)
    assert _args(extra_brace.tool_calls[0]) == {"a": 1}
    as_string = parse_reply('<tool_call>{"name": "list_jobs", "arguments": "{\\"a\\": 2}"}</tool_call>', TOOLS)
    assert _args(as_string.tool_calls[0]) == {"a": 2}
    parameters = parse_reply('<tool_call>{"name": "list_jobs", "parameters": {"a": 3}}</tool_call>', TOOLS)
    assert _args(parameters.tool_calls[0]) == {"a": 3}
    unterminated = parse_reply('<tool_call>\n{"name": "list_jobs", "arguments": {"a": 4}}', TOOLS)
    assert _args(unterminated.tool_calls[0]) == {"a": 4}


def test_fenced_or_bare_json_counts_only_when_it_names_an_offered_tool():
    fenced = parse_reply('Checking:\n```json\n{"name": "list_jobs", "arguments": {"state": "idle"}}\n```', TOOLS)
    assert [c["function"]["name"] for c in fenced.tool_calls] == ["list_jobs"] and fenced.content == "Checking:"
    code = '```json\n{"name": "resnet", "arguments": {"lr": 0.1}}\n```'
    assert parse_reply(code, TOOLS).tool_calls == [] and parse_reply(code, TOOLS).content == code
    bare = parse_reply('{"name": "query_gpu_metrics", "arguments": {"job": "a/b"}}', TOOLS)
    assert _args(bare.tool_calls[0]) == {"job": "a/b"} and bare.content is None
    assert parse_reply('{"answer": 42}', TOOLS).tool_calls == []
    no_tools = parse_reply('<tool_call>{"name": "list_jobs", "arguments": {}}</tool_call>', set())
    assert no_tools.tool_calls == [] and "<tool_call>" in (no_tools.content or "")


def test_a_tagged_block_that_is_not_json_stays_in_the_content():
    parsed = parse_reply("<tool_call>list_jobs(state=idle)</tool_call>", TOOLS)
    assert parsed.tool_calls == [] and parsed.content == "<tool_call>list_jobs(state=idle)</tool_call>"
    assert parse_reply("", TOOLS).content == ""
    assert parse_reply("<tool_call>\n", TOOLS).content == ""  # a call begun and cut off: nothing


def test_messages_as_a_chat_template_expects_them():
    out = template_messages([
        {"role": "developer", "content": "rules"},
        {"role": "user", "content": [{"type": "text", "text": "哪些"}, {"type": "text", "text": " GPU?"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "list_jobs", "arguments": "{\"a\": 1}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "[]"},
    ])
    assert [m["role"] for m in out] == ["system", "user", "assistant", "tool"]
    assert out[1]["content"] == "哪些 GPU?" and out[2]["content"] == ""
    assert out[2]["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    assert out[3] == {"role": "tool", "content": "[]", "tool_call_id": "call_1"}


@pytest.mark.parametrize(("messages", "named"), [
    ([], "messages must be a non-empty list"),
    ([{"role": "robot", "content": "x"}], "messages[0].role is 'robot'"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], "messages[0].content[0]"),
    ([{"role": "user", "content": 7}], "messages[0].content must be"),
    ([{"role": "assistant", "content": None, "tool_calls": [{"id": "x"}]}], "messages[0].tool_calls[0]"),
])
def test_bad_messages_are_refused_naming_what_is_wrong(messages, named):
    with pytest.raises(RequestError, match=named.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        template_messages(messages)


def test_tool_choice_as_openai_defines_it():
    assert tool_choice_prefill(None, TOOL_SPECS) == (True, "")  # missing means auto, not none
    assert tool_choice_prefill("auto", []) == (False, "")
    assert tool_choice_prefill("none", TOOL_SPECS) == (False, "")
    shown, prefill = tool_choice_prefill("required", TOOL_SPECS)
    assert shown and prefill.startswith("<tool_call>")
    shown, prefill = tool_choice_prefill({"type": "function", "function": {"name": "list_jobs"}}, TOOL_SPECS)
    assert '"list_jobs"' in prefill and prefill.endswith('"arguments": ')
    parsed = parse_reply(prefill + '{"state": "idle"}}\n</tool_call>', TOOLS)
    assert _args(parsed.tool_calls[0]) == {"state": "idle"}
    with pytest.raises(RequestError, match="not among the tools"):
        tool_choice_prefill({"type": "function", "function": {"name": "rm_rf"}}, TOOL_SPECS)
    with pytest.raises(RequestError, match="tool_choice needs tools"):
        tool_choice_prefill("required", [])


def _stream(pieces, tools=True):
    s, out = StreamedText(tools), []
    for p in pieces:
        out.append(s.feed(p))
    parsed = parse_reply(s.raw, TOOLS if tools else set())
    return "".join(out), s.rest(parsed), parsed


def test_content_streams_until_something_may_start_a_tool_call():
    streamed, rest, parsed = _stream(["Two ", "jobs are", " idle.", " <tool", "_call>\n{\"name\": \"list_jobs\", ",
                                      "\"arguments\": {}}\n</tool_call>"])
    assert streamed == "Two jobs are idle." and rest == "" and len(parsed.tool_calls) == 1
    streamed, rest, parsed = _stream(["Use ", "a < b", " and ``", "x``."])
    assert streamed == parsed.content == "Use a < b and ``x``." and rest == ""  # `` held, then let go
    streamed, rest, parsed = _stream(["Run:\n``", "`sh\nnvidia-smi\n```", "\nthen wait."])
    assert streamed == "Run:" and parsed.tool_calls == []  # held from a fence, which turned out to be code
    assert streamed + rest == parsed.content == "Run:\n```sh\nnvidia-smi\n```\nthen wait."
    streamed, rest, parsed = _stream(["\n", "{\"name\": \"list_jobs\"", ", \"arguments\": {}}"])
    assert streamed == "" and rest == "" and len(parsed.tool_calls) == 1
    streamed, rest, parsed = _stream(["答案：", "两个作业空闲。\n", "\n"], tools=False)
    assert streamed == "答案：两个作业空闲。" and rest == "" and parsed.content == streamed


# -- the model file ----------------------------------------------------------------------------------------------
def _require_parts(model: LocalModel) -> None:
    try:
        part_files(model)
    except ModelFileError as exc:
        if in_ci():
            pytest.fail(str(exc))
        pytest.skip(str(exc))


def test_unknown_model_and_missing_parts_are_named():
    with pytest.raises(ModelFileError, match="unknown local model '7b'; known: 0.5b, 1.5b"):
        model_for("7b")
    missing = LocalModel(key="x", name="x", file_name="x.gguf", packages=("gpu-steward-no-such-part",),
                         version="1.0", size=1, sha256="0" * 64)
    with pytest.raises(ModelFileError, match="model part gpu-steward-no-such-part is not installed"):
        assemble(missing)


def test_assembled_file_is_verified_and_a_wrong_hash_leaves_nothing_behind(tmp_path):
    model = MODELS["0.5b"]
    _require_parts(model)
    last = part_files(model)[-1]  # one real part (45 MB) stands for a whole model
    digest = hashlib.sha256(last.read_bytes()).hexdigest()
    one = LocalModel(key="p6", name="p6", file_name="p6.gguf", packages=model.packages[-1:],
                     version=importlib.metadata.version(model.packages[-1]), size=last.stat().st_size, sha256=digest)
    path = assemble(one, tmp_path)
    assert path == tmp_path / "p6.gguf" and path.stat().st_size == one.size
    wrong = LocalModel(**{**one.__dict__, "file_name": "wrong.gguf", "sha256": "f" * 64})
    with pytest.raises(ModelFileError, match=f"sha256 {digest}, p6 is f"):
        assemble(wrong, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p6.gguf"]
    short = LocalModel(**{**one.__dict__, "file_name": "short.gguf", "size": one.size + 1})
    with pytest.raises(ModelFileError, match="hold 45,755,264 bytes, expected 45,755,265"):
        assemble(short, tmp_path)
    path.write_bytes(b"GGUF tampered")  # a cached file that no longer verifies is rebuilt
    assert assemble(one, tmp_path).stat().st_size == one.size
