"""The sweep as a LangGraph state machine: state, deps, the graph builder, one module per node, and acting.

Owns: observe -> detect -> plan -> guard -> approve -> execute -> report, the per-action fresh
re-read (execute.py) and the service that starts graph runs (service.py). Imports planning,
guardrail, detectors, retrieval, records, config, core and tools; never a surface (api, chatops, cli).
"""
