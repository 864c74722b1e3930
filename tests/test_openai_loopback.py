"""The real langchain_openai.ChatOpenAI client against the OpenAI loopback server: what the agent sees over HTTP."""

from __future__ import annotations

import json
import time

import openai
import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field

from tests.openai_loopback import OpenAILoopback, Reply, helpers

ARGS = json.dumps({"node": "gpu-node-7", "force": True})  # 37 characters: 10 argument chunks of 4


class drain_node(BaseModel):  # noqa: N801 -- the class name is the tool name the model sees
    """Drain a Kubernetes node so its GPUs can be reclaimed."""

    node: str = Field(description="node name")
    force: bool = False


def client(srv: OpenAILoopback, **kwargs) -> ChatOpenAI:
    kwargs.setdefault("timeout", 2)
    return ChatOpenAI(base_url=srv.base_url, api_key="x", model="m", max_retries=0, **kwargs)


def accumulate(chunks) -> AIMessageChunk:
    total = None
    for chunk in chunks:
        total = chunk if total is None else total + chunk
    assert total is not None
    return total


def test_plain_text_reply_with_usage_and_finish_reason():
    with OpenAILoopback(helpers.always_text("Two GPUs are idle.")) as srv:
        reply = client(srv).invoke("what is idle?")
    assert isinstance(reply, AIMessage)
    assert reply.content == "Two GPUs are idle."
    assert reply.tool_calls == []
    assert reply.response_metadata["finish_reason"] == "stop"
    assert reply.response_metadata["model_name"] == "m"
    assert reply.usage_metadata and reply.usage_metadata["total_tokens"] > 0
    assert srv.requests == [{"model": "m", "stream": False, "messages": [{"role": "user", "content": "what is idle?"}]}]


def test_models_endpoint_lists_configured_models():
    with OpenAILoopback(helpers.always_text("-"), models=["m", "m-large"]) as srv:
        models = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0).models.list()
    assert [m.id for m in models] == ["m", "m-large"]


def test_bound_tool_call_has_parsed_args_and_server_ids():
    with OpenAILoopback(helpers.tool_calls_then_text([("drain_node", ARGS)], "drained")) as srv:
        reply = client(srv).bind_tools([drain_node]).invoke("drain gpu-node-7")
    assert reply.tool_calls == [{"name": "drain_node", "args": {"node": "gpu-node-7", "force": True},
                                 "id": "call_1", "type": "tool_call"}]
    assert reply.invalid_tool_calls == []
    assert reply.content == ""  # the server sent content: null; the client turns it into ""
    assert reply.response_metadata["finish_reason"] == "tool_calls"


def test_second_turn_sends_tools_prior_assistant_turn_and_tool_result():
    with OpenAILoopback(helpers.tool_calls_then_text([("drain_node", ARGS)], "drained it")) as srv:
        model = client(srv).bind_tools([drain_node])
        first = model.invoke([HumanMessage("drain gpu-node-7")])
        second = model.invoke([HumanMessage("drain gpu-node-7"), first,
                               ToolMessage("node drained", tool_call_id=first.tool_calls[0]["id"])])
    assert second.content == "drained it"
    body = srv.requests[1]
    assert [t["function"]["name"] for t in body["tools"]] == ["drain_node"]
    assert body["tools"][0]["function"]["parameters"]["required"] == ["node"]
    user, assistant, tool = body["messages"]
    assert user == {"role": "user", "content": "drain gpu-node-7"}
    assert assistant["role"] == "assistant" and assistant["content"] in (None, "")
    assert assistant["tool_calls"] == [{"id": "call_1", "type": "function",
                                        "function": {"name": "drain_node", "arguments": ARGS}}]
    assert tool == {"role": "tool", "content": "node drained", "tool_call_id": "call_1"}


def test_many_tool_calls_in_one_reply_get_distinct_ids():
    with OpenAILoopback(helpers.many_tool_calls(3, "drain_node", {"node": "n1"})) as srv:
        reply = client(srv).bind_tools([drain_node]).invoke("drain")
    assert [c["id"] for c in reply.tool_calls] == ["call_1", "call_2", "call_3"]
    assert all(c["args"] == {"node": "n1"} for c in reply.tool_calls)


