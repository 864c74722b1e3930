"""A scripted chat model for graph tests: replies come from a script, never from the network."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

Script = Callable[[list[BaseMessage], int], AIMessage]


class ScriptedChatModel(BaseChatModel):
    """Each call returns script(messages, call_index); bind_tools keeps the tool names for inspection."""

    script: Any
    calls: list[list[BaseMessage]] = []
    bound_tools: list[str] = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        self.bound_tools = [getattr(t, "name", str(t)) for t in tools]
        return self

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        index = len(self.calls)
        self.calls.append(list(messages))
        reply = self.script(messages, index)
        return ChatResult(generations=[ChatGeneration(message=reply)])


def tool_call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def rounds(*replies: AIMessage) -> Script:
    """A script that plays the replies in order, then answers with plain text."""

    def play(messages: list[BaseMessage], index: int) -> AIMessage:
        if index < len(replies):
            return replies[index]
        return AIMessage(content="done")

    return play
