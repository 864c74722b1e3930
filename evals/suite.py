"""The eval suite on disk: scenario files and the policy each one runs under (a sidecar, or the defaults)."""

from __future__ import annotations

from pathlib import Path

from agent.config.policy import Policy, load_policy

SCENARIO_DIR = Path(__file__).with_name("scenarios")
# The strict scenario model forbids extra keys, so a scenario's policy lives in a sibling folder:
# <dir>/scenarios/<name>.yaml -> <dir>/policies/<name>.yaml. Kept out of the scenario folder so
# `steward eval evals/scenarios/` never reads a policy as a scenario.
POLICY_DIR = Path(__file__).with_name("policies")
# Scenarios the product is known to get wrong: name -> what it should report. `steward eval` counts such a
# miss as expected (exit 0) and an unexpected pass as a failure, as tests/test_scenarios.py's strict xfail does,
# so a fix shows up and the entry is removed.
KNOWN_MISSES: dict[str, str] = {
    "deepspeed-fp16-overflow-skips-every-step": "no finding: a DeepSpeed fp16 run whose loss scale sits at 1 skips "
    "every optimizer step for hours while its GPUs compute and its progress bar counts on; nothing the steward reads "
    "tells a skipped step from a taken one (the log's 'Skipping step' lines are not read for meaning)",
    "timeslice-shared-t4-idle-notebook": "no finding: on a time-sliced T4 every pod is served the whole card's "
    "readings (dcgm-exporter cannot attribute them), so an abandoned notebook reads 45-75 % busy beside a working "
    "inference API; the steward does not read GPU sharing",
    "generation-eval-low-power-no-profiling": "a working eval reported as a zombie (its owner warned); without DCGM "
    "profiling fields, power at 31-39 % of board power cannot tell memory-bound decoding from a hung spin, so the "
    "stop waits for a person (ActivityRule.idle_draw_share) and none happens",
    "rank0-nfs-checkpoint-workers-wait": "the three waiting worker pods are reported as zombies and their owner warned "
    "(every sign of a hung collective, and rank 0's CPU-side save to NFS shows nothing the steward reads); the stop "
    "waits for a person, because rank 0's pod is neither flagged nor seen working (agent/detectors/gang.py), and none "
    "happens",
    "dlrover-rank0-save-workers-pinned": "the three pods of a DLRover ElasticJob (grouped by their owner: no gang "
    "label the steward knows) are reported as zombies while rank 0 saves a checkpoint from the CPU, and their owner "
    "warned; rank 0's pod reads as a rank stuck on the host, so every pod's stop waits for a person, and none happens",
    "megatron-ckpt-save-nfs-3h": "a Megatron checkpoint written to NFS for 175 minutes with nothing in the pod's own "
    "counters is reported idle and its owner warned; its newest log line announces the save and none finishes it, so "
    "the stop waits for a person (agent/detectors/idle.py unfinished_state_io), and none happens",
    "vllm-tp4-load-juicefs-two-hours": "a vLLM server reading a 144 GB model from a JuiceFS volume for 130 minutes, "
    "nothing in the pod's own counters, is reported idle and its owner warned; its newest log line announces the "
    "load and none finishes it, so the stop waits for a person (unfinished_state_io), and none happens",
    "nemo-async-ckpt-finalize-fsx": "a NeMo run's final async checkpoint, finalized synchronously to a busy Lustre "
    "volume for 140 minutes with nothing in the pods' own counters, is reported idle and its owner warned; the log's "
    "last burst announces the save ('Pending async checkpoint saves') and no line finishes it, so the stop waits for "
    "a person, and none happens",
    "hf-load-shards-network-volume": "two 70B fine-tunes reading their weights over EFS for 2.5 hours, nothing in the "
    "pods' own counters, are reported idle and their owner warned; the log's last burst announces the load (before "
    "the model's config dump) and no line finishes it, so the stop waits for a person, and none happens",
}


def scenario_files(folder: Path = SCENARIO_DIR) -> list[Path]:
    return sorted(folder.glob("*.yaml"))


def policy_path_for(scenario_file: Path, policies: Path | None = None) -> Path | None:
    folder = policies if policies is not None else Path(scenario_file).resolve().parent.parent / "policies"
    path = folder / f"{Path(scenario_file).stem}.yaml"
    return path if path.is_file() else None


def policy_for(scenario_file: Path, policies: Path | None = None) -> Policy:
    """The scenario's sidecar policy, or the built-in defaults when it has none."""
    path = policy_path_for(scenario_file, policies)
    return load_policy(path) if path is not None else Policy()
