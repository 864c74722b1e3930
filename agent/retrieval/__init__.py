"""Runbook retrieval: parse and chunk runbooks, embed them offline, BM25 with jieba, the hybrid index.

Imports only core, agent.config and agent.assets.
"""
