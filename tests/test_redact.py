"""core.redact: every default pattern scrubs its secret and leaves the rest of the line; ordinary log lines pass."""

from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from core.redact import DEFAULT_PATTERNS, DEFAULT_REDACTOR, Pattern, Redactor

R = DEFAULT_REDACTOR
JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
SA_JWT = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJpc3MiOiJrdWJlcm5ldGVzL3NlcnZpY2VhY2NvdW50In0.c2lnbmF0dXJl"
BOUND_SA_JWT = "eyJhbGciOiJSUzI1NiJ9.eyJhdWQiOlsiaHR0cHM6Ly9rdWJlcm5ldGVzLmRlZmF1bHQuc3ZjIl19.c2ln"
PEM = ("-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nMIIEowIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM\n"
       "c2VjcmV0LWtleS1ib2R5LWxpbmU=\n-----END RSA PRIVATE KEY-----")

# (pattern name, line, secret): the secret must go, "before"/"after" around it must stay.
CASES = [
    ("bearer", "Authorization: Bearer abcDEF123.456-789_xyz", "abcDEF123.456-789_xyz"),
    ("bearer", "curl -H 'bearer tok_9f8e7d6c5b4a'", "tok_9f8e7d6c5b4a"),
    ("aws_access_key_id", "AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("aws_access_key_id", "AWS_ACCESS_KEY_ID=ASIAY34FZKBOKMUTVV7A", "ASIAY34FZKBOKMUTVV7A"),
    ("aws_secret_key", "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
     "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("password", "password=hunter2", "hunter2"),
    ("password", "DB_PASSWORD: 'c0rrect horse'", "c0rrect horse"),
    ("password", '{"passwd": "s3cr3t!"}', "s3cr3t!"),
    ("password", "mysql -u root pwd=Zx9!kk", "Zx9!kk"),
    ("token", "HF_TOKEN=abcdef123456", "abcdef123456"),
    ("token", "https://api/x?access_token=q1w2e3r4&page=2", "q1w2e3r4"),
    ("secret", "client_secret = 'Shh-very-secret'", "Shh-very-secret"),
    ("api_key", "API-Key: 0123456789abcdef", "0123456789abcdef"),
    ("api_key", "apikey=ZZtop99", "ZZtop99"),
    ("key", "encryption_key=deadbeefcafe", "deadbeefcafe"),
    ("jwt", f"cookie session {JWT} set", JWT),
    ("github_token", "remote https://ghp_" + "A1b2" * 9 + " done", "ghp_" + "A1b2" * 9),
    ("github_token", "GITHUB gho_" + "z" * 36, "gho_" + "z" * 36),
    ("github_token", "pat github_pat_11ABCDEFG0_" + "x" * 59, "github_pat_11ABCDEFG0_" + "x" * 59),
    ("openai_key", "OPENAI sk-proj-" + "Ab3" * 16, "sk-proj-" + "Ab3" * 16),
    ("slack_token", "hook xoxb-1234567890-0987654321-AbCdEfGhIjKl", "xoxb-1234567890-0987654321-AbCdEfGhIjKl"),
    ("hf_token", "login hf_" + "aBcD1" * 7 + " ok", "hf_" + "aBcD1" * 7),
    ("url_credentials", "connecting to postgres://admin:s3cr@t@db.internal:5432/ml", "admin:s3cr@t"),
    ("url_credentials", "REDIS_URL redis://:pw9x@cache:6379/0", ":pw9x"),
    ("k8s_sa_token", f"mounted {SA_JWT} from serviceaccount", SA_JWT),
    ("k8s_sa_token", f"projected {BOUND_SA_JWT}", BOUND_SA_JWT),
    ("k8s_sa_token", "data: ZXlKaGJHY2lPaUpTVXpJMU5pSXNJbXRwWkNJNkltRmlZeUo5LmV5SnBjM01pT2lKcmRXSmxjbTVsZEdWeklu",
     "ZXlKaGJHY2lPaUpTVXpJMU5pSXNJbXRwWkNJNkltRmlZeUo5LmV5SnBjM01pT2lKcmRXSmxjbTVsZEdWeklu"),
    ("email", "notify alice.smith+gpu@example.co.uk when done", "alice.smith+gpu@example.co.uk"),
    ("private_key", f"loading key\n{PEM}\nkey loaded", PEM),
]


@pytest.mark.parametrize(("name", "line", "secret"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_pattern_removes_its_secret_and_keeps_the_rest(name, line, secret):
    out, n = R.redact_count(f"before {line} after")
    assert secret not in out
    assert f"[REDACTED:{name}]" in out
    assert out.startswith("before ") and out.endswith(" after")
    assert n >= 1
    assert line.replace(secret, f"[REDACTED:{name}]") in out


def test_every_default_pattern_has_a_case():
    assert {p.name for p in DEFAULT_PATTERNS} <= {c[0] for c in CASES}


def test_key_value_keeps_key_and_quotes():
    assert R.redact("password=hunter2") == "password=[REDACTED:password]"
    assert R.redact('{"password": "abc", "user": "bob"}') == '{"password": "[REDACTED:password]", "user": "bob"}'
    assert R.redact("db_password='x y', next=1") == "db_password='[REDACTED:password]', next=1"
    assert R.redact("postgres://u:p@db:5432/x") == "postgres://[REDACTED:url_credentials]@db:5432/x"


@pytest.mark.parametrize(("line", "expected"), [
    ("密码: hunter2", "密码: [REDACTED:password]"),
    ("密码：hunter2", "密码：[REDACTED:password]"),
    ("用户密码：Abc#123 已设置", "用户密码：[REDACTED:password] 已设置"),
    ("口令=letmein", "口令=[REDACTED:password]"),
    ("访问令牌: tk_123456", "访问令牌: [REDACTED:token]"),
    ("数据库密码 ：  pa55，用户：bob", "数据库密码 ：  [REDACTED:password]，用户：bob"),
])
def test_chinese_password_lines(line, expected):
    assert R.redact(line) == expected


@pytest.mark.parametrize("line", [
    "step 1200 loss 0.31 lr 3e-4 grad_norm 1.02",
    "token_count=512 num_tokens=4096 max_tokens: 2048 tokens_per_sec=15321.4",
    "tokenizer=meta-llama/Llama-3-8B vocab_size=128256 tokens/s=900",
    "pad_token=<pad> eos_token: </s> bos_token='<s>' eos_token_id=2 mask_token=[MASK] unk_token: \"<unk>\"",
    "PWD=/home/alice/run OLDPWD=/tmp monkey=3 KeyError: 'loss' secretName: hf-cred",
    "NCCL INFO Channel 00/02 : 0[1b000] -> 1[1c000] via P2P/IPC",
    "Epoch 3/10: 100%|██████████| 500/500 [01:02<00:00, 8.01it/s]",
    "kind: Secret\nmetadata:\n  name: task-runner-checkpoint-2024-01-01-mask-rcnn",
    "saved checkpoint to s3://bucket/run-7/ckpt-1200.pt",
])
def test_ordinary_log_lines_untouched(line):
    assert R.redact_count(line) == (line, 0)


def test_idempotent_on_known_cases():
    for _, line, _ in CASES:
        once = R.redact(line)
        assert R.redact(once) == once
        assert R.redact_count(once)[1] == 0


@pytest.mark.parametrize("text", [
    "0@0.AA0@0.AA", "a@b.cc.x@y.com", "a@b.com密码：xyz", "ghp_" + "a" * 36 + "_ghp_" + "b" * 36,
    "hf_" + "a" * 31 + "_hf_" + "b" * 31, "xoxb-aaaaaaaaaaaa_xoxb-bbbbbbbbbbbb", "Bearer Bearer x", "password=password=x",
    "gho_00000000000000000PAD_TOKEN=0", "ZXlK" + "0" * 60 + "=ZXlK" + "0" * 60,
])
def test_idempotent_where_one_match_ends_where_another_starts(text):
    once = R.redact(text)
    assert once != text and R.redact(once) == once


def test_secret_inside_a_skipped_match_is_still_found():
    out = R.redact('PASSWORD=" password=00000000 [REDACTED:0]"')
    assert "00000000" not in out and R.redact(out) == out


def test_pem_block_multi_line_and_truncated():
    out = R.redact(f"a\n{PEM}\nb")
    assert out == "a\n[REDACTED:private_key]\nb"
    for kind in ("", "EC ", "OPENSSH ", "ENCRYPTED "):
        block = f"-----BEGIN {kind}PRIVATE KEY-----\nQUJD\nREVG\n-----END {kind}PRIVATE KEY-----"
        assert R.redact(block) == "[REDACTED:private_key]"
    truncated = R.redact("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEF\nQUFB\nerror: read 2 bytes")
    assert "MIIE" not in truncated and truncated.endswith("error: read 2 bytes")


def test_extra_pattern_and_disabled_default():
    r = Redactor(extra=[{"name": "employee_id", "regex": r"EMP-\d{6}"}], disabled=["email"])
    out = r.redact("owner EMP-123456 mail bob@example.com password=x")
    assert out == "owner [REDACTED:employee_id] mail bob@example.com password=[REDACTED:password]"
    assert "email" not in {p.name for p in r.patterns}
    r2 = Redactor(extra=[Pattern("ticket", r"(?i)ticket=(?P<v>\w+)")], disabled=["key", "token"])
    assert r2.redact("ticket=ABC key: nvidia.com/gpu") == "ticket=[REDACTED:ticket] key: nvidia.com/gpu"


def test_invalid_user_regex_names_the_pattern():
    with pytest.raises(ValueError, match="broken_one"):
        Redactor(extra=[{"name": "broken_one", "regex": "(unclosed"}])
    with pytest.raises(ValueError, match="nope"):
        Redactor(disabled=["nope"])
    with pytest.raises(ValueError, match="name"):
        Redactor(extra=[{"name": "has space", "regex": "x"}])
    with pytest.raises(ValueError, match="no_regex"):
        Redactor(extra=[{"name": "no_regex"}])


def test_empty_matching_user_pattern_is_harmless():
    r = Redactor(extra=[{"name": "empty", "regex": "x*"}])
    assert r.redact_count("abc") == ("abc", 0)
    assert r.redact("axxb") == "a[REDACTED:empty]b"


def test_one_megabyte_lines_run():
    """Linear-time shapes: these finish quickly; a backtracking regex would hang here. No timing assertion."""
    mb = 1 << 20
    filler = "step 1200 loss 0.31 token_count=512 password=hunter2 bob@example.com "
    lines = [
        (filler * (mb // len(filler) + 1))[:mb],
        "a" * mb,
        "password=" + " " * mb,
        "x@" * (mb // 2),
        "eyJa." * (mb // 5),
        "a://b:" + "c" * mb,
        "-----BEGIN RSA PRIVATE KEY-----\nQUJD\n" * (mb // 36),
        "-----BEGIN PRIVATE KEY-----" + "-" * mb,
        "key:" * (mb // 4),
        'password="[REDACTED:x]" ' * (mb // 24),
        "token=" + "[REDACTED:x]" * (mb // 12),
    ]
    for line in lines:
        out = R.redact(line)
        assert isinstance(out, str)
    assert R.redact(lines[0]).count("[REDACTED:password]") == lines[0].count("password=hunter2")


FRAGMENTS = [
    "password", "passwd", "token", "pad_token", "hf_token", "api_key", "secret", "key", "aws_secret_access_key",
    "=", ":", "：", " ", "\n", "\t", '"', "'", ",", ";", "&", "@", "/", "://", "-", "_", ".", "密码", "令牌",
    "Bearer ", "https://", "u:p@", "alice@example.com", "AKIAIOSFODNN7EXAMPLE", "ghp_" + "a" * 36,
    "sk-" + "b" * 24, "xoxb-123456789012", "hf_" + "c" * 34, JWT, SA_JWT, "ZXlK" + "d" * 64, "eyJ",
    "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----", "-----", "[REDACTED:x]", "[", "]",
    "PWD=/home", "token_count=5", "0", "A", "pad_", "+", "==", "|",
]
log_text = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=6), max_size=25).map("".join)
DENSE = "aAcoeyJZXlK019_-+.=@:/\"' \n\t[]&;,passwordtkenybhfgxs密码：令"  # the characters the patterns turn on
any_text = st.text() | log_text | st.text(DENSE, max_size=60)
SECRET_CHARS = string.ascii_letters + string.digits + "!#$%^*()_+-=/.:~@?<>|{}"
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(any_text)
def test_redact_is_idempotent(text):
    once = R.redact(text)
    assert R.redact(once) == once


@SETTINGS
@given(prefix=any_text, secret=st.text(SECRET_CHARS, min_size=8, max_size=40), suffix=any_text,
       sep=st.sampled_from([" ", "\n", "\t", " \n"]), key=st.sampled_from(["password", "PASSWORD", "db_password"]))
def test_embedded_password_never_survives(prefix, secret, suffix, sep, key):
    assume(secret not in prefix and secret not in suffix)
    assume(not any(secret in f"{key} REDACTED:{p.name}" for p in DEFAULT_PATTERNS))  # e.g. secret == "password"
    out = R.redact(f"{prefix}{sep}{key}={secret}{sep}{suffix}")
    assert secret not in out
