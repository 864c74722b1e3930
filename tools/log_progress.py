"""Read a job's recent log and say whether it still makes progress (counters that move) or ended in a failure."""

from __future__ import annotations

import re
from dataclasses import dataclass
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

# -- What a line's numbers are ----------------------------------------------------------------------------------
# Dates and times of day move on every line, so they say nothing about progress; tqdm's elapsed/eta too.
_CLOCK = re.compile(
    r"\d{4}[-/]\d{1,2}[-/]\d{1,2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d+)?"
)
_NUM = r"\d+(?:\.\d+)?"
# A time span, one part or several ("250 ms", "3 min", "15.0m", "3m6s", "1hr 2min 3s", "13小时9分", "3600 秒"); Latin
# units in lower case only: "3.2M samples" is a count.
_SPAN_UNIT = (r"(?:ms|secs?|seconds?|s|mins?|minutes?|m|hrs?|hours?|h|days?)(?![A-Za-z_/])"
              r"|(?:毫秒|秒钟?|分钟|小时|天)(?!/)|分(?![\u4e00-\u9fff/])")
_SPAN_PART = re.compile(rf"({_NUM})\s?({_SPAN_UNIT})")
_UNIT_S = {"ms": 0.001, "毫秒": 0.001, "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
           "分钟": 60.0, "分": 60.0, "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
           "小时": 3600.0, "day": 86400.0, "days": 86400.0, "天": 86400.0}  # anything else: seconds
# A rate: time per item ("132.88s/it", "41ms/step", "3.2 秒/条") or items per second ("3.38it/s", "45.1MB/s").
_RATE = (rf"(?<![\w.])[-+]?{_NUM}\s?(?:ms|s|sec|秒)/[^\W\d_]+"
         rf"|(?<![\w.])[-+]?{_NUM}\s?[^\W\d_]{{0,12}}/(?:s|sec|second|秒)(?![A-Za-z])")
# A size ("812.0 MiB", "3.6G", "32768K", "928B"), scaled to bytes: a download whose unit turns from MiB to GiB counts on.
_SIZE = rf"(?<![\w.])[-+]?{_NUM}\s?(?:[kKMGTP]i?B?|B)(?![A-Za-z])"
_SIZE_POWER = {"k": 1, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}
# A number; a sign only where no word precedes it ("loss -0.5"), so "part-00117" and "model-00002-of-00004" count up.
_NUMBER = r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
_SPAN = rf"(?<![\w.])[-+]?{_NUM}\s?(?:{_SPAN_UNIT})(?:\s?{_NUM}\s?(?:{_SPAN_UNIT}))*"
# Each number of a line with its role, the first that fits: a rate, a span, a size, or a number.
_TOKEN = re.compile(rf"(?P<rate>{_RATE})|(?P<span>{_SPAN})|(?P<size>{_SIZE})|(?P<number>{_NUMBER})")
_FIRST_NUMBER = re.compile(_NUM)
# An n/N count ("450/1000", "1.2 GiB/ 61.0 GiB", "iteration 1210/ 50000"): the line's own measure of its progress.
_POSITION = re.compile(rf"(?<![\w.]){_NUM}\s?(?:[kKMGTP]i?B?|B)?\s*/\s*{_NUM}")
# The source a line comes from, named in a leading tag: torchrun's "[default3]:", "[rank3]:", vLLM's
# "(Worker_TP0 pid=1700)", SGLang's "[2026-11-02 10:46:39 TP0]". Ranks print the same step in turn: each source's
# lines are compared with its own, never rank 0's step with rank 1's.
_TAG = r"(?:\s*(?:\[[^\]]*\]|\([^)]*\))\s*:?)"
_LEADING_TAGS = re.compile(rf"^{_TAG}+")
_SOURCE = re.compile(r"(?<![a-z])(?:rank|default|worker|tp|pp|dp|node|pid|gpu|device|proc|replica)[\s=_:#-]{0,2}\d+"
                     r"|(?:进程|节点|卡)\s*\d+", re.I)
