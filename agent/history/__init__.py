"""What finished history says about what comes next: doomed-job rules and per-pool load forecasts.

Pure computation over records the caller hands in (no I/O, no clock): the detectors, the planner and
the evals all feed it. Imports only core (and numpy/statsmodels for the forecasts).
"""
