"""One module per graph node; each is a function of (deps, state), wired by agent/graph/builder.py."""