def test_stream_reassembles_tool_call_arguments_split_across_chunks():
    with OpenAILoopback(helpers.tool_calls_then_text([("drain_node", ARGS)])) as srv:
        chunks = list(client(srv, stream_usage=True).bind_tools([drain_node]).stream("drain gpu-node-7"))
    pieces = [c.tool_call_chunks[0]["args"] for c in chunks if c.tool_call_chunks]
    assert len(pieces) > 5 and "".join(pieces) == ARGS  # really split, by index-keyed deltas
    total = accumulate(chunks)
    assert total.tool_calls == [{"name": "drain_node", "args": {"node": "gpu-node-7", "force": True},
                                 "id": "call_1", "type": "tool_call"}]
    assert total.response_metadata["finish_reason"] == "tool_calls"
    assert total.usage_metadata and total.usage_metadata["total_tokens"] > 0
    assert srv.requests[0]["stream"] is True and srv.requests[0]["stream_options"] == {"include_usage": True}


def test_stream_of_text_with_length_finish_reason():
    with OpenAILoopback(lambda body, index: Reply(text="Reclaiming the idle GPUs", finish_reason="length")) as srv:
        total = accumulate(client(srv).stream("go"))
    assert total.content == "Reclaiming the idle GPUs"
    assert total.response_metadata["finish_reason"] == "length"


def test_truncated_stream_yields_a_silently_repaired_tool_call():
    """A stream that ends cleanly mid-arguments raises nothing: the client parses the truncated JSON leniently,
    so the call arrives with arguments missing (here `force`) and no invalid_tool_calls. The only sign is that
    no finish_reason was ever received -- the agent must check it before acting on a streamed tool call."""
    with OpenAILoopback(lambda body, index: Reply(tool_calls=[("drain_node", ARGS)], cut_after=5)) as srv:
        total = accumulate(client(srv).bind_tools([drain_node]).stream("drain"))
    assert total.tool_call_chunks[0]["args"] == ARGS[:20] == '{"node": "gpu-node-7'
    assert total.tool_calls == [{"name": "drain_node", "args": {"node": "gpu-node-7"}, "id": "call_1",
                                 "type": "tool_call"}]
    assert total.invalid_tool_calls == []
    assert "finish_reason" not in total.response_metadata

    with OpenAILoopback(lambda body, index: Reply(tool_calls=[("drain_node", ARGS)], cut_after=2)) as srv:
        total = accumulate(client(srv).bind_tools([drain_node]).stream("drain"))
    assert total.tool_call_chunks[0]["args"] == '{"node":'
    assert total.tool_calls[0]["args"] == {}  # a call with no arguments at all, still not "invalid"


def test_stream_dropped_mid_arguments_raises_after_partial_chunks():
    """When the peer hangs up mid-body, the client raises APIConnectionError -- but only after it has already
    yielded the partial tool-call chunks, so a caller that accumulates while streaming holds a half call."""
    seen: list[AIMessageChunk] = []
    script = lambda body, index: Reply(tool_calls=[("drain_node", ARGS)], cut_after=5, abort=True)  # noqa: E731
    with OpenAILoopback(script) as srv, pytest.raises(openai.APIConnectionError):
        for chunk in client(srv).bind_tools([drain_node]).stream("drain"):
            seen.append(chunk)
    assert accumulate(seen).tool_calls[0]["args"] == {"node": "gpu-node-7"}


@pytest.mark.parametrize(("status", "error"), [(500, openai.InternalServerError), (429, openai.RateLimitError),
                                               (401, openai.AuthenticationError)])
def test_http_errors_raise_openai_exceptions(status, error):
    with OpenAILoopback(helpers.http_error(status)) as srv, pytest.raises(error) as caught:
        client(srv).invoke("hi")
    assert caught.value.status_code == status
    assert set(caught.value.body) >= {"message", "type", "code"}
    assert len(srv.requests) == 1  # max_retries=0: no second attempt


def test_delay_beyond_client_timeout_raises_timeout():
    with OpenAILoopback(lambda body, index: Reply(text="late", delay=5)) as srv:
        started = time.monotonic()
        with pytest.raises(openai.APITimeoutError):
            client(srv, timeout=0.3).invoke("hi")
    assert time.monotonic() - started < 2


def test_malformed_body_raises():
    with OpenAILoopback(lambda body, index: Reply(raw=b"<html>bad gateway</html>")) as srv, \
            pytest.raises(json.JSONDecodeError):
        client(srv).invoke("hi")
