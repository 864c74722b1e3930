"""Log progress analysis: counters that move are progress, repeated lines are not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from core.cluster import LogLine
from tools.log_progress import analyse_log

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=2)


def lines(texts: list[str], every_s: float = 30.0) -> list[LogLine]:
    return [LogLine(at=T0 + timedelta(seconds=i * every_s), text=t) for i, t in enumerate(texts)]


def test_loss_lines_make_progress_and_give_step_and_gap():
    log = lines([f"step={100 + i} loss={0.9 - i * 0.01:.3f}" for i in range(10)])
    p = analyse_log("a/b", log, NOW)
    assert p.job == "a/b"
    assert p.lines == 10
    assert p.progress_lines == 10
    assert p.first_progress_at == T0
    assert p.last_progress_at == T0 + timedelta(seconds=270)
    assert p.typical_gap_s == 30.0
    assert p.last_step == 109
    assert p.tail == [x.text for x in log[-5:]]


def test_timestamps_in_lines_do_not_count_as_progress():
    log = lines([f"2026-11-02 09:{i:02d}:00,123 INFO step=500 loss=0.310" for i in range(6)])
    p = analyse_log("j", log, NOW)
    assert p.progress_lines == 1  # the first report, then the same counters again and again
    assert p.last_progress_at == T0
    assert p.last_step == 500


def test_repeated_heartbeat_is_not_progress():
    p = analyse_log("j", lines(["still alive"] * 20), NOW)
    assert p.progress_lines == 0
    assert p.first_progress_at is None and p.last_progress_at is None
    assert p.typical_gap_s is None
    assert p.last_line_at == T0 + timedelta(seconds=19 * 30)


def test_nccl_watchdog_lines_are_not_progress_even_with_moving_numbers():
    log = lines(["step=10 loss=1.0", "step=11 loss=0.9"]) + [
        LogLine(
            at=T0 + timedelta(minutes=10 + i),
            text=f"[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=77, OpType=ALLREDUCE) ran for {600000 + i * 60000} milliseconds",
        )
        for i in range(5)
    ]
    p = analyse_log("j", log, NOW)
    assert p.progress_lines == 2
    assert p.last_progress_at == T0 + timedelta(seconds=30)
    assert p.last_step == 11


def test_tqdm_bars_make_progress():
    texts = [
        f"Epoch 1: {i * 10}%|{'#' * i}{' ' * (10 - i)}| {i * 100}/1000 [00:{i:02d}<00:{10 - i:02d}, 45.2it/s]"
        for i in range(1, 6)
    ]
    p = analyse_log("j", lines(texts), NOW)
    assert p.progress_lines == 5


def test_epoch_and_shard_and_iter_formats():
    p = analyse_log("j", lines(["Epoch 3 [120/500]", "Epoch 3 [140/500]", "Epoch 3 [160/500]"]), NOW)
    assert p.progress_lines == 3
    p = analyse_log("j", lines(["downloading shard 13/200", "downloading shard 14/200"], every_s=300), NOW)
    assert p.progress_lines == 2 and p.typical_gap_s == 300
    p = analyse_log("j", lines(["iter 4500 lr 1e-4", "iter 4600 lr 1e-4"]), NOW)
    assert p.last_step == 4600 and p.progress_lines == 2


def test_interleaved_templates_are_compared_with_their_own_kind():
    texts = ["step=1 loss=2.0", "GPU mem 58000MiB", "step=2 loss=1.9", "GPU mem 58000MiB", "step=3 loss=1.8"]
    p = analyse_log("j", lines(texts), NOW)
    assert p.progress_lines == 3


def test_chinese_lines_do_not_break_it():
    texts = [
        "训练中: 第 3 轮, 步 120, 损失 0.52",
        "训练中: 第 3 轮, 步 140, 损失 0.50",
        "心跳: 仍在运行",
        "心跳: 仍在运行",
    ]
    p = analyse_log("j", lines(texts), NOW)
    assert p.progress_lines == 2
    assert p.tail[-1] == "心跳: 仍在运行"


def test_empty_log():
    p = analyse_log("j", [], NOW)
    assert p.lines == 0 and p.progress_lines == 0 and p.tail == [] and p.last_line_at is None


def test_huge_log_is_analysed_whole():
    # Speed is a benchmark's business, not a test's: this only checks that every line counts.
    log = [
        LogLine(at=T0 + timedelta(seconds=i), text=f"step={i} loss={1 / (i + 1):.5f} " + "x" * 100)
        for i in range(50_000)
    ]
    p = analyse_log("j", log, NOW)
    assert p.progress_lines == 50_000 and p.last_step == 49_999


def test_words_that_merely_contain_stall_words_still_count():
    p = analyse_log("j", lines(["lr change at step=100", "lr change at step=200"]), NOW)
    assert p.progress_lines == 2


def test_retry_poll_reconnect_and_health_probe_counters_are_not_progress():
    """Lines about waiting whose counters move (found by probing with unseen scenarios): none is progress."""
    stalls = [
        [f"Connection to broker lost, reconnecting (attempt {21 + i})" for i in range(6)],
        [f"redis unavailable: {21 + i} retries so far, backing off 30s" for i in range(6)],
        [f"no new tasks in queue vllm-batch, polling again (poll #{21 + i})" for i in range(6)],
        [f'INFO:     10.0.3.{i}:{51000 + i} - "GET /healthz HTTP/1.1" 200 OK' for i in range(6)],
        [f"连接 redis 失败，第 {21 + i} 次重试" for i in range(6)],
        [f"数据加载进程无响应，已卡住 {630 + 30 * i} 秒" for i in range(6)],
        [f"NCCL 集合通信已挂起 {10 + i} 分钟 (SeqNum=88213)" for i in range(6)],
    ]
    for texts in stalls:
        assert analyse_log("j", lines(texts), NOW).progress_lines == 0, texts[0]
    # Real progress with similar numbers still counts.
    assert analyse_log("j", lines([f"tokenised shard {i}/50" for i in range(1, 7)]), NOW).progress_lines == 6


def test_requests_a_service_answers_are_counted_and_probes_and_notebook_calls_are_not():
    """A POST to a path that is neither a health check nor a notebook server's own API is a caller's request."""
    from tools.log_progress import request_path

    assert request_path('"POST /sdapi/v1/txt2img HTTP/1.1" 200 req=8812') == "POST /sdapi/v1/txt2img"
    assert request_path('INFO: 10.0.0.1:5123 - "POST /v1/completions HTTP/1.1" 200 OK') == "POST /v1/completions"
    assert request_path('10.1.1.1 - - [02/Dec/2026:10:00:00] "POST /predict?key=s3cret HTTP/1.1" 200 512') == (
        "POST /predict")
    # Servers without an access log: text-generation-inference's router span, vLLM's engine.
    tgi = ('2026-11-03T13:05:12Z  INFO generate{parameters=GenerateParameters { max_new_tokens: Some(256) } '
           'total_time="3.412s" inference_time="3.41s"}: text_generation_router::server: router/src/server.rs:305: Success')
    assert request_path(tgi) == "generate (Success)"
    assert request_path("INFO 11-03 13:05:12 async_llm_engine.py:140] Finished request chatcmpl-8f2c1e") == (
        "Finished request chatcmpl-…")
    for not_served in ("generate{x=1}: router: Error: out of memory", "step 10 generate samples: Success",
                       "Finished request handling setup", "predict{batch=3}: validation failed"):
        assert request_path(not_served) is None, not_served
    for probe in ("GET /healthz 200 1ms", "POST /healthz 200", "POST /api/kernels/abc/interrupt 204",
                  "[I ServerApp] 201 POST /api/sessions (127.0.0.1) 3ms", "GET /v1/models 200", "POST / 200"):
        assert request_path(probe) is None, probe
    at = datetime(2026, 11, 3, 2, 0, tzinfo=UTC)
    lines = [LogLine(at=at - timedelta(minutes=m), text=f'"POST /sdapi/v1/txt2img HTTP/1.1" 200 req={m}')
             for m in (130, 70)] + [LogLine(at=at - timedelta(minutes=5), text="GET /healthz 200 1ms")]
    progress = analyse_log("imagegen/sdxl", lines, at)
    assert progress.requests == 2 and progress.request_path == "POST /sdapi/v1/txt2img"


def test_a_request_the_server_failed_shows_a_service_but_no_progress():
    """A FastAPI server whose CUDA context died answers every POST with a 500 while /healthz says ok (a sticky CUDA
    error; vllm-project/vllm#7633). Counted as answered requests, its 500s were progress and the broken server, its
    GPU at 0 %, was never reported. A server error (5xx) is a service's line, not work done."""
    at = datetime(2026, 11, 10, 14, 0, tzinfo=UTC)
    ok = [LogLine(at=at - timedelta(minutes=200 - m), text=f'INFO: 10.0.7.21:{m} - "POST /v1/tag HTTP/1.1" 200 OK')
          for m in range(3)]
    failed = [LogLine(at=at - timedelta(minutes=60 - m), text=f'INFO: 10.0.7.21:{m} - "POST /v1/tag HTTP/1.1" 500 '
                      "Internal Server Error") for m in range(0, 60, 5)]
    probe = [LogLine(at=at - timedelta(minutes=1), text='INFO: 10.0.0.1:1 - "GET /healthz HTTP/1.1" 200 OK')]
    p = analyse_log("cv/tagger", ok + failed + probe, at)
    assert (p.requests, p.failed_requests, p.request_path) == (15, 12, "POST /v1/tag")
    assert p.last_progress_at == ok[-1].at  # the last request it served, not the last it failed
    # A 4xx is the server answering (a wrong key, a bad body, too many requests): it works.
    client_error = analyse_log("cv/tagger", [LogLine(at=at, text='"POST /v1/tag HTTP/1.1" 422 Unprocessable')], at)
    assert (client_error.requests, client_error.failed_requests, client_error.progress_lines) == (1, 0, 1)


def test_the_schedulers_own_cancel_line_is_not_progress():
    """Slurm writes "slurmstepd: error: *** JOB 22 ON n1 CANCELLED AT ... ***" into the job's output when the
    steward's SIGTERM lands. Read as progress ("step" in "slurmstepd"), it restarted the idle stretch at the
    steward's own signal, and the forced stop of a job that ignores SIGTERM was refused for want of a warning."""
    log = lines(["step=10 loss=1.0", "step=11 loss=0.9",
                 "slurmstepd: error: *** JOB 22 ON localhost CANCELLED AT 2026-11-02T09:40:00 ***",
                 "slurmstepd-gpu01: error: *** STEP 22.0 ON gpu01 CANCELLED AT 2026-11-02T09:41:00 ***"])
    p = analyse_log("j", log, NOW)
    assert p.progress_lines == 2 and p.last_progress_at == T0 + timedelta(seconds=30)
    # srun's own lines after a task died: its numbers (a step id) are no progress, so the death stays the last word.
    died = analyse_log("j", lines(["step=10 loss=1.0", "srun: error: a100-0: task 7: Exited with exit code 1",
                                   "srun: Terminating StepId=771204.0 is NOT done: other tasks still running"]), NOW)
    assert died.progress_lines == 1 and died.ended == "srun: error: a100-0: task 7: Exited with exit code 1"
    assert died.rank_died == died.ended  # a launcher's verdict on one rank
    # A death that names no rank (a caught subprocess error, a killed side monitor) ends the log, not a rank.
    for line in ("Command '['aws', 's3', 'sync', 'out', 's3://b']' returned non-zero exit status 1.",
                 "train.sh: line 23: 91822 Killed                  python gpu_monitor.py"):
        other = analyse_log("j", lines(["step=10 loss=1.0", line]), NOW)
        assert other.ended and other.rank_died is None, line
    torchrun = analyse_log("j", lines(["step=10 loss=1.0", "[E ... torch.distributed.elastic.multiprocessing.api:"
                                       "882] failed (exitcode: 1) local_rank: 3 (pid: 4242) of binary: python"]), NOW)
    assert torchrun.rank_died is not None
    assert analyse_log("j", lines(["srun: error: n1: task 3: Exited with exit code 1", "step=11 loss=0.8"]),
                       NOW).rank_died is None  # progress after it: the job went on
    # A word that merely contains a progress word is no hint; one that starts or follows a non-letter is.
    assert analyse_log("j", lines(["upstepdown 5"]), NOW).progress_lines == 0
    assert analyse_log("j", lines(["global_step 5"]), NOW).progress_lines == 1


def test_probes_are_no_progress_and_servers_own_request_lines_are_requests():
    """Ollama's Gin log wrote the chart's probe (`GET "/"`) every 10 s with a new latency: read as progress, the
    idle server was told to run "without GPUs"; its chats (`POST "/api/chat"`, status first) were no requests. A
    ComfyUI (`Prompt executed in 3.41 seconds`) and a Chinese ASR API (`识别完成 请求ID=… 耗时=…秒`) write no access log:
    both were stopped as idle jobs."""
    probes = [f'[GIN] 2026/11/02 - 11:{i:02d}:00 | 200 |   {30 + i * 1.3:.1f}µs |   10.244.2.1 | GET      "/"'
              for i in range(12)]
    probes += [f'INFO:     10.0.0.{i}:{40000 + 7 * i} - "GET /healthz HTTP/1.1" 200 OK' for i in range(12)]
    assert analyse_log("j", lines(probes), NOW).progress_lines == 0
    chats = analyse_log("j", lines([f'[GIN] 2026/11/02 - 11:{i:02d}:00 | 200 | {3 + i * 0.3:.1f}s | 10.244.5.7 | '
                                    f'POST     "/api/chat"' for i in range(6)]), NOW)
    assert (chats.requests, chats.request_path) == (6, "POST /api/chat")
    comfy = analyse_log("j", lines([f"Prompt executed in {3 + i * 0.7:.2f} seconds" for i in range(5)]), NOW)
    assert (comfy.requests, comfy.request_path) == (5, "Prompt executed (ComfyUI)")
    asr = analyse_log("j", lines([f"识别完成 请求ID=9f{i}a2 音频时长={10 + i}.2秒 耗时={1 + i * 0.1:.2f}秒" for i in range(4)]),
                      NOW)
    assert asr.requests == 4
    # A GET of a path that is no probe, and a trainer's own line, are read as before.
    assert analyse_log("j", lines(["step=10 loss=1.0", "step=11 loss=0.9"]), NOW).progress_lines == 2


def test_a_process_dumping_its_own_counters_makes_no_progress():
    """Ray's raylet, logging to stderr, dumps its event counters every minute; they grow on their own, so an idle
    GPU worker looked busy for good. A stats line that reports training (a step, a loss) is still progress."""
    ray = [f"[2026-11-02 09:{10 + i}:00,101 I 61 61] node_manager.cc:525: [state-dump] Global stats: {41523 + 271 * i} "
           f"total (12 active)" for i in range(6)]
    ray += [f"[2026-11-02 09:{10 + i}:00,103 I 61 61] node_manager.cc:525: [state-dump] NodeManager.deadline_timer."
            f"debug_state_dump - {612 + i} total (1 active), CPU time: mean = 0.412 ms" for i in range(6)]
    assert analyse_log("j", lines(ray), NOW).progress_lines == 0
    training = [f"epoch 3 stats: step {100 + i} loss {0.9 - i / 100:.2f}" for i in range(6)]
    assert analyse_log("j", lines(training), NOW).progress_lines == 6
    # Counters of real work under a "stats" or "uptime" heading are progress (a review's examples).
    for work in ([f"Throughput stats: 1523 img/s, {23000 + 500 * i} images done" for i in range(6)],
                 [f"[stats] rows written: {12000 + 100 * i}" for i in range(6)],
                 [f"Uptime 0:{12 + i}:00 - evaluated {12000 + 50 * i} prompts" for i in range(6)]):
        assert analyse_log("j", lines(work), NOW).progress_lines >= 5, work[0]


def test_time_passing_is_not_progress():
    """A poll loop's random back-off and an upload spinner's elapsed time move, and once read as work: a ColabFold
    job polling a PENDING MSA ticket for hours, wandb.finish() stuck at 0B/928B (scenarios
    colabfold-msa-pending-forever, slurm-array-wandb-finish-hang). Counts beside a time span still count."""
    back_off = [f"Sleeping for {s}s. Reason: PENDING" for s in (7, 10, 8, 9, 6, 7, 9, 5)]
    assert analyse_log("j", lines(back_off, 9), NOW).progress_lines == 0
    spinner = [f"wandb: ⢿ uploading wandb-metadata.json 0B/928B ({m}.0m)" for m in range(10, 100, 10)]
    assert analyse_log("j", lines(spinner, 600), NOW).progress_lines == 0  # only time moves
    timed = [f"step {100 + i} took {0.4 + i / 100:.2f}s loss={0.9 - i / 100:.2f}" for i in range(6)]
    assert analyse_log("j", lines(timed), NOW).progress_lines == 6
    counts = [f"embedded {3 + i}.2M samples in 12s" for i in range(4)]  # M: a count, not minutes
    assert analyse_log("j", lines(counts), NOW).progress_lines == 4
    speed = [f"iter {i} 2s/it" for i in range(4)]
    assert analyse_log("j", lines(speed), NOW).progress_lines == 4


def test_a_request_answered_is_progress_whatever_its_numbers():
    """An access log's moving number is its latency, a time span: the request itself is the work
    (daily-serving-cycle's quiet-hour requests keep its reranker untouched)."""
    p = analyse_log("j", lines(["POST /v1/rerank 200 41ms", "GET /healthz 200 1ms", "POST /v1/rerank 200 41ms"]), NOW)
    assert p.requests == 2 and p.progress_lines == 2 and p.last_progress_at == T0 + timedelta(seconds=60)


def test_a_time_span_that_does_not_follow_the_clock_is_an_ordinary_number():
    """A reviewer's counterexamples to reading every time span as a clock: simulated time, per-item timings, audio
    generated, rows loaded ("2.5m"), and a dataset named Sleep-EDF are work; only elapsed time is not."""
    for texts in ([f"Simulation time: {1.5 * i:.2f} h" for i in range(1, 8)],
                  [f"Processed chunk in {0.8 + (i % 3) / 10:.2f}s" for i in range(8)],
                  [f"Generated {15.1 + i * 3.3:.1f}s of audio" for i in range(8)],
                  [f"loaded {2.5 * i:.1f}m rows" for i in range(1, 8)],
                  [f"[Sleep-EDF] epoch 3 step {100 + i} loss {0.9 - i / 100:.2f}" for i in range(8)]):
        assert analyse_log("j", lines(texts), NOW).progress_lines >= len(texts) - 1, texts
    elapsed = [f"still uploading: {30 * i}s elapsed" for i in range(1, 8)]  # grows with the 30 s between lines
    assert analyse_log("j", lines(elapsed), NOW).progress_lines == 0


def test_elapsed_time_in_lines_without_their_own_times_and_sleep_phrasings():
    """A Slurm output file has no per-line times (every line is dated by the file's mtime): a span that only grows is
    still elapsed time there. "will sleep 12s" is waiting; "0h 59m" -> "1h 0m" is one minute, not a jump."""
    same_time = [LogLine(at=T0, text=f"Uploading checkpoint 0B/928B ({m}.0m)") for m in range(1, 30)]
    assert analyse_log("j", same_time, NOW).progress_lines == 0
    sleeps = [f"poll: will sleep {s}s before next poll" for s in (12, 7, 9, 14, 8)]
    assert analyse_log("j", lines(sleeps), NOW).progress_lines == 0
    clock = [f"elapsed {h}h {m}m" for h, m in ((0, 58), (0, 59), (1, 0), (1, 1))]
    assert analyse_log("j", lines(clock, 60), NOW).progress_lines == 0


def test_a_counter_moves_in_place_not_between_lines_of_different_numbers():
    """An MPI worker pod logs sshd's start: "listening on 0.0.0.0 port 22" then "listening on :: port 22". The same
    words with a different count of numbers is no counter that moved: it read as progress, so a hung MPIJob's silent
    workers looked alive once (a scenario from horovod#777)."""
    got = analyse_log("mpi/worker-0", lines(["Server listening on 0.0.0.0 port 22.", "Server listening on :: port 22."]),
                      NOW)
    assert got.progress_lines == 0 and got.last_progress_at is None
    moving = analyse_log("ml/x", lines(["it 10 loss 2.5", "it 20 loss 2.4"]), NOW)
    assert moving.progress_lines == 2


def test_a_notebook_servers_autosaves_and_a_config_dumps_bare_numbers_are_no_progress():
    """Autosaves come from the browser tab, not the kernel, whose cells never write to the server's log
    (jupyter/notebook#3932): two notebooks saved in turn moved a "counter" and gave a log cadence that fell silent
    during a 95-minute scikit-learn fit, read as a deadlocked DataLoader. And the items of a JSON array in a model's
    config dump (128001, 128008, ...) name nothing they count."""
    saves = [f"[I 2026-11-03 09:{i:02d}:00.123 ServerApp] Saving file at /home/jovyan/Untitled{1 + i % 2}.ipynb"
             for i in range(20)]
    assert analyse_log("ds/nb", lines(saves, 120.0), NOW).progress_lines == 0
    dump = ["Generate config GenerationConfig {", '  "eos_token_id": [', "    128001,", "    128008,", "    128009", "  ]"]
    assert analyse_log("llm/sft", lines(dump, 1.0), NOW).progress_lines == 0
    # A bare number at the margin is a report (print(loss.item()) every step), a job's only progress line.
    assert analyse_log("ml/train", lines([f"{2.31 - i * 0.01:.4f}" for i in range(10)]), NOW).progress_lines == 9


# --- Formats the rules' authors never saw (evals/log_tails_unseen.yaml): one mechanism each ---------------------


def test_a_failure_after_the_newest_progress_ends_it():
    """A crashed job's last steps are no sign it works: a line saying the process died after them (a signal death, a
    non-zero exit, a fatal error, a scheduler's verdict) ends the progress, and is never progress itself. A logged
    exception alone does not: it may have been caught (a background upload's 504 beside work that goes on: a
    working job was stopped on one, review of the eleventh round). The time of the last progress stays a fact."""
    steps = ["[default0]:step 1210 | loss 1.0211", "[default0]:step 1220 | loss 1.0198"]
    for failure in (["Killed"], ["/var/spool/slurmd/job48211/slurm_script: line 12: 4412 Killed   python train.py"],
                    ["已杀死"], ["总线错误 (核心已转储)"], ["Fatal Python error: Segmentation fault"],
                    ["E1102 10:40:42.662 api.py:869] failed (exitcode: 1) local_rank: 3 (pid: 4412)"],
                    ["slurmstepd: error: *** JOB 48211 ON gpu-node-07 CANCELLED AT 2026-11-02T10:42:12 ***"],
                    ["程序退出（退出码 2）"], ["检测到损失为 NaN，训练中止"]):
        p = analyse_log("j", lines(steps + failure), NOW)
        assert p.progress_lines == 2 and p.last_progress_at == T0 + timedelta(seconds=30), failure
        assert p.ended is not None and not p.advanced_since(T0), failure
    for logged in (["[default3]:Traceback (most recent call last):", '[default3]:  File "/app/train.py", line 412',
                    "[default3]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."],
                   ["Exception: Current loss scale already at minimum - cannot decrease scale anymore."],
                   ["requests.exceptions.HTTPError: 504 Server Error: Gateway Time-out for url: https://x/upload"]):
        p = analyse_log("j", lines(steps + logged), NOW)
        assert p.progress_lines == 2 and p.ended is None and p.advanced_since(T0), logged
    p = analyse_log("j", lines(steps + ["Traceback (most recent call last):", "RuntimeError: NCCL error",
                                        "failed (exitcode: 1) local_rank: 0 (pid: 4400)"]), NOW)
    assert p.ended == "RuntimeError: NCCL error"  # the exception names the death better than the exit line
    # Progress after a failure (a handled exception, a restarted worker) stands; so does a job without a failure.
    resumed = analyse_log("j", lines([*steps, "ValueError: bad sample 812, skipped", "[default0]:step 1230 | loss 1.01"]),
                          NOW)
    assert resumed.ended is None and resumed.advanced_since(T0 + timedelta(seconds=90))
    # A failure's numbers never move: torchrun's summary lines of one rank after another.
    exits = [f"failed (exitcode: -9) local_rank: {r} (pid: {4400 + r})" for r in range(4)]
    assert analyse_log("j", lines(exits), NOW).progress_lines == 0
    # Not failures: a tally of trials, a metric named like an exception, an exit code of 0, a retried failure word.
    for fine in ("Trial status: 6 TERMINATED | 4 RUNNING | 1 FAILED", "ReconstructionError: 0.012, step 1200",
                 "process exited with code 0", "download failed, retrying in 5s"):
        assert analyse_log("j", lines([*steps, fine]), NOW).ended is None, fine
    # A failure also finishes a save or load the log announced: nothing is in flight in a dead process.
    saving = analyse_log("j", lines([*steps, "Saving model checkpoint to /mnt/nfs/ckpt/step-1220"]), NOW)
    assert saving.state_io is not None
    assert analyse_log("j", lines([*steps, "Saving model checkpoint to /mnt/nfs/ckpt/step-1220", "Killed"]),
                       NOW).state_io is None


def test_more_clocks_compound_and_chinese_spans_and_the_lines_own_timestamp():
    """Elapsed time is no work in every form it takes: a compound span (Ray's autoscaler "+3m6s"), Chinese units
    ("已运行 3600 秒", "最近 10 分钟"), and a Unix timestamp in a JSON log: a bare number that is the line's own time."""
    ray = [f"(autoscaler +{s // 60}m{s % 60}s) Warning: The following resource request cannot be scheduled right now: "
           "{'GPU': 8.0, 'CPU': 1.0}." for s in range(151, 151 + 35 * 4, 35)]
    assert analyse_log("j", lines(ray, 35), NOW).progress_lines == 0
    ticker = [f"[监控] 已运行 {3600 + 60 * i} 秒，当前步数 1200，GPU 利用率 0%" for i in range(4)]
    assert analyse_log("j", lines(ticker, 60), NOW).progress_lines == 1  # the first report, then only time passes
    warned = [f"警告：最近 {10 * i} 分钟没有完成任何批次（最后完成第 7710 批）" for i in range(1, 4)]
    assert analyse_log("j", lines(warned, 600), NOW).progress_lines == 0
    eta = [f"预计剩余 {13 - i // 2}小时{9 - 7 * (i % 2)}分，已完成 {40 + 5 * i}/625" for i in range(4)]
    assert analyse_log("j", lines(eta, 60), NOW).progress_lines == 4  # the count moves beside the clock
    stamped = [LogLine(at=T0 + timedelta(seconds=60 * i), text=f'{{"timestamp": {T0.timestamp() + 60 * i + 0.53}, '
                       f'"step": 5400, "lr": 0.00018}}') for i in range(4)]
    assert analyse_log("j", stamped, NOW).progress_lines == 1
    millis = [LogLine(at=x.at, text=f'{{"ts_ms": {int(x.at.timestamp() * 1000)}, "step": 5400}}') for x in stamped]
    assert analyse_log("j", millis, NOW).progress_lines == 1
    # A counter is no clock for growing one a second: a step every second, logged every minute, is work; and so is
    # a count as large as a timestamp that is not the line's own time.
    assert analyse_log("j", lines([f"step {1200 + 60 * i} loss 0.81" for i in range(4)], 60), NOW).progress_lines == 4
    tokens = [f"tokens seen {1_500_000_000 + 3_000_000 * i}" for i in range(4)]
    assert analyse_log("j", lines(tokens, 60), NOW).progress_lines == 4


def test_rates_beside_a_count_are_derived_and_a_report_of_zero_rates_is_no_work():
    """A frozen bar's rate decays while its count stands (Rich redraws "450/1000 ... 0.00it/s"): beside an n/N count,
    only the count says whether work moved. Without one, a changing rate is the work (a server at steady load); a
    status line whose rates are all zero reports none, whatever its queue does."""
    frozen = [f"Epoch 3/9 ━━━━━━━━━━ 450/1000 0:{12 + i}:31 • -:--:-- {rate} v_num: 7 train_loss: 0.412"
              for i, rate in enumerate(("0.60it/s", "0.00it/s", "0.00it/s", "0.00it/s"))]
    assert analyse_log("j", lines(frozen, 60), NOW).progress_lines == 1
    slow = [f" 11%|█▏        | {310 + i}/2724 [11:{27 + 2 * i}:45<89:06:16, 132.8{i}s/it]" for i in range(4)]
    assert analyse_log("j", lines(slow, 133), NOW).progress_lines == 4
    steady = [f"INFO 11-02 10:40:{5 * i:02d} metrics.py:351] Avg prompt throughput: {382.6 + 9 * (i % 2):.1f} tokens/s, "
              f"Avg generation throughput: {918.5 - 7 * i:.1f} tokens/s, Running: 8 reqs, Pending: 0 reqs"
              for i in range(4)]
    assert analyse_log("j", lines(steady, 5), NOW).progress_lines == 4
    backlog = [f"INFO 11-02 10:40:{10 * i:02d} metrics.py:351] Avg prompt throughput: 0.0 tokens/s, Avg generation "
               f"throughput: 0.0 tokens/s, Running: 35 reqs, Pending: {115 + 6 * i} reqs" for i in range(4)]
    assert analyse_log("j", lines(backlog, 10), NOW).progress_lines == 0


def test_a_leading_source_tag_is_part_of_the_lines_kind():
    """torchrun --tee prefixes each rank's lines ("[default1]:"): every rank printing the same step in turn is no
    counter that moved from rank 0 to rank 1. Each source's lines are compared with its own."""
    same = [f"[default{r}]:step 1200 | loss 0.8123" for _ in range(3) for r in range(2)]
    assert analyse_log("j", lines(same, 2), NOW).progress_lines == 2  # each rank's first report
    vllm = [f"(Worker_TP{r} pid={1700 + r}) Loading safetensors checkpoint shards: 22/85" for r in range(4)]
    assert analyse_log("j", lines(vllm, 2), NOW).progress_lines == 4  # first sightings only
    moving = same + ["[default0]:step 1210 | loss 0.8101", "[default1]:step 1210 | loss 0.8101"]
    assert analyse_log("j", lines(moving, 2), NOW).progress_lines == 4


def test_a_stall_word_naming_a_field_of_a_progress_report_does_not_veto_it():
    """vLLM's V1 status line names its queue "Waiting: 0 reqs" and a Chinese trainer its data wait "数据等待 0.012 秒":
    fields of reports that show progress besides. A line about waiting still is one."""
    v1 = [f"(APIServer pid=1) INFO 11-02 10:40:{10 * i:02d} [loggers.py:122] Engine 000: Avg prompt throughput: 0.0 "
          f"tokens/s, Avg generation throughput: {623.9 - 20 * i:.1f} tokens/s, Running: 32 reqs, Waiting: 0 reqs"
          for i in range(4)]
    assert analyse_log("j", lines(v1, 10), NOW).progress_lines == 4
    zh = [f"[训练] 第 3 轮 第 {400 + 37 * i}/1250 步 | 损失 0.81{i} | 数据等待 0.01{i} 秒" for i in range(3)]
    assert analyse_log("j", lines(zh), NOW).progress_lines == 3
    for waits in ([f"Attempt {3 + i}/10: connection refused" for i in range(4)],
                  [f"waiting for master ({3 + i}/20)" for i in range(4)],
                  [f"Timeout {30 + i}: Found 0 live models" for i in range(4)]):
        assert analyse_log("j", lines(waits), NOW).progress_lines == 0, waits[0]


def test_sizes_are_scaled_to_bytes_whatever_their_unit():
    """aws s3 cp's "812.0 MiB/61.0 GiB" turns into "2.1 GiB/61.0 GiB": one download counting on, not a new kind of
    line whose count fell from 812 to 2.1."""
    s3 = [f"Completed {done} (45.3 MiB/s) with 1 file(s) remaining"
          for done in ("812.0 MiB/61.0 GiB", "2.1 GiB/61.0 GiB", "3.4 GiB/61.0 GiB")]
    assert analyse_log("j", lines(s3), NOW).progress_lines == 2  # each line after the first
    pull = [f"Copying blob 3c2cba919283 [======>------] {done} / 4.1GiB" for done in ("812.1MiB", "1.3GiB", "1.8GiB")]
    assert analyse_log("j", lines(pull), NOW).progress_lines == 2


def test_a_request_the_job_made_that_failed_is_no_progress():
    """A fine-tune streaming its dataset from the Hub gets 429s for hours (huggingface/datasets#7344): each
    "HTTP Error 429 thrown while requesting GET .../003_00000.parquet" names another shard, so its numbers moved
    and the retry loop read as progress, its GPUs idle and never reported. A failed request moves no work along."""
    url = "https://huggingface.co/datasets/HuggingFaceFW/fineweb/resolve/0f03/sample/10BT/{:03d}_00000.parquet"
    texts = []
    for shard in (3, 7, 11, 15):
        texts += [f"huggingface_hub.utils._http - WARNING - HTTP Error 429 thrown while requesting GET {url.format(shard)}",
                  f"requests.exceptions.HTTPError: 503 Server Error: Service Unavailable for url: {url.format(shard)}"]
    assert lines_progress(texts) == 0
    # The job's own steps after the errors cleared still count.
    assert lines_progress(texts + ["step=120 loss=1.92", "step=121 loss=1.90"]) >= 1


def lines_progress(texts: list[str]) -> int:
    at = datetime(2026, 11, 10, 14, 0, tzinfo=UTC)
    log = [LogLine(at=at - timedelta(minutes=len(texts) - k), text=t) for k, t in enumerate(texts)]
    return analyse_log("nlp/ft", log, at).progress_lines


def test_a_request_the_job_made_is_not_one_it_answered():
    """A trainer logging at DEBUG prints its HTTP client's calls (urllib3: `https://api.wandb.ai:443 "POST /graphql
    HTTP/1.1" 200`): read as requests it answered, it became a service for its life (`served`) and its idle GPUs were
    never stopped (review, eleventh round). The host called, before the method, marks the client's line."""
    at = datetime(2026, 11, 10, 14, 0, tzinfo=UTC)
    client = [LogLine(at=at - timedelta(minutes=m), text='DEBUG:urllib3.connectionpool:https://api.wandb.ai:443 '
                      f'"POST /graphql HTTP/1.1" 200 {m}') for m in (30, 20, 10)]
    assert analyse_log("ml/train", client, at).requests == 0
    server = [LogLine(at=at - timedelta(minutes=m), text=f'INFO: 10.0.7.21:{m} - "POST /v1/embed HTTP/1.1" 200 OK')
              for m in (30, 20, 10)]
    assert analyse_log("ml/embed", server, at).requests == 3


def test_an_engines_stats_line_with_tokens_served_is_a_request_answered():
    """vLLM run with request and access logs off (KServe's templates: kserve#5154) prints only its periodic stats
    line: tokens served there are requests answered. Not with zero throughput (a stuck backlog), not without the
    engine's request count on the line (a training log's throughput serves no one)."""
    from tools.log_progress import request_path

    served = ("INFO 11-05 21:00:00 [loggers.py:118] Engine 000: Avg prompt throughput: 412.3 tokens/s, Avg generation "
              "throughput: 96.4 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 2.1%")
    v0 = ("INFO metrics.py:455] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 12.1 tokens/s, "
          "Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs")
    sglang = "[2026-11-05 10:00:00] Decode batch. #running-req: 2, #token: 1234, gen throughput (token/s): 40.5"
    for text in (served, v0, sglang):
        assert request_path(text) == "engine stats (tokens served)", text
    prefill = "[2026-11-05 10:00:00] Prefill batch. #new-seq: 1, #running-req: 1, input throughput (token/s): 812.3"
    assert request_path(prefill) == "engine stats (tokens served)"
    for text in ("Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 35 reqs",
                 "[2026-11-05 10:00:00] Decode batch. #running-req: 0, #token: 0, gen throughput (token/s): 0.00",
                 "step 100 throughput: 1200 samples/s", "Running: 2 reqs",
                 "rollout step 3: Running: 2 reqs, throughput: 50 samples/s"):  # a trainer's words, not the engine's
        assert request_path(text) is None, text
    assert analyse_log("llm/gw", lines([served, v0]), NOW).requests == 2


def test_a_gpu_monitors_readings_beside_the_job_are_no_progress():
    """A job script's `nvidia-smi --query-gpu=...,power.draw --format=csv -l 60 &` (or its table, or gpustat) keeps
    writing rows whose watts and temperatures move after the training deadlocked: readings of the device, not work."""
    csv_rows = [f"2026/11/05 02:{m:02d}:01.412, {g}, 0 %, 63412 MiB, {60 + (m * 7 + g) % 5}.37 W, {33 + g}"
                for m in range(30) for g in range(4)]
    assert analyse_log("gpu/llama-sft", lines(csv_rows, 15), NOW).progress_lines == 0
    table = [f"| N/A   {34 + i % 3}C    P0    {61 + i % 4}W / 400W |   1234MiB / 81920MiB |      0%      Default |"
             for i in range(20)]
    gpustat = [f"[0] NVIDIA A100-SXM4-80GB | {34 + i % 3}°C,   0 % |  1234 / 81920 MB | {61 + i % 4} W"
               for i in range(20)]
    for rows in (table, gpustat):
        assert analyse_log("j", lines(rows), NOW).progress_lines == 0
    # A job's own report that names its GPU's power still reports work (a reviewer's lines); so does a download.
    for form in ("epoch 3 step {n} loss 0.2 GPU 98% 300W", "训练进度 45%，已完成 {n}/10000，GPU 功耗 300W",
                 "[train] progress 45.0% | {n}/10000 | gpu 98% 350W 72C", "Throughput: {n}.5 img/sec | GPU 98% | 350W",
                 "第 {n} 批推理完成，显存 70000MiB，功耗 300W",
                 "Training: 45%|████| {n}/1000 [00:10<00:05, 8.00s/it, power=350W]"):
        work = [form.format(n=100 + i) for i in range(5)]
        # (a first sighting counts when it looks like a report: "批" is no hint word, so 4 of 5 there)
        assert analyse_log("j", lines(work), NOW).progress_lines >= 4, form
    download = [f"model.safetensors: {40 + i}%| {i + 2}.1G/4.6G [00:10<00:12, 210MB/s]" for i in range(5)]
    assert analyse_log("j", lines(download), NOW).progress_lines == 5


def test_a_retry_counter_in_chinese_is_no_progress():
    """A Slurm array task retrying a rate-limited judge API logged `评测接口限流（HTTP 429），第 N 次尝试，30 秒后再试`: its
    growing attempt counter read as progress, and the task holding its GPU was never reported (a probe)."""
    retries = [f"评测接口限流（HTTP 429），第 {n} 次尝试，30 秒后再试" for n in range(1, 12)]
    assert analyse_log("gpu/qwen-infer-5", lines(retries), NOW).progress_lines == 0
    english = [f"judge API rate limited (HTTP 429), attempt {n}" for n in range(1, 12)]
    assert analyse_log("gpu/qwen-infer-5", lines(english), NOW).progress_lines == 0