# A bare number within a day of the line's own time in Unix seconds or milliseconds is its timestamp.
_TIMESTAMP_SLACK_S = 86400.0
_WORD = re.compile(r"[^\W\d_]+")

# -- Which lines report work ----------------------------------------------------------------------------------------
# Lines about waiting are not progress even when their numbers move ("ran for 600123 ms").
_STALL = re.compile(
    r"\b(?:time[ d-]?out|timed out|watchdog|waiting|retry(?:ing)?|retries|heartbeat|alive|hang(?:ing)?|hung|stuck"
    r"|reconnect(?:ing|ed)?|attempts?|poll(?:ing|ed|s)?|backing off|back-?off|sleeping|sleeps?(?:\s+for)?\s+\d"
    r"|unavailable|unreachable|healthz?|readyz|livez)\b"
    # A request the job made that failed, in a client's words (huggingface_hub's "HTTP Error 429 thrown while
    # requesting GET .../003_00000.parquet", requests' "503 Server Error: ... for url"): the next one's new URL moves
    # no work along. A server's access line answering 4xx stays a request it answered.
    r"|\bHTTP\s*(?:Error\s*)?[45]\d\d\b|\b[45]\d\d\s+(?:Client|Server)\s+Error\b"
    r"|超时|等待|心跳|挂起|卡住|重试|重连|无响应|阻塞|轮询|请求失败|尝试|再试|限流",
    re.I,
)
# A stall word followed by a number ("Waiting: 0 reqs", "数据等待 0.012 秒"): perhaps a field of a report (_waits).
_FIELD_VALUE = re.compile(r"\s*[:=：]?\s*[-+]?\d+(?:\.\d+)?(?:\s*/\s*\d+)?\s*%?")
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
# when the steward's SIGTERM lands; srun's "srun: Terminating StepId=771204.0 is NOT done") say what happened to the
# job, never that it progressed.
_SCHEDULER = re.compile(r"^\s*(?:slurmstepd(?:-[\w.-]+)?|srun):|\*\*\* (?:JOB|STEP) [\d.+_]+ ON \S+ ", re.I)
# A GPU monitor's reading run beside the job, in the three forms the tools print: a row of
# `nvidia-smi --query-gpu=...,power.draw --format=csv[,noheader] -l 60` (comma-separated readings only, one in watts),
# a row of nvidia-smi's table (power as "61W / 400W"), a gpustat line ("[0] NVIDIA A100 | 34°C,  0 % | ..."). Their
# numbers move every row, busy or hung: telemetry about the GPU, never the job's progress. Only these forms: a job's
# own line that names its GPU's power beside its progress ("进度 45%，4500/10000，功耗 300W") is read as any other.
_CSV_FIELD = re.compile(r"\s*(?:\d{4}/\d\d/\d\d \d\d:\d\d:\d\d(?:\.\d+)?|[-+]?\d+(?:\.\d+)?\s?(?:%|MiB|W|C|MHz)?"
                        r"|NVIDIA[\w .-]*|[0-9A-Fa-f]{4,8}:[0-9A-Fa-f:.]+|GPU-[0-9a-f-]+|\[?N/A\]?|P\d{1,2})\s*")
_CSV_WATTS = re.compile(r"(?:^|,)\s*\d+(?:\.\d+)?\s?W\s*(?:,|$)")
_SMI_TABLE = re.compile(r"\|\s*(?:N/A|\d+%)\s+\d+C\s+P\d{1,2}\s+(?:\d+W|N/A)\s*/\s*(?:\d+W|N/A)\s*\|")
_GPUSTAT = re.compile(r"^\s*\[\d+\]\s[^|]+\|\s*\d+°?C,\s*\d+\s?%\s*\|")


def _gpu_telemetry(text: str) -> bool:
    if _SMI_TABLE.search(text) or _GPUSTAT.search(text):
        return True
    fields = text.split(",")
    return len(fields) >= 3 and bool(_CSV_WATTS.search(text)) and all(_CSV_FIELD.fullmatch(f) for f in fields)


