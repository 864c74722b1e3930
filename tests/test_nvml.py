"""NvmlCollector, PID → job mapping, dcgm rendering and the NVML sampler, against a fake NVML module."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from tools.nvml import NvmlCollector
from tools.nvml_sampler import NvmlMetrics
from tools.pid_jobs import PidJobs

POD_UID = "1f2e3d4c-aaaa-bbbb-cccc-0123456789ab"


class FakeNvmlError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


class FakeNvml:
    """The slice of pynvml the collector uses; GPU 1 supports neither power nor per-process samples."""

    NVMLError = FakeNvmlError
    NVML_TEMPERATURE_GPU = 0
    nvmlEventTypeXidCriticalError = 8

    def __init__(self) -> None:
        self.gpus = [
            {"util": 97, "used": 40 * 1024**3, "total": 80 * 1024**3, "power": 310_000, "temp": 66,
             "procs": [SimpleNamespace(pid=101, usedGpuMemory=40 * 1024**3)],
             "samples": [SimpleNamespace(pid=101, smUtil=95, timeStamp=5)]},
            {"util": 0, "used": 512 * 1024**2, "total": 80 * 1024**3, "power": None, "temp": 35,
             "procs": [SimpleNamespace(pid=202, usedGpuMemory=512 * 1024**2)], "samples": None},
            {"util": 250, "used": 0, "total": 80 * 1024**3, "power": 60_000, "temp": 30, "procs": [], "samples": None},
        ]
        self.events: list[SimpleNamespace] = []
        self.inited = self.shut = False

    def _get(self, h, key):
        value = self.gpus[h][key]
        if value is None:
            raise FakeNvmlError(3)  # NOT_SUPPORTED
        return value

    def nvmlInit(self): self.inited = True  # noqa: E704
    def nvmlShutdown(self): self.shut = True  # noqa: E704
    def nvmlSystemGetDriverVersion(self): return b"550.54"  # noqa: E704
    def nvmlDeviceGetCount(self): return len(self.gpus)  # noqa: E704
    def nvmlDeviceGetHandleByIndex(self, i): return i  # noqa: E704
    def nvmlDeviceGetUUID(self, h): return f"GPU-fake-{h}"  # noqa: E704
    def nvmlDeviceGetName(self, h): return b"NVIDIA H100 80GB HBM3"  # noqa: E704
    def nvmlDeviceGetUtilizationRates(self, h): return SimpleNamespace(gpu=self._get(h, "util"), memory=0)  # noqa: E704
    def nvmlDeviceGetPowerUsage(self, h): return self._get(h, "power")  # noqa: E704
    def nvmlDeviceGetTemperature(self, h, sensor): return self._get(h, "temp")  # noqa: E704
    def nvmlDeviceGetComputeRunningProcesses(self, h): return self.gpus[h]["procs"]  # noqa: E704
    def nvmlDeviceGetProcessUtilization(self, h, ts): return self._get(h, "samples")  # noqa: E704
    def nvmlEventSetCreate(self): return "set"  # noqa: E704
    def nvmlEventSetFree(self, s): pass  # noqa: E704
    def nvmlDeviceRegisterEvents(self, h, types, s): pass  # noqa: E704

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=self.gpus[h]["used"], total=self.gpus[h]["total"])

    def nvmlEventSetWait(self, s, timeout_ms):
        assert timeout_ms == 0, "XID polling must never block"
        if not self.events:
            raise FakeNvmlError(10)  # TIMEOUT
        return self.events.pop(0)


@pytest.fixture
def proc(tmp_path):
    (tmp_path / "101").mkdir()
    (tmp_path / "101" / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_UID.replace('-', '_')}.slice/"
        "cri-containerd-abc.scope\n")
    (tmp_path / "202").mkdir()
    (tmp_path / "202" / "cgroup").write_text("0::/user.slice/session-3.scope\n")
    (tmp_path / "202" / "environ").write_bytes(b"HOME=/home/frank\0SLURM_JOB_ID=4242\0SLURM_JOB_NAME=ablation\0")
    return tmp_path


def collector(proc, clock=None):
    fake = FakeNvml()
    jobs = PidJobs(proc, pod_for_uid={POD_UID: "ml/train"}.get)
    return fake, NvmlCollector(nvml=fake, pid_jobs=jobs, hostname="node-1", clock=clock or (lambda: 1000.0))


def test_reads_gpus_processes_and_owners(proc):
    fake, c = collector(proc)
    readings = c.read()
    assert fake.inited and c.driver == "550.54"
    g0, g1, g2 = readings
    assert (g0.util, g0.mem_used_mb, g0.power_w, g0.temp_c) == (97.0, 40 * 1024.0, 310.0, 66.0)
    assert g0.model == "NVIDIA H100 80GB HBM3" and g0.uuid == "GPU-fake-0"
    assert g0.processes[0].sm_util == 95.0 and g0.owner().pod == "ml/train"
    assert g1.power_w is None  # not supported: unknown, not zero
    assert g1.owner().slurm_job == "4242" and g1.processes[0].sm_util is None
    assert g2.util is None  # 250% is not a measurement
    c.close()
    assert fake.shut


def test_xid_events_are_drained_without_blocking(proc):
    fake, c = collector(proc)
    c.open()
    fake.events = [SimpleNamespace(eventType=8, eventData=79, device=1),
                   SimpleNamespace(eventType=8, eventData=48, device=2)]
    readings = c.read()
    assert [r.xid for r in readings] == [0, 79, 48] and readings[1].xid_at == 1000.0
    assert c.read()[1].xid == 79  # the last XID stays until another one comes


def test_slurm_job_from_cgroup_path(tmp_path):
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_991/step_0/user/task_0\n")
    assert PidJobs(tmp_path).owner(7).slurm_job == "991"
    assert PidJobs(tmp_path).owner(8).slurm_job is None  # gone process: unknown


def test_pod_uid_without_lookup_stays_a_uid(tmp_path):
    (tmp_path / "5").mkdir()
    (tmp_path / "5" / "cgroup").write_text(f"11:memory:/kubepods/besteffort/pod{POD_UID}/0123abc\n")
    owner = PidJobs(tmp_path).owner(5)
    assert owner.pod_uid == POD_UID and owner.pod is None


def test_renders_dcgm_exporter_text(proc):
    _, c = collector(proc)
    text = c.render()
    assert ('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-fake-0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",'
            'Hostname="node-1",namespace="ml",pod="train"} 97') in text
    assert 'hpc_job="4242"' in text
    assert 'DCGM_FI_DEV_GPU_UTIL{gpu="2"' not in text  # an absurd reading is left out, not written as 0
    assert 'DCGM_FI_DEV_POWER_USAGE{gpu="1"' not in text


def test_sampler_is_a_metrics_source(proc):
    now = [1000.0]
    _, c = collector(proc, clock=lambda: now[0])
    metrics = NvmlMetrics(c, interval_s=10.0)
    for _ in range(12):
        now[0] += 10.0
        metrics.sample()
    series = metrics.gpu_series(datetime.fromtimestamp(now[0], UTC), 120.0, 60.0)
    by = {s.gpu: s for s in series}
    assert by[0].job == "ml/train" and by[0].util_max == [97.0, 97.0] and by[0].samples == [6, 6]
    assert by[0].expected == 6 and by[0].power_w_avg == 310.0
    assert by[1].job == "4242" and by[1].util_max == [0.0, 0.0]
    assert by[2].util_max == [None, None] and by[2].samples == [0, 0]
    assert metrics.job_io_series(datetime.fromtimestamp(now[0], UTC), 120.0, 60.0) == []
    # The coarse history from the same readings: one 120 s slice with max, min and sample count.
    history = {h.gpu: h for h in metrics.gpu_history(datetime.fromtimestamp(now[0], UTC), 120.0, 120.0)}
    assert (history[0].job, history[0].util_max, history[0].util_min) == ("ml/train", [97.0], [97.0])
    assert (history[0].samples, history[0].expected) == ([12], 12)
    assert history[2].util_max == [None] and history[2].samples == [0]


def test_a_sampler_that_stopped_makes_a_job_re_read_stale(proc):
    # The in-process source has the shape of Prometheus' answers (per-slice sample counts): a sampler loop that
    # stopped (NVML hung, the thread died) leaves the newest slices empty, and the re-read before an action on the job
    # is judged stale by the same rule (agent/graph/deps.py stale_job_metrics), naming when it last had a sample.
    from agent.graph.deps import stale_job_metrics
    from core.cluster import JobInfo

    now = [1000.0]
    _, c = collector(proc, clock=lambda: now[0])
    metrics = NvmlMetrics(c, interval_s=10.0)
    train = JobInfo(id="ml/train", scheduler="kubernetes", namespace="ml", name="train", user="a", gpus=1)
    for _ in range(12):
        now[0] += 10.0
        metrics.sample()
    end = datetime.fromtimestamp(now[0], UTC)
    assert stale_job_metrics(metrics.gpu_series(end, 180.0, 60.0), [train], end, 60.0) is None
    end = datetime.fromtimestamp(now[0] + 120.0, UTC)  # two minutes later, no sample taken since
    why = stale_job_metrics(metrics.gpu_series(end, 180.0, 60.0), [train], end, 60.0)
    assert why is not None and "ml/train on node-1: no GPU sample since 00:18 UTC" in why, why  # 1120 s
