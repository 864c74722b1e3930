"""The simulator's DCGM profiling fields, power and interconnect: physically plausible defaults per phase, the
optional scenario keys that override them, and the exporter serving them as dcgm-exporter does."""

from __future__ import annotations

import re

import pytest

from sim.scenario import ScenarioError
from tests.test_sim import H, cluster, series_of

PROFILING = ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
             "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES", "DCGM_FI_PROF_PCIE_TX_BYTES",
             "DCGM_FI_PROF_PCIE_RX_BYTES")


def last(values: list[float | None]) -> float:
    value = values[-1]
    assert value is not None
    return value


def test_a_training_phase_draws_power_and_moves_nvlink_bytes():
    sim = cluster([{"id": "ml/train", "gpus": 4, "phases": [{"gpu_util": 90, "cpu_pct": 300, "log": "loss"}]},
                   {"id": "ml/single", "gpus": 1, "phases": [{"gpu_util": 90, "cpu_pct": 120}]}])
    sim.advance_to(H)
    train = series_of(sim, "ml/train")[0]
    assert last(train.sm_active_avg) > 0.5 and last(train.tensor_active_avg) > 0.3 and last(train.dram_active_avg) > 0.3
    assert last(train.power_w_slices) > 300
    assert last(train.nvlink_bytes_avg) > 1e10 and last(train.pcie_bytes_avg) > 1e8
    single = series_of(sim, "ml/single")[0]
    assert last(single.nvlink_bytes_avg) == 0.0 and last(single.pcie_bytes_avg) > 1e8  # no peers to talk to


def test_a_hung_collective_pins_util_while_real_activity_power_and_links_go_idle_and_cpu_spins():
    sim = cluster([{"id": "ml/hung", "gpus": 4, "phases": [
        {"duration": "20m", "gpu_util": 95, "cpu_pct": 400, "log": "loss"},
        {"gpu_util": [98, 100], "cpu_pct": [390, 410], "gpu_work": "spin", "log": "silent"}]}])
    sim.advance_to(H)
    g = series_of(sim, "ml/hung")[0]
    assert last(g.util_avg) >= 98
    assert last(g.sm_active_avg) < 0.15 and last(g.tensor_active_avg) == 0.0 and last(g.dram_active_avg) == 0.0
    assert last(g.power_w_slices) < 110  # an A100 near idle
    assert last(g.nvlink_bytes_avg) == 0.0 and last(g.pcie_bytes_avg) == 0.0
    assert g.nvlink_bytes_avg[0] > 1e10  # it trained before it hung
    assert last(sim.job_io_series(sim.now(), H, 300)[0].cpu_pct) > 380  # spinning host threads


def test_a_busy_gpu_fed_by_an_idle_host_spins_by_default():
    # Launching real kernels takes host CPU: the old scenarios' hangs (CPU ~0) keep meaning a hang.
    sim = cluster([{"id": "ml/old-zombie", "gpus": 2, "phases": [{"gpu_util": [99, 100], "cpu_pct": [0.2, 1]}]}])
    sim.advance_to(H)
    g = series_of(sim, "ml/old-zombie")[0]
    assert last(g.sm_active_avg) < 0.15 and last(g.power_w_slices) < 110 and last(g.nvlink_bytes_avg) == 0.0


def test_written_activity_overrides_the_defaults_and_is_inherited():
    sim = cluster([{"id": "ml/x", "gpus": 2, "phases": [
        {"duration": "30m", "gpu_util": 50, "cpu_pct": 100, "sm_active": [0.2, 0.3], "tensor_active": 0.0,
         "power_w": 150, "nvlink_mbps": 5, "pcie_mbps": 2},
        {"gpu_util": 60}]}])
    sim.advance_to(H)
    g = series_of(sim, "ml/x")[0]
    for k in (0, -1):  # the second phase keeps what the first one wrote
        assert 0.2 <= g.sm_active_avg[k] <= 0.3 and g.tensor_active_avg[k] == 0.0
        assert g.power_w_slices[k] == 150.0 and g.nvlink_bytes_avg[k] == 5e6 and g.pcie_bytes_avg[k] == 2e6
    assert g.dram_active_avg[-1] == pytest.approx(0.24)  # not written: derived from gpu_util (real work)


