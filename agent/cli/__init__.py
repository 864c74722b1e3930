"""The `steward` command line: one module per command (sweep, runbooks; eval and policy in main.py).

A surface: it may import anything below it, and the simulator only for the demo.
"""
