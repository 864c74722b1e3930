"""A local model for development and CI: GGUF files assembled from registry packages, and a small
OpenAI-compatible chat-completions server around llama.cpp (`steward llm local`).

The agent reaches it like any other endpoint (STEWARD_LLM_BASE_URL, STEWARD_LLM_MODEL); nothing in the
sweep imports this package. It is a surface: it may import any layer, and none imports it.
"""
