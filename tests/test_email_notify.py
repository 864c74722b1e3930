"""EmailNotifier against a real SMTP server (aiosmtpd) on loopback: delivery, refusals, outages, TLS, addresses."""

from __future__ import annotations

import email
import ipaddress
import socket
import ssl
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from email.policy import default as default_policy

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult

from tests.conftest import free_port
from tools.email_notify import (
    AddressBook,
    AddressBookError,
    EmailNotifier,
    email_notifier_from_env,
    load_directory,
    valid_address,
)
from tools.protocols import Notifier

SENDER = "steward@example.org"


class Mailbox:
    """aiosmtpd handler that keeps every envelope; users in `unknown` are refused at RCPT."""

    def __init__(self, unknown: tuple[str, ...] = ()) -> None:
        self.envelopes: list = []
        self.unknown = unknown

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address in self.unknown:
            return "550 no such user"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        self.envelopes.append(envelope)
        return "250 Message accepted for delivery"

    def messages(self) -> list[EmailMessage]:
        return [email.message_from_bytes(e.content, policy=default_policy) for e in self.envelopes]


@contextmanager
def smtp_server(handler: Mailbox, **smtp_params):
    controller = Controller(handler, hostname="127.0.0.1", port=free_port(), **smtp_params)
    controller.start()
    try:
        yield controller.port
    finally:
        controller.stop()


@pytest.fixture
def mailbox():
    box = Mailbox(unknown=("ghost@example.org",))
    with smtp_server(box) as port:
        yield box, port


def notifier(port: int, **kw) -> EmailNotifier:
    kw.setdefault("addresses", AddressBook(template="{user}@example.org"))
    return EmailNotifier("127.0.0.1", SENDER, port=port, timeout_s=kw.pop("timeout_s", 2.0), **kw)


def test_delivered_message_arrives_with_utf8_subject_and_body(mailbox):
    box, port = mailbox
    n = notifier(port)
    assert isinstance(n, Notifier)
    subject, body = "GPU Steward: 显卡闲置警告", "你好 alice,\n你的作业 train-1 占用 4 块 GPU 但利用率为 0%。\n"
    result = n.notify("alice", subject, body, job_id="gpu/train-1")
    assert (result.status, result.channel, result.recipient) == ("sent", "email", "alice")
    [envelope], [msg] = box.envelopes, box.messages()
    assert envelope.mail_from == SENDER and envelope.rcpt_tos == ["alice@example.org"]
    assert msg["To"] == "alice@example.org" and msg["From"] == SENDER
    assert msg["Subject"] == subject
    assert msg.get_content().replace("\r\n", "\n") == body  # text is sent in canonical CRLF form (RFC 2045)
    assert msg["Message-ID"] == result.message_id and result.message_id.endswith("@example.org>")
    assert msg["X-Steward-Job"] == "gpu/train-1"
    assert envelope.content.isascii()  # 7-bit on the wire: RFC 2047 subject, encoded body


def test_refused_recipient_is_an_error_with_the_server_reply(mailbox):
    box, port = mailbox
    result = notifier(port).notify("ghost", "hi", "body")
    assert result.status == "error" and result.channel == "email"
    assert "550" in result.detail and "no such user" in result.detail and "ghost@example.org" in result.detail
    assert box.envelopes == []


def test_server_down_fails_fast():
    port = free_port()  # nothing listens there
    result = notifier(port, timeout_s=0.5).notify("alice", "hi", "body")
    assert result.status == "error" and "connection refused" in result.detail


def test_silent_server_times_out():
    with socket.socket() as listener:  # accepts the TCP connection (backlog) but never sends a greeting
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        result = notifier(listener.getsockname()[1], timeout_s=0.5).notify("alice", "hi", "body")
    assert result.status == "error" and "timed out after 0.5s" in result.detail


def test_unknown_user_is_an_error_and_nothing_is_sent(mailbox):
    box, port = mailbox
    result = notifier(port, addresses=AddressBook({"alice": "alice@lab.example.org"})).notify("bob", "hi", "body")
    assert result.status == "error" and "no e-mail address known for user 'bob'" in result.detail
    assert box.envelopes == []


