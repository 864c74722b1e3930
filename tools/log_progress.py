"""Read a job's recent log and say whether it still makes progress (counters that move)."""

from __future__ import annotations

import re
from datetime import datetime
from statistics import median

from core.cluster import LogLine
from core.observation import LogProgress
from core.redact import DEFAULT_REDACTOR, Redactor

_MAX_CHARS = 2000  # a pathological megabyte line must not cost more than a normal one
_TAIL = 5
_TAIL_CHARS = 300

# The log's last burst says the job began writing, moving or loading its state (a checkpoint to NFS, weights to object
# storage, a 144 GB model read from a network volume before a server can answer) and no line says it finished:
# mid-operation, which can take hours with nothing in the pod's own counters (an NFS or FUSE client reads and writes
# from the node's kernel or another pod). A notebook server's own save lines are not such an operation, nor a plan
# ("will be saving checkpoints every 1000 steps").
STATE_IO_STARTED = re.compile(
    r"\b(?:saving|writing|uploading|exporting|persisting|flushing|copying|pushing|serializing|consolidating"
    r"|loading|restoring|downloading|fetching|reading)"
    r"\b.{0,80}?\b(?:checkpoints?|ckpts?|model|weights|state[_ ]?dicts?|optimizer|shards?|safetensors|distcp"
    r"|snapshots?)\b|(?:正在|开始)?(?:保存|写入|上传|导出|加载|载入|下载)(?:检查点|模型|权重|快照)"
    # The same operation named noun first, as one in flight: NeMo's "Scheduled async checkpoint save for ...",
    # "Pending async checkpoint saves. Finalizing them synchronously now", Megatron's "Unfinalized async checkpoint
    # saves" (not a setting: "checkpoint save dir: /mnt/ckpt", "Model loads are lazy")
    r"|\b(?:async|asynchronous|pending|scheduled|unfinalized|queued|background)\s+(?:checkpoints?|ckpts?|state[_ ]?dicts?"
    r"|model|weights)\s+(?:saves?|writes?|uploads?|loads?|downloads?)\b"
    # vLLM's last line before it reads the weights, and its newer "Starting to load model"
    r"|\bUsing model weights format\b|\bStarting to load model\b", re.I)
# Finished, failed, or a count at its total (a progress bar's "100%", "30/30").
STATE_IO_FINISHED = re.compile(r"\b(?:saved|written|uploaded|exported|loaded|restored|downloaded|done|finished|completed?"
                       r"|success\w*|took|failed|error|ready)\b|完成|成功|已保存|已加载|失败|就绪"
                       r"|(?<![\d.])100(?:\.0+)?\s?%|(?<![\d/])(\d+)/\1(?![\d/])", re.I)
# A plan or a setting, not an operation under way ("will be saving checkpoints every 1000 steps").
_NOT_UNDER_WAY = re.compile(r"\b(?:will|every|each|interval|enabled?|disabled?)\b|每隔|每\s*\d", re.I)
_NOTEBOOK_SERVER = re.compile(r"NotebookApp|ServerApp|LabApp|\.ipynb", re.I)
# Lines within a minute of the newest are one burst (a library's start-up block: "loading weights file", the model's
# config dump, a warning), at most this many of them (a log without its own times dates every line alike).
STATE_IO_BURST_S = 60.0
STATE_IO_BURST_LINES = 50