_STEP = re.compile(r"(?:global[_ ]?step|step|iteration|iter)s?\b\s*[:=#]?\s*\[?\s*(\d+(?:\.\d+)?)", re.I)

# -- A failure: an exception, or the process ended -----------------------------------------------------------------
# A line saying the job failed: never progress itself, whatever its numbers ("exitcode: -9 (pid: 4412)"). An
# exception may have been caught and logged (a background upload's 504 traceback beside work that goes on), so only a
# line saying the process died (_DIED) ends the progress before it: a crashed job's last steps are no sign it still
# works, a logged exception is.
_EXCEPTION = re.compile(
    # The exception that ends a Python traceback, at the line's start after any source tags
    # ("[default3]:torch.OutOfMemoryError: CUDA out of memory", "Exception: Current loss scale already at minimum");
    # not a metric named like one ("ReconstructionError: 0.012, step 1200")
    rf"^{_TAG}*\s*(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception)|Exception)"
    r"(?::(?!\s*[-+]?\d[\d.eE+-]*\s*(?:[,|;]|$))|$)"
    r"|Traceback \(most recent call last\)")
_DIED = re.compile(
    r"Fatal Python error|terminate called after throwing"
    # A signal death as the shell reports it, alone or after bash's "line 12: 4412" (zh_CN: "行 12: 4412 已杀死")
    r"|(?:^\s*|\bline \d+:\s+\d+\s+|行\s*\d+[:：]\s*\d+\s+)"
    r"(?:Killed|Aborted|Segmentation fault|Bus error|Terminated|已杀死|段错误|总线错误|已终止|已放弃)\b"
    r"|core dumped|核心已转储"
    # A non-zero exit ("exited with code 1", "exitcode: -9", "exit status 137", "退出码 2"), a run aborted (zh)
    r"|\bexit(?:ed)?(?:\s+with)?\s+(?:code|status)\s*[:=]?\s*-?[1-9]|\bexitcode\s*[:=]?\s*-?[1-9]"
    r"|退出码\s*[:：=]?\s*-?[1-9]|(?:训练|任务|程序|作业)已?(?:中止|终止)")
# A scheduler's or launcher's verdict in capitals ("*** JOB 22 ON n1 CANCELLED AT", "train.py FAILED"), not a tally of
# trials or tasks ("Trials: 3 RUNNING | 1 FAILED", "FAILED: 0").
_VERDICT = re.compile(r"\b(?:CANCELLED|FAILED)\b(?!\s*[:=]?\s*\d)")
_TALLY = re.compile(r"(?<![\w.-])\d+\s+(?:CANCELLED|FAILED)\b")
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)")


# A launcher's own verdict on one rank (tools' exact wording; core.observation.LogProgress.rank_died).
_RANK_DIED = re.compile(
    r"^\s*srun: error: \S+: tasks? [\d,-]+: (?:Exited with exit code [1-9]\d*|Killed|Segmentation fault|Aborted|"
    r"Bus error|Terminated)"
    r"|\bfailed \(exitcode: -?[1-9]\d*\) local_rank: \d+"
    r"|\bmpirun noticed that process rank \d+ with PID \d+ on node \S+ exited on signal \d+")


def _died(text: str) -> bool:
    """The job's process died: a fatal error, a signal, a non-zero exit, the scheduler's or launcher's verdict."""
    return bool(_DIED.search(text) or (_VERDICT.search(text) and not _TALLY.search(text)))


def _failed(text: str) -> bool:
    return bool(_EXCEPTION.search(text)) or _died(text)


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
# An inference engine's periodic stats line, printed with request and access logs off, that shows tokens served:
# vLLM's `Avg prompt throughput: 412.3 tokens/s, ... Running: 3 reqs` (vllm#21422), SGLang's `Decode batch.
# #running-req: 2, ... gen throughput (token/s): 40.5`. Only with the engine's request count on the line (a training
# log's "throughput: 1200 samples/s" serves no one), and only a non-zero throughput: requests running with none
# (a stuck backlog) are no work.
_ENGINE_STATS = re.compile(r"\bAvg (?:prompt|generation) throughput:[^\n]*\bRunning:\s*\d+\s+reqs?\b"
                           r"|\b(?:Decode|Prefill) batch\b[^\n]*#running-req:\s*\d")