@pytest.mark.parametrize("recipient", ["alice@example.org\r\nBcc: evil@example.org", "alice\nBcc: evil@example.org",
                                       "alice@example.org, evil@example.org", "alice evil@example.org"])
def test_header_injection_in_recipient_is_refused(mailbox, recipient):
    box, port = mailbox
    result = notifier(port).notify(recipient, "hi", "body")
    assert result.status == "error" and "no e-mail address" in result.detail
    assert box.envelopes == []


def test_header_injection_in_subject_creates_no_header(mailbox):
    box, port = mailbox
    result = notifier(port).notify("alice", "idle GPUs\r\nBcc: evil@example.org\nX-Evil: 1", "body\r\nBcc: x@y.org\n",
                                   job_id="gpu/a\r\nX-Evil: 2")
    assert result.status == "sent"
    [envelope], [msg] = box.envelopes, box.messages()
    assert envelope.rcpt_tos == ["alice@example.org"]
    assert msg["Bcc"] is None and msg["X-Evil"] is None
    assert msg["Subject"] == "idle GPUs Bcc: evil@example.org X-Evil: 1"
    headers = envelope.content.split(b"\r\n\r\n", 1)[0]
    assert not any(line.startswith((b"Bcc", b"X-Evil")) for line in headers.split(b"\r\n"))


def _tls_contexts(tmp_path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A self-signed certificate for 127.0.0.1: (server context, client context that trusts it)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_file, key_file)
    return server, ssl.create_default_context(cafile=str(cert_file))


@pytest.mark.parametrize("security", ["starttls", "ssl"])
def test_tls_and_login(tmp_path, security):
    server_ctx, client_ctx = _tls_contexts(tmp_path)
    logins: list[tuple[bytes, bytes]] = []

    def authenticator(server, session, envelope, mechanism, auth_data):
        logins.append((auth_data.login, auth_data.password))
        return AuthResult(success=auth_data.password == b"s3cret", handled=False)  # handled=False: reply 535

    box = Mailbox()
    # aiosmtpd counts only STARTTLS as TLS for AUTH; on implicit TLS the whole session is encrypted anyway
    params = ({"tls_context": server_ctx, "require_starttls": True, "auth_require_tls": True}
              if security == "starttls" else {"ssl_context": server_ctx, "auth_require_tls": False})
    with smtp_server(box, authenticator=authenticator, **params) as port:
        good = notifier(port, security=security, ssl_context=client_ctx, username="steward", password="s3cret")
        assert good.notify("alice", "hi", "body").status == "sent"
        bad = notifier(port, security=security, ssl_context=client_ctx, username="steward", password="wrong")
        failed = bad.notify("alice", "hi", "body")
        untrusting = notifier(port, security=security).notify("alice", "hi", "body")  # system CAs only
    assert failed.status == "error" and "535" in failed.detail
    assert untrusting.status == "error" and "CERTIFICATE_VERIFY_FAILED" in untrusting.detail
    assert logins[0] == (b"steward", b"s3cret") and set(logins[1:]) == {(b"steward", b"wrong")}  # smtplib tries 2 mechs
    assert len(box.envelopes) == 1


def test_address_book_resolution_order(tmp_path):
    directory = tmp_path / "users.yaml"
    directory.write_text("alice: alice.smith@lab.example.org\n'1001': ops@example.org\n", encoding="utf-8")
    book = AddressBook.from_file(directory, template="{user}@example.org")
    assert book.resolve("alice") == "alice.smith@lab.example.org"  # the directory wins over the template
    assert book.resolve("1001") == "ops@example.org"
    assert book.resolve("bob") == "bob@example.org"
    assert book.resolve("carol@elsewhere.org") == "carol@elsewhere.org"  # already an address: as-is
    assert book.resolve("bob smith") is None and book.resolve("a@b@c.org") is None
    assert AddressBook.from_file(directory).resolve("bob") is None


