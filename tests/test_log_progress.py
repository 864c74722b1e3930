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
    # A word that merely contains a progress word is no hint; one that starts or follows a non-letter is.
    assert analyse_log("j", lines(["upstepdown 5"]), NOW).progress_lines == 0
    assert analyse_log("j", lines(["global_step 5"]), NOW).progress_lines == 1


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