_ENGINE_SERVING = re.compile(r"\bthroughput(?:\s*\([^)]*\))?:\s*0*(?:[1-9]|\.0*[1-9])", re.I)
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


# A request the job made, as its HTTP client logs it (urllib3's `https://api.wandb.ai:443 "POST /graphql HTTP/1.1"
# 200`): the host it called before the method. A server's access log names no host there.
_CLIENT_CALL = re.compile(r"https?://\S+\s+\"?$|\burllib3\b|\bconnectionpool\b|\bhttpx\b", re.I)


# Go's Gin access log, which Ollama writes: the status before the method (`[GIN] 2026/11/02 - 11:00:00 | 200 |  3.2s |
# 10.244.5.7 | POST     "/api/chat"`).
_GIN = re.compile(r"\[GIN\][^|]*\|\s*([1-5]\d\d)\s*\|[^|]*\|[^|]*\|\s*(POST|PUT)\s+\"(/[^\"?\s]*)")
# A server's own words for a request it finished, where it writes no access log: ComfyUI's `Prompt executed in 3.41
# seconds` (one per queued prompt), a Chinese service's `识别完成 请求ID=9fa2 ... 耗时=1.2秒` (a request id and its time).
_SERVED_OWN = re.compile(r"\bPrompt executed in [\d.]+ seconds\b|请求\s*(?:ID|id|编号)\s*[=:：]\s*\S+[^\n]*(?:耗时|用时)")
# A probe or a monitor's read of a server (the kubelet's GET /health, Ollama's chart probing GET "/", a Prometheus
# scrape): answered every few seconds, its latency and client port changing, busy or idle. Never progress.
_PROBE = re.compile(r"\b(?:GET|HEAD)\s+\"?/(?:health\w*|ready\w*|live\w*|ping|metrics|status|favicon\.ico)?(?=[\s\"?]|$)")


def _answered(text: str) -> tuple[str, bool] | None:
    """(request_path's answer, whether the server failed it: an access log's HTTP 5xx), else None. A 4xx is the
    server answering (a wrong key, a bad body, too many requests): it works."""
    m = _REQUEST.search(text)
    if m is not None:
        if _NOT_A_REQUEST.match(m.group(2)) or m.group(2) == "/" or _CLIENT_CALL.search(text[:m.start()]):
            return None
        return f"{m.group(1)} {m.group(2)}", m.group(3)[0] == "5"
    gin = _GIN.search(text)
    if gin is not None:
        if _NOT_A_REQUEST.match(gin.group(3)) or gin.group(3) == "/":
            return None
        return f"{gin.group(2)} {gin.group(3)}", gin.group(1)[0] == "5"
    if (own := _SERVED_OWN.search(text)) is not None:
        return ("Prompt executed (ComfyUI)" if own.group(0).startswith("Prompt") else "请求完成（请求ID、耗时）"), False
    served = _SERVED.search(text)
    if served is None:
        if _ENGINE_STATS.search(text) and _ENGINE_SERVING.search(text):
            return "engine stats (tokens served)", False
        return None
    return (f"{served.group(1)} (Success)" if served.group(1) else f"Finished request {served.group(2)}-…"), False


@dataclass(frozen=True)
class _Shape:
    """A line's kind and numbers: lines of one kind are comparable, and their numbers are the counters."""

    kind: str  # the source it names in a leading tag, then its words (dates, times and units left out)
    values: tuple[float, ...]  # spans in seconds, sizes in bytes
    roles: tuple[str, ...]  # per value: "span", "rate", "size" or "number"
    position: bool  # the line holds an n/N count

    @property
    def idle(self) -> bool:
        """A status line whose rates are all zero ("0.0 tokens/s", "0.00it/s") reports that no work is done."""
        rates = [v for v, role in zip(self.values, self.roles, strict=True) if role == "rate"]
        return bool(rates) and not any(rates)


