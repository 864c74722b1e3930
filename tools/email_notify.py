"""EmailNotifier: warns a job's owner by e-mail, for Slurm sites without ChatOps. It is a real SMTP client
(stdlib `smtplib`, plain, STARTTLS or implicit TLS, optional login) tested against an aiosmtpd server on
loopback; a result is `sent` only when the server accepted the message for that recipient, so a stop that
needs a delivered warning never follows a mail that went nowhere. `AddressBook` maps cluster user names to
addresses (a YAML or CSV directory file, then a `{user}@domain` template) and refuses anything that is not a
plain `local@domain`, so no recipient can smuggle a header in."""

from __future__ import annotations

import csv
import re
import smtplib
import ssl
from collections.abc import Mapping
from datetime import datetime
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import formatdate, make_msgid
from pathlib import Path
from typing import Literal, cast, get_args

import yaml

from core.cluster import NotifyResult

Security = Literal["none", "starttls", "ssl"]
_ADDRESS = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*")
_POLICY = SMTP.clone(cte_type="7bit")  # CRLF lines; UTF-8 text goes base64/quoted-printable: any server takes it


class AddressBookError(ValueError):
    """A directory file that cannot be trusted; the message names the file and the line or key."""


def valid_address(address: str) -> bool:
    return _ADDRESS.fullmatch(address) is not None


def load_directory(path: str | Path) -> dict[str, str]:
    """`user: address` from a YAML mapping, or `user,email` rows from a .csv file; every entry is checked."""
    path = Path(path)
    entries: dict[str, str] = {}

    def add(user: str, address: str, where: str) -> None:
        if not user:
            raise AddressBookError(f"{path}: {where}: empty user name")
        if user in entries:
            raise AddressBookError(f"{path}: {where}: user {user!r} is listed twice")
        if not valid_address(address):
            raise AddressBookError(f"{path}: {where}: user {user!r}: {address!r} is not an e-mail address")
        entries[user] = address

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AddressBookError(f"{path}: cannot read the e-mail directory: {exc}") from exc
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(text.splitlines())
        if not {"user", "email"} <= set(reader.fieldnames or ()):
            raise AddressBookError(f"{path}: line 1: the header must name the columns user,email")
        for row in reader:
            add((row["user"] or "").strip(), (row["email"] or "").strip(), f"line {reader.line_num}")
        return entries
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise AddressBookError(f"{path}: not valid YAML: {exc}") from exc
    if root is None:
        return entries
    if not isinstance(root, yaml.MappingNode):
        raise AddressBookError(f"{path}: line {root.start_mark.line + 1}: expected a mapping of user: address")
    for key, value in root.value:
        where = f"line {key.start_mark.line + 1}"
        if not isinstance(key, yaml.ScalarNode) or not isinstance(value, yaml.ScalarNode):
            raise AddressBookError(f"{path}: {where}: each entry must be `user: address`")
        add(str(key.value).strip(), str(value.value).strip(), where)
    return entries


class AddressBook:
    """User name -> address: the directory first, then the template; a recipient with `@` is used as-is."""

    def __init__(self, entries: Mapping[str, str] | None = None, template: str | None = None) -> None:
        self.entries = dict(entries or {})
        bad = [user for user, address in self.entries.items() if not valid_address(address)]
        if bad:
            raise ValueError(f"not an e-mail address for user(s) {', '.join(map(repr, bad))}")
        if template is not None and ("{user}" not in template or not valid_address(template.replace("{user}", "u"))):
            raise ValueError(f"e-mail template {template!r} must look like '{{user}}@example.org'")
        self.template = template

    @classmethod
    def from_file(cls, path: str | Path, template: str | None = None) -> AddressBook:
        return cls(load_directory(path), template)

    def resolve(self, recipient: str) -> str | None:
        if "@" in recipient:
            address: str | None = recipient
        else:
            address = self.entries.get(recipient)
            if address is None and self.template is not None:
                address = self.template.replace("{user}", recipient)
        return address if address is not None and valid_address(address) else None


