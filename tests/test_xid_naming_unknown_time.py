"""name_gpu_faults trusts GpuSeries.xid_at as the time the XID happened; from Prometheus it is only 'one slice before
the gauge first showed the value in the lookback', so a DCGM XID gauge that already held the value when the lookback
began (the last XID is kept until the driver is reloaded: a previous occupant's, or one from days ago) is named with
a made-up time, 'while the job ran'."""
from __future__ import annotations

from datetime import timedelta

from agent.detectors.engine import run_detectors
from tests import test_prometheus_metrics as prom
from tests.test_detectors import AT, POLICY, gpu, job, observe


def test_an_xid_the_gauge_held_before_the_lookback_is_not_named_with_a_made_up_time():
    v = prom.steady(0)
    v["xid_last"] = [92, 92, 92, 92]  # held all through the lookback: it happened at some unknown time at or before 11:40
    series, _, _, _ = prom.run([(prom.gpu("n1", 0), v)])
    xid_at = series[0].xid_at
    assert prom.END == AT and xid_at <= AT - timedelta(seconds=prom.LOOKBACK)  # the lookback's first instant: already there

    # The same reading over the detectors' 24-slice (2 h) lookback: xid_at is the lookback's first instant, 10:00.
    xid_at = AT - timedelta(hours=2)
    quiet = [0.0] * 24
    gpus = [gpu("ml/train", quiet, index=0, xid_last=92, xid_at=xid_at), gpu("ml/train", quiet, index=1)]
    jobs = [job("ml/train", gpus=2, started_at=AT - timedelta(hours=2, minutes=10))]  # started before the lookback
    [f] = [f for f in run_detectors(observe(jobs, gpus), POLICY) if f.target == "ml/train"]
    assert f.kind == "idle"
    # Says: "GPU 0 of n1 reported XID 92 (high single-bit ECC error rate) at 10:00 UTC while the job ran": nothing
    # read says when it happened, nor that it was after the job started.
    assert f"at {xid_at:%H:%M} UTC while the job ran" not in f.evidence, f.evidence