def _shape(text: str, at: datetime) -> _Shape:
    text = _CLOCK.sub(" ", text)
    source = ""
    if text.lstrip()[:1] in ("[", "(") and (tags := _LEADING_TAGS.match(text)) and _SOURCE.search(tags.group(0)):
        source = " ".join("".join(s.split()) for s in _SOURCE.findall(tags.group(0)))
        text = _SOURCE.sub(" ", tags.group(0)) + text[tags.end():]
    values: list[float] = []
    roles: list[str] = []
    words: list[str] = []  # the text between the numbers
    unrated: list[str] = []  # the text without its rates, where an n/N count is looked for
    end = 0
    for m in _TOKEN.finditer(text):
        role, token = m.lastgroup or "number", m.group(0)
        words.append(text[end:m.start()])
        unrated.append(text[end:m.start()] + (" " if role == "rate" else token))
        end = m.end()
        if role == "span":
            value = sum(float(n) * _UNIT_S.get(u, 1.0) for n, u in _SPAN_PART.findall(token))
        elif role == "number":
            value = float(token)
            if value > 1e8 and _tells_the_time(value, at):
                continue
        else:  # a rate, or a size scaled by its unit's first letter
            number = _FIRST_NUMBER.search(token)
            value = float(number.group(0)) if number else 0.0
            if role == "size" and number:
                value *= 1024.0 ** _SIZE_POWER.get(token[number.end():].strip()[:1], 0)
        values.append(value)
        roles.append(role)
    kind = " ".join([source, *_WORD.findall(" ".join([*words, text[end:]]))]).strip()
    position = "/" in text and bool(_POSITION.search("".join([*unrated, text[end:]])))
    return _Shape(kind, tuple(values), tuple(roles), position)


def _tells_the_time(value: float, at: datetime) -> bool:
    """Whether a bare number is the line's own time as a Unix timestamp, in seconds or milliseconds."""
    now = at.timestamp()
    return abs(value - now) <= _TIMESTAMP_SLACK_S or abs(value / 1000.0 - now) <= _TIMESTAMP_SLACK_S


def _moved(before: tuple[_Shape, datetime], shape: _Shape, at: datetime) -> bool:
    """Whether a counter moved since `before` (the previous line of the same kind, and when it came). Not a clock:
    time spans that together grew by about the time between the two lines (half to twice it; any growth where the
    lines have no times of their own, a Slurm file dated by its mtime). Not a rate beside an n/N count: the count
    says whether the work moved (a frozen bar's "0.60it/s" then "0.00it/s" is the same 450/1000). Lines whose
    numbers differ in count or role are no counter that moved ("port 22" on 0.0.0.0, then on ::)."""
    old, old_at = before
    if old.roles != shape.roles or old.values == shape.values:
        return False
    changed = {k for k, (a, b) in enumerate(zip(old.values, shape.values, strict=True)) if a != b}
    spans = {k for k, role in enumerate(shape.roles) if role == "span"}
    if changed & spans:
        gap = (at - old_at).total_seconds() if _comparable(at, old_at) else 0.0
        grew = sum(shape.values[k] for k in spans) - sum(old.values[k] for k in spans)  # "0h 59m" -> "1h 0m": 60 s
        if (gap / 2 <= grew <= gap * 2) if gap > 0 else grew > 0:
            changed -= spans
    if shape.position:
        changed -= {k for k, role in enumerate(shape.roles) if role == "rate"}
    return bool(changed)