# Timestamps move on every line, so they say nothing about progress; tqdm's elapsed/eta too.
_CLOCK = re.compile(
    r"\d{4}[-/]\d{1,2}[-/]\d{1,2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d+)?"
)
# A time span ("15.0m", "250 ms", "3 min"; lower case only: "3.2M samples" is a count). One that grows with the wall
# clock between two lines of the same words, nothing else moving, is elapsed time: a clock, not progress (an upload
# spinner's "0B/928B (15.0m)" read as work for hours). A span that moves otherwise ("Processed chunk in 0.81s",
# "Simulation time: 1.50 h") is judged like any number.
_DURATION = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s?(ms|s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?)(?![\w/])")
_UNIT_S = {"ms": 0.001, "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0, "h": 3600.0,
           "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0}
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_WORD = re.compile(r"[^\W\d_]+")
# Lines about waiting are not progress even when their numbers move ("ran for 600123 ms").
_STALL = re.compile(
    r"\b(?:time[ d-]?out|timed out|watchdog|waiting|retry(?:ing)?|retries|heartbeat|alive|hang(?:ing)?|hung|stuck"
    r"|reconnect(?:ing|ed)?|attempts?|poll(?:ing|ed|s)?|backing off|back-?off|sleeping|sleeps?(?:\s+for)?\s+\d"
    r"|unavailable|unreachable|healthz?|readyz|livez)\b"
    r"|超时|等待|心跳|挂起|卡住|重试|重连|无响应|阻塞|轮询",
    re.I,
)
# A first sighting counts as progress only when it looks like a progress report.
# Words start a word or follow a non-letter (global_step, val_loss), so "slurmstepd" is no "step".
_PROGRESS_HINT = re.compile(
    r"(?<![a-z])(?:step|iter|epoch|loss|shard|batch|samples|tokens)|it/s|s/it|\d+\s*/\s*\d+|\d+(?:\.\d+)?%|损失|轮|步",
    re.I,
)
# A periodic dump of a process's own event counters (Ray's raylet `[state-dump] Global stats: 41523 total`) moves by
# itself, busy or idle: not progress unless it also reports some (a step, a loss). Only that dump's own marker: a
# "stats" or "uptime" line may well count real work ("Throughput stats: 23000 images done").
_SELF_STATS = re.compile(r"(?<![a-z])(?:state[-_ ]?dump|debug[-_ ]?state)(?![a-z])", re.I)
# The scheduler's own lines in a job's output ("slurmstepd: error: *** JOB 22 ON n1 CANCELLED AT ... ***", written
# when the steward's SIGTERM lands) say what happened to the job, never that it progressed.
_SCHEDULER = re.compile(r"^\s*slurmstepd(?:-[\w.-]+)?:|\*\*\* (?:JOB|STEP) [\d.+_]+ ON \S+ ", re.I)
_STEP = re.compile(r"(?:global[_ ]?step|step|iteration|iter)s?\b\s*[:=#]?\s*\[?\s*(\d+(?:\.\d+)?)", re.I)


# An access-log line of a request a service answered: POST (or PUT) to a path, with a status code.
_REQUEST = re.compile(r"\b(POST|PUT)\s+(/[^\s?\"']*)[^\s\"']*(?:\s+HTTP/[\d.]+)?\"?\s+(?:[-:=]\s*)?([1-5]\d\d)\b")
# A server that writes no access log says it answered in its own words: a tracing span of an inference handler
# that ended in Success (text-generation-inference's router: `generate{... total_time="3.4s" ...}: ...: Success`),
# or a request id it finished (vLLM's engine: `Finished request chatcmpl-8f2c`).
_SERVED = re.compile(
    r"\b(generate(?:_stream)?|chat_completions?|completions?|embed\w*|predict|infer\w*|rerank|classify|tokenize)"
    r"\{[^\n]*?\}:[^\n]*\bSuccess\b"
    r"|\b(?:Finished|Completed|Served|Answered)\s+request\s+((?:chat)?cmpl|embd|req|request)[-_]",
    re.I)
# Paths that are not a caller's request: probes, metrics, and a notebook server's own API (the browser tab of an
# open, idle notebook keeps calling it).
_NOT_A_REQUEST = re.compile(
    r"^/(?:health\w*|ready\w*|live\w*|ping|metrics|status|favicon\.ico|api/(?:kernels|sessions|contents|terminals"
    r"|events|workspaces|collaboration|me|nbconvert|kernelspecs|lab|config)|lab|tree|notebooks?|files|static|lsp"
    r"|user/|hub/)", re.I)


def request_path(text: str) -> str | None:
    """What a log line shows a service answering, else None: an access log's method and path (no query string,
    "POST /v1/completions"), or a server's own request line (`_SERVED`: "generate (Success)", "Finished request
    cmpl-…"). Probes, metrics and a notebook server's own API are not requests."""
    answered = _answered(text)
    return answered[0] if answered is not None else None


def _answered(text: str) -> tuple[str, bool] | None:
    """(request_path's answer, whether the server failed it: an access log's HTTP 5xx), else None. A 4xx is the
    server answering (a wrong key, a bad body, too many requests): it works."""
    m = _REQUEST.search(text)
    if m is not None:
        if _NOT_A_REQUEST.match(m.group(2)) or m.group(2) == "/":
            return None
        return f"{m.group(1)} {m.group(2)}", m.group(3)[0] == "5"
    served = _SERVED.search(text)
    if served is None:
        return None
    return (f"{served.group(1)} (Success)" if served.group(1) else f"Finished request {served.group(2)}-…"), False


def _shape(text: str) -> tuple[str, tuple[str, ...]]:
    """(template, numbers): lines with the same words are comparable; their numbers are the counters."""
    text = _CLOCK.sub(" ", text)
    template = " ".join(_WORD.findall(text))
    return template, tuple(_NUMBER.findall(text))


def _elapsed_only(before: tuple[str, datetime], text: str, at: datetime) -> bool:
    """Whether the only numbers that moved since `before` (the previous line of the same words, and when) are time
    spans that grew by about the time between the two lines (half to twice it): elapsed time, not work."""
    old_text, old_at = before
    gap = (at - old_at).total_seconds() if _comparable(at, old_at) else 0.0
    old_spans, new_spans = _DURATION.findall(_CLOCK.sub(" ", old_text)), _DURATION.findall(_CLOCK.sub(" ", text))
    rest = [_NUMBER.findall(_DURATION.sub(" ", _CLOCK.sub(" ", t))) for t in (old_text, text)]
    if rest[0] != rest[1] or len(old_spans) != len(new_spans):
        return False
    seconds = [(sum(float(v) * _UNIT_S.get(u, 1.0) for v, u in spans)) for spans in (old_spans, new_spans)]
    grew = seconds[1] - seconds[0]  # summed, so "0h 59m" -> "1h 0m" is one minute
    if gap <= 0:  # lines without their own times (a Slurm output file, dated by its mtime): growing spans are a clock
        return grew > 0
    return gap / 2 <= grew <= gap * 2


def analyse_log(job_id: str, lines: list[LogLine], now: datetime, redactor: Redactor = DEFAULT_REDACTOR) -> LogProgress:
    """Progress summary of `lines` (oldest first): a line makes progress when its counters changed
    since the previous line of the same shape; repeated identical lines never do.

    The kept tail is the only log text that leaves this function (to the model, the UI, a notification):
    secrets in it are redacted here, once, by pattern."""
    last_seen: dict[str, tuple[tuple[str, ...], str, datetime]] = {}
    progress_at: list[datetime] = []
    last_step: float | None = None
    last_line_at: datetime | None = None
    requests, failed, path = 0, 0, None
    last_progress_i = -1
    for i, line in enumerate(lines):
        at = min(line.at, now) if _comparable(line.at, now) else line.at  # clock skew: never in the future
        last_line_at = at if last_line_at is None else max(last_line_at, at)
        text = line.text[:_MAX_CHARS]
        if (answered := _answered(text)) is not None:
            # A request answered is work, whatever its numbers (its latency is a time span, not a counter); one the
            # server failed (HTTP 5xx) shows a service, but served its caller nothing: no progress.
            requests, path = requests + 1, answered[0]
            if answered[1]:
                failed += 1
            else:
                progress_at.append(at)
                last_progress_i = i
            continue
        template, numbers = _shape(text)
        # An indented line of numbers alone is an item of a printed structure (a model config dump's JSON array:
        # "    128001,"), not a report; a bare number at the margin is one (print(loss.item()) every step). Nor are a
        # notebook server's own lines: its autosaves ("Saving file at /work/Untitled2.ipynb") come from the browser
        # tab, and the kernel's cells never write to the server's log (jupyter/notebook#3932).
        if not numbers or (not template and text[:1].isspace()) or _SCHEDULER.search(text) \
                or _NOTEBOOK_SERVER.search(text):
            continue
        step = _STEP.search(text)
        if step:
            last_step = float(step.group(1))
        previous = last_seen.get(template)
        last_seen[template] = (numbers, text, at)
        if _STALL.search(text) or (_SELF_STATS.search(text) and not _PROGRESS_HINT.search(text)):
            continue
        moved = (bool(_PROGRESS_HINT.search(text)) if previous is None
                 else len(previous[0]) == len(numbers) and previous[0] != numbers
                 and not _elapsed_only(previous[1:], text, at))
        if moved:
            progress_at.append(at)
            last_progress_i = i
    gaps = [(b - a).total_seconds() for a, b in zip(progress_at, progress_at[1:], strict=False)]
    return LogProgress(
        job=job_id,
        lines=len(lines),
        last_line_at=last_line_at,
        progress_lines=len(progress_at),
        first_progress_at=progress_at[0] if progress_at else None,
        last_progress_at=max(progress_at) if progress_at else None,
        typical_gap_s=float(median(gaps)) if gaps else None,
        last_step=last_step,
        requests=requests,
        request_path=redactor.redact(path) if path else None,
        failed_requests=failed,
        tail=[redactor.redact(line.text[:_TAIL_CHARS]) for line in lines[-_TAIL:]],
        state_io=redactor.redact(announced[:_TAIL_CHARS]) if (announced := state_io_announced(
            lines, last_progress_i, last_line_at)) else None,
    )


def state_io_announced(lines: list[LogLine], last_progress_i: int, newest: datetime | None) -> str | None:
    """The line of the log's last burst announcing a write, move or load of the job's state that no later line
    finished, else None. Lines from the newest progress line on (a bar at 17 % of "Loading checkpoint shards" is one;
    progress after an announcement means the job moved on), within STATE_IO_BURST_S of the newest line."""
    start = max(last_progress_i, len(lines) - STATE_IO_BURST_LINES, 0)
    for line in reversed(lines[start:]):
        text = line.text[:_MAX_CHARS]
        if not text.strip():
            continue
        if newest is not None and _comparable(line.at, newest) and (newest - line.at).total_seconds() > STATE_IO_BURST_S:
            return None
        if STATE_IO_FINISHED.search(text):
            return None
        if STATE_IO_STARTED.search(text) and not _NOT_UNDER_WAY.search(text) and not _NOTEBOOK_SERVER.search(text):
            return text
    return None


def _comparable(a: datetime, b: datetime) -> bool:
    return (a.tzinfo is None) == (b.tzinfo is None)