def test_csv_directory(tmp_path):
    directory = tmp_path / "users.csv"
    directory.write_text("user,email,team\nalice,alice@example.org,ml\n 王伟 , wang.wei@example.org ,cv\n",
                         encoding="utf-8")
    assert load_directory(directory) == {"alice": "alice@example.org", "王伟": "wang.wei@example.org"}


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("users.yaml", "alice: alice@example.org\nbob: not-an-address\n", "line 2: user 'bob': 'not-an-address'"),
    ("users.yaml", "alice: a@example.org\nalice: b@example.org\n", "line 2: user 'alice' is listed twice"),
    ("users.yaml", "alice: a@example.org\nbob:\n  - b@example.org\n", "line 2: each entry must be `user: address`"),
    ("users.yaml", "- alice\n- bob\n", "line 1: expected a mapping"),
    ("users.yml", "alice: [unclosed\n", "not valid YAML"),
    ("users.yaml", "eve: \"eve@example.org\\r\\nBcc: x@example.org\"\n", "line 1: user 'eve'"),
    ("users.csv", "name,address\nalice,alice@example.org\n", "line 1: the header must name the columns user,email"),
    ("users.csv", "user,email\nalice,alice@example.org\nbob,bob at example.org\n", "line 3: user 'bob'"),
    ("users.csv", "user,email\n,nobody@example.org\n", "line 2: empty user name"),
])
def test_directory_errors_name_file_and_place(tmp_path, name, text, expected):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(AddressBookError) as err:
        load_directory(path)
    assert str(path) in str(err.value) and expected in str(err.value)


def test_missing_directory_file(tmp_path):
    with pytest.raises(AddressBookError, match="cannot read"):
        load_directory(tmp_path / "absent.yaml")


@pytest.mark.parametrize("address", ["a b@example.org", "a@@example.org", "a@b@example.org", "alice", "a@", "@x.org",
                                     "a@example.org\r\n", "a@example.org\nBcc: b@x.org", "<a@example.org>", ""])
def test_invalid_addresses(address):
    assert not valid_address(address)


def test_bad_template_and_sender_are_refused():
    with pytest.raises(ValueError, match="template"):
        AddressBook(template="example.org")
    with pytest.raises(ValueError, match="sender"):
        EmailNotifier("127.0.0.1", "steward\r\nBcc: x@example.org")


def test_from_env(tmp_path, mailbox):
    box, port = mailbox
    assert email_notifier_from_env({}) is None
    directory = tmp_path / "users.csv"
    directory.write_text("user,email\nalice,alice.w@lab.example.org\n", encoding="utf-8")
    env = {"STEWARD_SMTP_HOST": "127.0.0.1", "STEWARD_SMTP_PORT": str(port), "STEWARD_SMTP_SENDER": SENDER,
           "STEWARD_EMAIL_DIRECTORY": str(directory), "STEWARD_EMAIL_TEMPLATE": "{user}@example.org"}
    n = email_notifier_from_env(env)
    assert n is not None and (n.port, n.security, n.username) == (port, "none", None)
    assert n.notify("alice", "hi", "body").status == "sent" and n.notify("bob", "hi", "body").status == "sent"
    assert [e.rcpt_tos for e in box.envelopes] == [["alice.w@lab.example.org"], ["bob@example.org"]]
    submission = email_notifier_from_env({"STEWARD_SMTP_HOST": "smtp.example.org", "STEWARD_SMTP_PORT": "587",
                                          "STEWARD_SMTP_SENDER": SENDER, "STEWARD_SMTP_USERNAME": "steward",
                                          "STEWARD_SMTP_PASSWORD": "pw"})
    assert submission is not None and (submission.security, submission.username, submission.password) == (
        "starttls", "steward", "pw")
    with pytest.raises(ValueError, match="STEWARD_SMTP_PORT"):
        email_notifier_from_env({**env, "STEWARD_SMTP_PORT": "twenty-five"})
    with pytest.raises(ValueError, match="STEWARD_SMTP_SECURITY"):
        email_notifier_from_env({**env, "STEWARD_SMTP_SECURITY": "tls1.3"})
    with pytest.raises(ValueError, match="STEWARD_SMTP_SENDER"):
        email_notifier_from_env({"STEWARD_SMTP_HOST": "127.0.0.1"})