def test_exporter_serves_the_dcgm_profiling_fields_and_a_node_without_profiling_serves_none():
    sim = cluster([{"id": "ml/train", "gpus": 2, "node": "p-0", "phases": [{"gpu_util": 80, "cpu_pct": 200}]},
                   {"id": "ml/old", "gpus": 1, "node": "bare", "phases": [{"gpu_util": 80, "cpu_pct": 200}]}],
                  nodes=[{"name": "bare", "gpus": 1, "gpu_model": "T4", "profiling": False}])
    sim.advance_to(H)
    text = sim.exporter_text()
    for name in PROFILING:
        assert f"# TYPE {name} gauge" in text and f"# HELP {name} " in text
    labels = 'gpu="0",UUID="[^"]+",device="nvidia0",modelName="A100-80GB",Hostname="p-0",container="main",' \
             'namespace="ml",pod="train"'
    sm = re.search(r'DCGM_FI_PROF_SM_ACTIVE\{' + labels + r'\} ([0-9.e+]+)', text)
    assert sm is not None and float(sm.group(1)) == pytest.approx(0.72)
    tx = re.search(r'DCGM_FI_PROF_NVLINK_TX_BYTES\{' + labels + r'\} ([0-9.e+]+)', text)
    rx = re.search(r'DCGM_FI_PROF_NVLINK_RX_BYTES\{' + labels + r'\} ([0-9.e+]+)', text)
    assert tx is not None and rx is not None and float(tx.group(1)) + float(rx.group(1)) == pytest.approx(16e9)
    assert re.search(r'DCGM_FI_DEV_POWER_USAGE\{' + labels + r'\} 334', text)
    bare = [line for line in text.splitlines() if 'Hostname="bare"' in line]
    assert any(line.startswith("DCGM_FI_DEV_GPU_UTIL{") for line in bare)
    assert not any(line.startswith("DCGM_FI_PROF_SM_ACTIVE") for line in bare)  # absent, not zero
    old = series_of(sim, "ml/old")[0]
    # Power is drawn against the node's own board: a T4 (70 W) at 80 % draws 58 W, never an A100's 334 W.
    assert old.sm_active_avg == [] and old.nvlink_bytes_avg == [] and last(old.power_w_slices) == pytest.approx(58.45)


def test_activity_keys_are_checked_when_the_scenario_loads():
    with pytest.raises(ScenarioError, match=r"jobs\[0\]\.phases\[0\]\.sm_active.*ratio from 0 to 1"):
        cluster([{"id": "a/b", "phases": [{"sm_active": 85}]}])
    with pytest.raises(ScenarioError, match=r"jobs\[0\]\.phases\[0\]\.power_w.*negative"):
        cluster([{"id": "a/b", "phases": [{"power_w": -5}]}])
    with pytest.raises(ScenarioError, match=r"jobs\[0\]\.phases\[0\]\.gpu_work"):
        cluster([{"id": "a/b", "phases": [{"gpu_work": "busy"}]}])


def test_an_idle_gpu_draws_a_share_of_its_own_board_not_an_a100s_70_w():
    """The simulator drew every idle GPU at an A100's 70 W: a T4's whole board, so an idle T4 read as working once the
    idle detector counted power as work (agent/detectors/activity.py last_real_work)."""
    sim = cluster([{"id": "ml/nb", "gpus": 1, "node": "t4", "phases": [{"gpu_util": 0, "gpu_mem_gb": 8}]}],
                  nodes=[{"name": "t4", "gpus": 1, "gpu_model": "T4"}])
    sim.advance_to(H)
    assert last(series_of(sim, "ml/nb")[0].power_w_slices) == pytest.approx(0.175 * 70.0)