def _waits(text: str) -> bool:
    """Whether a line is about waiting (a stall word). Not where each stall word names a field of a report that shows
    progress besides: vLLM's "Running: 32 reqs, Waiting: 0 reqs" beside its tokens/s, "数据等待 0.012 秒" beside the
    step and the loss."""
    rest, end = [], 0  # the text besides the fields
    for m in _STALL.finditer(text):
        if (field := _FIELD_VALUE.match(text, m.end())) is None:
            return True
        rest.append(text[end:m.start()])
        end = field.end()
    return bool(rest) and not _PROGRESS_HINT.search(" ".join([*rest, text[end:]]))


def analyse_log(job_id: str, lines: list[LogLine], now: datetime, redactor: Redactor = DEFAULT_REDACTOR) -> LogProgress:
    """Progress summary of `lines` (oldest first): a line makes progress when a counter in it moved since the previous
    line of its kind; repeated identical lines never do. A failure line after the newest progress line ends it.

    The kept tail is the only log text that leaves this function (to the model, the UI, a notification):
    secrets in it are redacted here, once, by pattern."""
    last_seen: dict[str, tuple[_Shape, datetime]] = {}
    progress_at: list[datetime] = []
    last_step: float | None = None
    last_line_at: datetime | None = None
    requests, failed, path = 0, 0, None
    last_progress_i = -1
    ended: str | None = None  # the line saying the process died after the newest progress line
    rank_died: str | None = None  # a launcher's verdict on one rank after the newest progress line
    raised: str | None = None  # the exception logged since the newest progress line, which names a death best
    for i, line in enumerate(lines):
        at = min(line.at, now) if _comparable(line.at, now) else line.at  # clock skew: never in the future
        last_line_at = at if last_line_at is None else max(last_line_at, at)
        text = line.text[:_MAX_CHARS]
        if _failed(text):
            if _RANK_DIED.search(text):
                rank_died = rank_died or text
            if _died(text):
                ended = ended or raised or text
            elif raised is None or _TRACEBACK.search(raised):  # the exception names it better than its header
                raised = text
            continue
        if (answered := _answered(text)) is not None:
            # A request answered is work, whatever its numbers (its latency is a time span, not a counter); one the
            # server failed (HTTP 5xx) shows a service, but served its caller nothing: no progress.
            requests, path = requests + 1, answered[0]
            if answered[1]:
                failed += 1
            else:
                progress_at.append(at)
                last_progress_i, ended, raised, rank_died = i, None, None, None
            continue
        if _PROBE.search(text):
            continue
        shape = _shape(text, at)
        # An indented line of numbers alone is an item of a printed structure (a model config dump's JSON array:
        # "    128001,"), not a report; a bare number at the margin is one (print(loss.item()) every step). Nor are a
        # notebook server's own lines: its autosaves ("Saving file at /work/Untitled2.ipynb") come from the browser
        # tab, and the kernel's cells never write to the server's log (jupyter/notebook#3932).
        if not shape.values or (text[:1].isspace() and not _WORD.search(text)) or _SCHEDULER.search(text) \
                or _NOTEBOOK_SERVER.search(text) or _gpu_telemetry(text):
            continue
        if step := _STEP.search(text):
            last_step = float(step.group(1))
        previous = last_seen.get(shape.kind)
        last_seen[shape.kind] = (shape, at)
        if _waits(text) or shape.idle or (_SELF_STATS.search(text) and not _PROGRESS_HINT.search(text)):
            continue
        if _PROGRESS_HINT.search(text) if previous is None else _moved(previous, shape, at):
            progress_at.append(at)
            last_progress_i, ended, raised, rank_died = i, None, None, None
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
        ended=redactor.redact(ended[:_TAIL_CHARS]) if ended else None,
        rank_died=redactor.redact(rank_died[:_TAIL_CHARS]) if rank_died else None,
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
        if STATE_IO_FINISHED.search(text) or _failed(text):
            return None
        if STATE_IO_STARTED.search(text) and not _NOT_UNDER_WAY.search(text) and not _NOTEBOOK_SERVER.search(text):
            return text
    return None


def _comparable(a: datetime, b: datetime) -> bool:
    return (a.tzinfo is None) == (b.tzinfo is None)
