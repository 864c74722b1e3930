"""The one settings object (env prefix STEWARD_), read once at the edge and passed down."""

from __future__ import annotations

import os
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class ApiToken(BaseModel):
    name: str
    role: Literal["viewer", "approver"] = "viewer"


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gpu-steward"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STEWARD_", extra="ignore")

    data_dir: Path = Field(default_factory=_default_data_dir)
    policy_file: Path | None = None
    scenario: Path | None = None  # simulated cluster to run against; None = the built-in demo
    sweep_every_s: float = 300.0
    sweep_cron: str | None = None  # e.g. "*/5 * * * *" in cluster time; overrides sweep_every_s when set
    # The weekly cost digest posted to the on-call ChatOps route (agent/graph/digest.py), e.g. "0 9 * * 1"
    # (Mondays 09:00, cluster time UTC); unset: no scheduled digest (`steward report` still writes one).
    digest_cron: str | None = None
    sim_speed: float = 60.0  # `steward serve` on the simulator: simulated seconds per wall second

    # API access (docs/access-control.md). No tokens and no proxy: local development mode on 127.0.0.1 only.
    api_tokens: dict[str, ApiToken] = {}  # STEWARD_API_TOKENS='{"<token>": {"name": "ann", "role": "approver"}}'
    trust_proxy_headers: bool = False  # an OIDC proxy in front sets the user and groups headers
    proxy_user_header: str = "X-Forwarded-User"
    proxy_groups_header: str = "X-Forwarded-Groups"
    approver_groups: list[str] = ["steward-approvers"]
    # Proxy mode needs proof a request came through the proxy: its addresses/CIDRs, a shared secret header, or both.
    trusted_proxies: list[str] = []  # e.g. ["10.0.0.7", "10.42.0.0/16"]: peers whose user/groups headers count
    proxy_secret: SecretStr | None = None  # the proxy adds `proxy_secret_header: <secret>`; clients cannot
    proxy_secret_header: str = "X-Steward-Proxy-Secret"
    # Request bodies over this are refused (413) before they are read: 64 KiB is several times the largest valid
    # request (a 4000-character chat message written as JSON escapes is 24 KB).
    max_body_bytes: int = 64 * 1024

    # The shared store for several replicas (docs/architecture.md, "Postgres and replicas"): audit, approvals,
    # leases and graph checkpoints in Postgres instead of SQLite files in data_dir. postgresql://user:pw@host/db
    database_url: SecretStr | None = None

    # Who sweeps when several replicas run: "auto" = the Kubernetes Lease in a pod or with the Kubernetes backend
    # (every steward sweeping one cluster takes that cluster's Lease), else a lease row in the store (Postgres when
    # database_url is set, else SQLite in the data dir).
    leader_lock: str = "auto"  # auto | sqlite | postgres | kubernetes | none
    lease_name: str = "gpu-steward-sweeper"
    lease_namespace: str | None = None  # None: the pod's namespace; outside a pod "gpu-steward" (deploy/kubernetes)
    lease_duration_s: float = 30.0

    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_api_key: SecretStr | None = None
    llm_temperature: float = 0.0
    llm_timeout_s: float = 60.0
    llm_max_tool_rounds: int = 6
    # A planner that needs more tool calls than this in one reply is looping or attacked: the rest are refused.
    llm_max_tool_calls_per_turn: int = 20
    llm_max_tool_args_bytes: int = 8192  # a tool call with larger JSON arguments is refused, not run

    language: str = "en"  # en | zh: replies and notifications
    # The one zone people read times in (web UI, `steward sweep`); UTC by default, the zone the audit log keeps.
    display_tz: str = "UTC"  # an IANA name, e.g. Asia/Shanghai
    # A link from each finding and approval to its metrics (Grafana, Prometheus): a URL with {namespace}, {pod}
    # and {node} filled in, e.g. https://grafana.example.com/d/gpu?var-namespace={namespace}&var-pod={pod}
    metrics_url_template: str | None = None

    # Runbooks (docs/runbooks.md): markdown files, indexed in an embedded Chroma dir or a Chroma server.
    runbooks_dir: Path | None = None  # None: the runbooks/ shipped with the code
    runbook_index_dir: Path | None = None  # None: data_dir/"runbooks-index"
    chroma_url: str | None = None  # e.g. http://chroma:8000 to use a Chroma server instead
    runbook_embedder: str = "e5-small"  # e5-small (multilingual-e5-small, bundled) | use-v3
    # Attach the runbook index to sweeps and the server. None: on for `steward sweep` and `steward serve`,
    # off for library use (tests); the first use builds the index (20-60 s on 2 cores), later runs reuse it.
    runbooks_enabled: bool | None = None

    # Real backends (see docs/real-cluster.md); "sim" runs against the simulated cluster.
    backend: str = "sim"  # sim | kubernetes | slurm
    pool_provider: str = "none"  # none | capi | aws: what resize_pool calls on a real cluster
    prometheus_url: str | None = None  # Prometheus, Thanos Query or VictoriaMetrics
    prometheus_headers: dict[str, str] = {}
    prometheus_bearer_token: SecretStr | None = None  # sent as Authorization: Bearer ...
    # How often a GPU is sampled: the slower of dcgm-exporter's collect interval (-c) and the scrape interval.
    # It sets how many samples a full slice holds; a sweep says so when the data shows it is set too short.
    prometheus_sample_interval_s: float = Field(30.0, gt=0)
    prometheus_selector: str = ""
    # Per request; a slow Thanos or a federated Prometheus answering a 50k-GPU sweep may need more.
    prometheus_timeout_s: float = Field(30.0, gt=0)
    # The currency GPU prices are in (STEWARD_CURRENCY, ISO 4217: USD, CNY, EUR ...): the steward.io/price-per-gpu-hour
    # annotations, the pools' prices and every cost shown. Nothing is converted: it names the unit prices are in.
    currency: str = Field("USD", pattern=r"^[A-Z]{3}$")  # extra matchers for every query, e.g. cluster="gpu-prod" on a shared Thanos
    kubeconfig: Path | None = None  # None: in-cluster service account, else ~/.kube/config
    slurm_bin_dir: Path | None = None  # where squeue/scontrol/scancel/sacct live; None = PATH
    aws_region: str | None = None  # EC2 Auto Scaling node pools (docs/cloud-pools.md); None = boto3's default
    aws_endpoint_url: str | None = None  # a VPC endpoint; None = the public regional endpoint

    # ChatOps (docs/chatops.md): DingTalk / WeCom robots, callbacks and signed approve links.
    dingtalk_webhook_url: str | None = None  # custom robot webhook (access_token in the URL)
    dingtalk_secret: SecretStr | None = None  # the robot's 加签 secret (SEC...)
    dingtalk_app_secret: SecretStr | None = None  # outgoing (@-mention) callback: the robot app's AppSecret
    wecom_webhook_url: str | None = None  # group robot webhook (key in the URL)
    wecom_token: SecretStr | None = None  # app callback Token
    wecom_aes_key: SecretStr | None = None  # app callback EncodingAESKey (43 chars)
    wecom_corp_id: str | None = None
    chatops_link_secret: SecretStr | None = None  # signs approve/deny links
    chatops_public_url: str | None = None  # e.g. https://steward.example.com: where links point
    chatops_link_ttl_s: float = 3600.0
    chatops_approvers: list[str] = []  # chat user ids (DingTalk staffId / WeCom userid) who may approve
    chatops_users: dict[str, dict[str, str]] = {}  # cluster user -> {dingtalk, mobile, wecom}: @-mentions, owners
    chatops_routes: dict[str, dict[str, str]] = {}  # project -> {dingtalk_webhook_url, wecom_webhook_url}
    chatops_channels: list[str] = []  # dingtalk / wecom; empty: each one whose webhook is set
    alert_webhook_token: SecretStr | None = None  # Alertmanager's bearer token for POST /api/alerts (docs/alerts.md)

    @field_validator("policy_file", "scenario", "runbooks_dir", "runbook_index_dir", "kubeconfig", "slurm_bin_dir",
                     mode="before")
    @classmethod
    def _unset_when_empty(cls, value: object) -> object:
        """`STEWARD_POLICY_FILE=` (set, but empty) means unset, not the current directory."""
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("display_tz")
    @classmethod
    def _zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"STEWARD_DISPLAY_TZ={value!r} is not a time zone: use an IANA name such as UTC or "
                             "Asia/Shanghai") from None
        return value

    @field_validator("metrics_url_template")
    @classmethod
    def _metrics_url(cls, value: str | None) -> str | None:
        import string

        if not value:
            return None
        try:
            names = {name for _, name, _, _ in string.Formatter().parse(value) if name is not None}
        except ValueError as exc:
            raise ValueError(f"STEWARD_METRICS_URL_TEMPLATE={value!r} is not a template: {exc}") from None
        unknown = names - {"namespace", "pod", "node"}
        if unknown or not value.startswith(("http://", "https://")):
            raise ValueError(f"STEWARD_METRICS_URL_TEMPLATE={value!r}: an http(s) URL whose only placeholders are "
                             f"{{namespace}}, {{pod}} and {{node}}" + (f" (not {sorted(unknown)})" if unknown else ""))
        return value

    def zone(self) -> tzinfo:
        """The display time zone."""
        from zoneinfo import ZoneInfo

        return ZoneInfo(self.display_tz)

    def local(self, moment: datetime, language: str = "en") -> str:
        """A moment as people read it: date and minute in the display zone, the zone named (北京时间 in Chinese)."""
        from core.zones import zone_suffix

        zone = self.zone()
        return f"{moment.astimezone(zone):%Y-%m-%d %H:%M}{zone_suffix(zone, language)}"

    @field_validator("database_url")
    @classmethod
    def _postgres_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().startswith(("postgresql://", "postgres://")):
            raise ValueError("STEWARD_DATABASE_URL must be a postgresql:// URL (e.g. "
                             "postgresql://steward:secret@db:5432/steward); unset it to keep SQLite in the data dir")
        return value

    def store(self, name: str) -> str:
        """Where the `name` store lives: the Postgres URL when database_url is set, else data_dir/<name>.sqlite."""
        if self.database_url is not None:
            return self.database_url.get_secret_value()
        return str(self.data_dir / f"{name}.sqlite")

    @property
    def llm_configured(self) -> bool:
        return bool(self.llm_model and (self.llm_base_url or self.llm_api_key))

    def ensure_data_dir(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return self.data_dir

    @property
    def audit_db(self) -> Path:
        return self.data_dir / "audit.sqlite"

    @property
    def checkpoint_db(self) -> Path:
        return self.data_dir / "checkpoints.sqlite"