class EmailNotifier:
    """Notifier over SMTP; `notify` never raises: every failure is a `status="error"` result with the reason."""

    def __init__(self, host: str, sender: str, *, port: int = 25, username: str | None = None,
                 password: str | None = None, security: Security = "none", timeout_s: float = 10.0,
                 addresses: AddressBook | None = None, ssl_context: ssl.SSLContext | None = None) -> None:
        if not valid_address(sender):
            raise ValueError(f"sender {sender!r} is not an e-mail address")
        if security not in get_args(Security):
            raise ValueError(f"security must be one of {get_args(Security)}, not {security!r}")
        self.host, self.port, self.sender, self.security, self.timeout_s = host, port, sender, security, timeout_s
        self.username, self.password = username, password
        self.addresses = addresses or AddressBook()
        self.ssl_context = ssl_context

    def notify(self, recipient: str, subject: str, body: str, *, job_id: str | None = None,
               deadline: datetime | None = None, target_uid: str | None = None) -> NotifyResult:
        address = self.addresses.resolve(recipient)
        if address is None:
            return self._error(recipient, f"no e-mail address: {recipient!r} is not a valid address" if "@" in recipient
                               else f"no e-mail address known for user {recipient!r}")
        message_id = make_msgid(domain=self.sender.rpartition("@")[2])
        try:
            msg = self._message(address, subject, body, job_id, message_id)
            with self._connect() as smtp:
                if self.username:
                    smtp.login(self.username, self.password or "")
                refused = smtp.send_message(msg, from_addr=self.sender, to_addrs=[address])
        except smtplib.SMTPRecipientsRefused as exc:  # every recipient (here: the only one) refused
            refused = {address: exc.recipients.get(address, (0, b"refused"))}
        except Exception as exc:
            return self._error(recipient, self._describe(exc))
        if address in refused:
            code, text = refused[address]
            return self._error(recipient, f"recipient {address} refused: {code} {_text(text)}")
        return NotifyResult(recipient=recipient, status="sent", channel="email", message_id=message_id,
                            detail=f"accepted by {self.host}:{self.port} for {address}")

    def _message(self, address: str, subject: str, body: str, job_id: str | None, message_id: str) -> EmailMessage:
        msg = EmailMessage(policy=_POLICY)
        msg["From"] = self.sender
        msg["To"] = address
        msg["Subject"] = " ".join(subject.split())  # CR/LF become spaces: no header can be injected
        msg["Date"] = formatdate(localtime=True)
        msg["Message-ID"] = message_id
        if job_id:
            msg["X-Steward-Job"] = " ".join(job_id.split())
        msg.set_content(body, charset="utf-8")
        return msg

    def _connect(self) -> smtplib.SMTP:
        context = self.ssl_context or ssl.create_default_context()  # verifies the server's certificate and name
        if self.security == "ssl":
            return smtplib.SMTP_SSL(self.host, self.port, timeout=self.timeout_s, context=context)
        smtp = smtplib.SMTP(self.host, self.port, timeout=self.timeout_s)
        if self.security == "starttls":
            try:
                smtp.starttls(context=context)
            except BaseException:
                smtp.close()
                raise
        return smtp

    def _describe(self, exc: BaseException) -> str:
        where = f"{self.host}:{self.port}"
        chain = [exc, exc.__cause__, exc.__context__]
        if any(isinstance(e, ConnectionRefusedError) for e in chain):
            return f"connection refused by {where} (no SMTP server listening?)"
        if any(isinstance(e, TimeoutError) for e in chain):
            return f"timed out after {self.timeout_s:g}s talking to {where}"
        if isinstance(exc, smtplib.SMTPResponseException):
            return f"{where} answered {exc.smtp_code} {_text(exc.smtp_error)} ({type(exc).__name__})"
        return f"{type(exc).__name__} talking to {where}: {exc}"

    def _error(self, recipient: str, detail: str) -> NotifyResult:
        return NotifyResult(recipient=recipient, status="error", channel="email", detail=detail)


def _text(reply: bytes | str) -> str:
    return reply.decode("utf-8", "replace") if isinstance(reply, bytes) else reply


def email_notifier_from_env(env: Mapping[str, str]) -> EmailNotifier | None:
    """The notifier the STEWARD_SMTP_* / STEWARD_EMAIL_* settings describe; None when STEWARD_SMTP_HOST is unset."""
    host = env.get("STEWARD_SMTP_HOST", "").strip()
    if not host:
        return None
    sender = env.get("STEWARD_SMTP_SENDER", "").strip()
    if not sender:
        raise ValueError("STEWARD_SMTP_SENDER is required when STEWARD_SMTP_HOST is set")
    try:
        port = int(env.get("STEWARD_SMTP_PORT") or 25)
    except ValueError:
        raise ValueError(f"STEWARD_SMTP_PORT must be a number, not {env['STEWARD_SMTP_PORT']!r}") from None
    security = (env.get("STEWARD_SMTP_SECURITY") or {465: "ssl", 587: "starttls"}.get(port, "none")).lower()
    if security not in get_args(Security):
        raise ValueError(f"STEWARD_SMTP_SECURITY must be one of {get_args(Security)}, not {security!r}")
    directory, template = env.get("STEWARD_EMAIL_DIRECTORY"), env.get("STEWARD_EMAIL_TEMPLATE") or None
    book = AddressBook.from_file(directory, template) if directory else AddressBook(template=template)
    return EmailNotifier(host, sender, port=port, username=env.get("STEWARD_SMTP_USERNAME") or None,
                         password=env.get("STEWARD_SMTP_PASSWORD") or None, security=cast(Security, security),
                         addresses=book)
