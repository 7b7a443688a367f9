"""The configuration file (``jobgate.yaml``): what names mean on this host.

A definition names a runner, a target engine, a policy or a profile; this file says what
those names mean here (binary paths, URLs, delays, profile values), so definitions stay
portable and a request can never smuggle a path or a URL in (seed 004 "Runners", seed 000
§55-56). Loading is strict: an unknown key is refused, and every refusal is a
``ConfigurationError`` naming the file and the key path (``runners.etl.args[1]``), because a
silently ignored typo in a governance configuration is a policy that quietly does not apply.

Relative paths (``data_dir``, ``definitions``, ``events.jsonl_path``, a relative
``sqlite:///`` database file) are resolved against the folder that holds the file, so
``jobgate serve`` finds the same database whatever the working directory is.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from jobgate.config.auth import AuthSettings, parse_auth_settings
from jobgate.config.health import AlertSettings, DependencySpec, parse_alerts, parse_dependencies
from jobgate.config.packs import PackSettings, parse_pack_settings
from jobgate.config.plugins import PluginSettings, parse_plugin_settings
from jobgate.config.pubsub import PubSubSettings, parse_pubsub_settings
from jobgate.config.timestamps import TimestampSettings
from jobgate.config.tracing import TracingSettings, parse_tracing_settings
from jobgate.core.classes import (
    BUILTIN_CLASSES,
    CLASS_NAME_MAX,
    CLASS_NAME_PATTERN,
    CLASS_NAME_RULE,
    UNBORROWABLE,
    JobClassSpec,
    known_classes,
)
from jobgate.core.errors import ConfigurationError, ValidationError
from jobgate.core.params import placeholders
from jobgate.core.periods import PeriodKind
from jobgate.core.policies import (
    BUILTIN_RETRY_POLICIES,
    BUILTIN_TIMEOUT_POLICIES,
    SLA_FIELDS,
    RetryPolicy,
    RetryStrategy,
    SlaPolicy,
    TimeoutPolicy,
)
from jobgate.core.ratelimit import check_rate
from jobgate.documents import HANDLER_PATTERN, HANDLER_RULE, Reader, join, parse_yaml, read_text
from jobgate.logs import LoggingSettings, parse_logging_settings
from jobgate.registry import (
    DEFAULT_NON_RETRYABLE_EXIT_CODES,
    HttpTargetSpec,
    Registries,
    RunnerSpec,
    TargetSpec,
)
from jobgate.scheduling.model import zone_problem

CONFIG_FILENAME = "jobgate.yaml"
DEFAULT_PROFILE = "default"
DATABASE_ENV = "JOBGATE_DATABASE_URL"

_TOP_KEYS = (
    "database",
    "data_dir",
    "definitions",
    "runners",
    "runners_file",
    "default_runner",
    "targets",
    "profiles",
    "retry_policies",
    "timeout_policies",
    "sla_policies",
    "job_classes",
    "queues",
    "worker",
    "events",
    "sqlite",
    "server",
    "safe_mode",
    "signing",
    "trust_gates",
    "policy",
    "evidence",
    "retention",
    "alerts",
    "dependencies",
    "logging",
    "tracing",
    "pubsub",
    "plugins",
    "packs",
    "telemetry",
    "auth",
    "governance",
    "scheduling",
)
_RUNNER_KEYS = ("binary", "args", "non_retryable_exit_codes", "stop_grace_seconds", "artifact", "env", "executes_body")
_TARGET_KEYS = ("cmi", "handler", "runner", "http", "description")
_WORKER_KEYS = (
    "concurrency",
    "lease_seconds",
    "poll_interval_ms",
    "shutdown_grace_seconds",
    "batch_size",
    "maximum_run_age_seconds",
    "trusted_handlers",
)
_SERVER_KEYS = (
    "tenant",
    "max_body_bytes",
    "daily_run_quota",
    "stream_poll_ms",
    "stream_heartbeat_seconds",
    "stream_queue_lag_seconds",
    "stream_retry_ms",
    "stream_max_seconds",
    "streams_per_token",
    "trusted_proxies",
)
MAXIMUM_RUN_AGE_LIMIT = timedelta(days=30)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class QueueSettings:
    """A queue's rate limit (GCRA, see ``core.ratelimit``); a queue not configured is unlimited."""

    name: str
    rate_per_second: float | None = None
    burst: int = 1


@dataclass(frozen=True)
class WorkerSettings:
    concurrency: int = 8
    lease: timedelta = timedelta(seconds=30)
    poll_interval: timedelta = timedelta(milliseconds=50)
    shutdown_grace: timedelta = timedelta(seconds=30)
    batch_size: int = 100
    maximum_run_age: timedelta = timedelta(hours=24)  # open runs older than this are closed
    # Modules (and their submodules) whose ``host_job`` handlers are given jobgate's ``Host``
    # (its store, clock and configuration) besides the run's context. jobgate's own are always.
    trusted_handlers: tuple[str, ...] = ()


@dataclass(frozen=True)
class EventSettings:
    """Where outbox events are mirrored: a JSON-lines file (``None``: off) and the log."""

    jsonl_path: Path | None
    log: bool = True


@dataclass(frozen=True)
class SqliteSettings:
    """``FULL`` survives power loss after every commit; ``NORMAL`` may lose the last commits."""

    synchronous: Literal["FULL", "NORMAL"] = "FULL"


@dataclass(frozen=True)
class SigningSettings:
    """Signed definitions (per deployment): the Ed25519 public keys trusted to sign, by key
    id, and whether an unsigned or badly signed definition is refused."""

    require_signed_definitions: bool = False
    trust_roots: dict[str, str] = field(default_factory=dict)  # key id -> base64 public key

    def roots(self) -> dict[str, Any]:
        from jobgate.governance.signing import public_key

        return {k: public_key(v, field=f"signing.trust_roots.{k}") for k, v in self.trust_roots.items()}


@dataclass(frozen=True)
class TrustGateSettings:
    """Seed 004 trust gates: the signed licence file and its signers, and the environment
    check endpoint (from configuration only, never from a request)."""

    licence: Path | None = None
    licence_trust_roots: dict[str, str] = field(default_factory=dict)
    environment_url: str | None = None
    environment_ttl: timedelta = timedelta(seconds=60)
    environment_timeout: timedelta = timedelta(seconds=2)

    def roots(self) -> dict[str, Any]:
        from jobgate.governance.signing import public_key

        return {
            k: public_key(v, field=f"trust_gates.licence_trust_roots.{k}") for k, v in self.licence_trust_roots.items()
        }


@dataclass(frozen=True)
class EvidenceSettings:
    """Anchoring: the window length, and the sink (an append-only file, or an HTTP endpoint)."""

    anchor_window: timedelta = timedelta(hours=1)
    anchor_sink: Path | None = None  # default: <data_dir>/anchors/anchors.jsonl
    anchor_sink_url: str | None = None
    signing_key: Path | None = None  # private key that signs evidence bundles' manifests
    signing_key_id: str = "evidence"
    # How often the leader chains new seals into the audit log (``core.seals``): the longest a
    # sealed record waits before rewriting it also means rewriting the audit chain.
    seal_interval: timedelta = timedelta(seconds=5)
    # Public keys of earlier evidence keys (after a rotation): their anchors still verify.
    trusted_keys: dict[str, str] = field(default_factory=dict)
    # Anchors made before the deployment had an evidence key (an upgrade): those numbered below
    # this are accepted unsigned; every later one must carry a valid signature.
    unsigned_anchors_before: int = 0
    # An RFC 3161 timestamping authority that stamps every batch anchor (``timestamping``).
    timestamp_authority: TimestampSettings | None = None


@dataclass(frozen=True)
class SafeModeSettings:
    """What safe mode puts in force while it is on (seed 000 §39-40): job classes refused,
    direct manual runs refused (use the request workflow), values that override every profile
    (tightened thresholds, raised sampling), and the SAFE_MODE_JOB definition run at each
    switch. ``suspend_job_classes`` may name built-in and declared classes (``job_classes``); a
    built-in class named there also suspends every declared class that gates as it."""

    suspend_job_classes: tuple[str, ...] = ()
    manual_review: bool = False
    profile_overrides: dict[str, Any] = field(default_factory=dict)
    job: str | None = None
    allow_automatic: bool = False  # may a policy or alert trigger switch safe mode on by itself?

    def actions(self) -> dict[str, Any]:
        return {
            "suspend_job_classes": list(self.suspend_job_classes),
            "manual_review": self.manual_review,
            "profile_overrides": dict(self.profile_overrides),
        }


@dataclass(frozen=True)
class GovernanceSettings:
    """``governance``: ``four_eyes`` makes every content approval a second person's (the
    principal who applied a version never approves it). Definitions whose runner executes its
    body as code always need a second person, whatever this says."""

    four_eyes: bool = False


@dataclass(frozen=True)
class SchedulingSettings:
    """``scheduling``: the defaults of the schedules definitions keep (``trigger_type`` with a
    ``schedule_expression``) when they do not say: their timezone and their misfire policy."""

    timezone: str = "UTC"
    misfire: str = "fire_once"


@dataclass(frozen=True)
class TelemetrySettings:
    """AII telemetry rollups (seed 000 §37, §51): the period each publication covers, the sink
    (an append-only file, or an HTTP endpoint from configuration only), and how long after a
    period's end its figures are left to settle (commits stamped just before the end)."""

    period: PeriodKind = PeriodKind.MONTH
    sink_path: Path | None = None  # default: <data_dir>/telemetry/telemetry.jsonl
    sink_url: str | None = None
    timeout: timedelta = timedelta(seconds=10)
    settle: timedelta = timedelta(minutes=5)


@dataclass(frozen=True)
class ServerSettings:
    """``jobgate serve``: the tenant of the bootstrap token and of ``--no-auth``, request and stream limits."""

    tenant: str = "default"
    max_body_bytes: int = 1_048_576
    daily_run_quota: int | None = None  # runs a tenant may create per UTC day (None: unlimited)
    stream_poll: timedelta = timedelta(milliseconds=250)
    stream_heartbeat: timedelta = timedelta(seconds=15)
    stream_queue_lag: timedelta = timedelta(seconds=5)  # a pending run's queue snapshot, again (seed 002)
    stream_retry: timedelta = timedelta(seconds=2)
    stream_max: timedelta = timedelta(hours=1)  # a stream then ends; the client resumes by Last-Event-ID
    streams_per_token: int = 20  # open run streams one token may hold on one server
    # The proxies whose X-Forwarded-Proto/-For are believed (addresses or networks): behind a TLS
    # proxy on another host the session cookie is Secure only when its HTTPS is believed.
    trusted_proxies: tuple[str, ...] = ("127.0.0.1",)


@dataclass(frozen=True)
class RetentionSettings:
    """How long finished records are kept, by record type (seed 000 §57): finished runs
    (``finished_runs_days``; None: for ever), the runs of some job classes for a time of their
    own (``job_classes``: replay records, safe-mode jobs ...), and a dead-lettered run until its
    letter was resolved at least ``resolved_dead_letters_days`` ago."""

    finished_runs: timedelta | None = None
    job_classes: Mapping[str, timedelta] = field(default_factory=dict)
    resolved_dead_letters: timedelta | None = None


@dataclass(frozen=True)
class JobgateConfig:
    """The loaded configuration. Treat the dicts as read-only: snapshots are digested from them."""

    path: Path | None
    base_dir: Path
    database: str
    data_dir: Path
    definitions: tuple[Path, ...]
    runners: dict[str, RunnerSpec]
    targets: dict[str, TargetSpec]
    profiles: dict[str, dict[str, Any]]
    retry_policies: dict[str, RetryPolicy]
    timeout_policies: dict[str, TimeoutPolicy]
    sla_policies: dict[str, SlaPolicy]
    queues: dict[str, QueueSettings] = field(default_factory=dict)
    worker: WorkerSettings = WorkerSettings()
    events: EventSettings = EventSettings(None)
    sqlite: SqliteSettings = SqliteSettings()
    default_runner: str | None = None
    server: ServerSettings = ServerSettings()
    safe_mode: SafeModeSettings = SafeModeSettings()
    signing: SigningSettings = SigningSettings()
    trust_gates: TrustGateSettings = TrustGateSettings()
    policy: Path | None = None  # the scheduler policy file (jobgate.governance.policy_file), re-read when it changes
    evidence: EvidenceSettings = EvidenceSettings()
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    alerts: AlertSettings = field(default_factory=AlertSettings)  # jobgate.config.health: the alert webhook(s)
    dependencies: dict[str, DependencySpec] = field(default_factory=dict)  # checks a definition may declare
    logging: LoggingSettings = field(default_factory=LoggingSettings)  # jobgate.logs: format (text|json) and level
    tracing: TracingSettings = field(default_factory=TracingSettings)  # runtime.otel: OpenTelemetry spans
    pubsub: PubSubSettings = field(default_factory=PubSubSettings)  # runtime.pubsub: Redis pub/sub triggers (seed 004)
    plugins: PluginSettings = field(default_factory=PluginSettings)  # jobgate.plugins: signed optional plugins
    packs: PackSettings = field(default_factory=PackSettings)  # jobgate.packs: offline-seed import trust
    telemetry: TelemetrySettings = TelemetrySettings()
    governance: GovernanceSettings = GovernanceSettings()
    scheduling: SchedulingSettings = SchedulingSettings()
    auth: AuthSettings = field(default_factory=AuthSettings)  # jobgate.config.auth: tokens, OpenID Connect
    # Job classes declared here beside the built-in ones, by name (jobgate.core.classes).
    job_classes: dict[str, JobClassSpec] = field(default_factory=dict)
    # Whether ``definitions`` was written in the file: a folder named there must exist at
    # start-up, while the default ``definitions`` folder may be absent (service.startup).
    definitions_configured: bool = False

    @property
    def evidence_key_path(self) -> Path:
        """The deployment's Ed25519 evidence key (signs anchors and bundles): ``evidence.signing_key``,
        else ``<data_dir>/keys/evidence.key`` (what ``jobgate init`` creates)."""
        return self.evidence.signing_key or Path(self.data_dir) / "keys" / "evidence.key"

    @property
    def anchor_sink_path(self) -> Path:
        return self.evidence.anchor_sink or Path(self.data_dir) / "anchors" / "anchors.jsonl"

    @property
    def telemetry_sink_path(self) -> Path:
        return self.telemetry.sink_path or Path(self.data_dir) / "telemetry" / "telemetry.jsonl"

    @property
    def source(self) -> str:
        return str(self.path) if self.path is not None else str(self.base_dir / CONFIG_FILENAME)

    @property
    def registries(self) -> Registries:
        return Registries(runners=dict(self.runners), targets=dict(self.targets))


def load_config(path: str | Path) -> JobgateConfig:
    """Load ``path`` (a file, or a folder holding ``jobgate.yaml``) or raise ``ConfigurationError``."""
    file = Path(path)
    if file.is_dir():
        file = file / CONFIG_FILENAME
    text = read_text(file, error=ConfigurationError)
    document = parse_yaml(text, source=str(file), error=ConfigurationError)
    return build_config({} if document is None else document, base_dir=file.parent.resolve(), path=file)


def default_config(base_dir: str | Path) -> JobgateConfig:
    """The configuration an empty file in ``base_dir`` would give: used when no file exists."""
    return build_config({}, base_dir=Path(base_dir).resolve(), path=None)


def resolve_database_url(config: JobgateConfig, cli_value: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The database to use: the CLI's ``--database`` beats ``JOBGATE_DATABASE_URL`` beats the file.

    An empty value counts as unset, so ``JOBGATE_DATABASE_URL=`` in a shell does not select
    an empty URL. CLI and environment values are taken as given (relative to the working
    directory), since the person typing them is in that directory, not the config's.
    """
    env = os.environ if environ is None else environ
    for value in (cli_value, env.get(DATABASE_ENV)):
        if value:
            return value
    return config.database


def build_config(document: Any, *, base_dir: Path, path: Path | None) -> JobgateConfig:
    """Validate a parsed document; ``base_dir`` anchors relative paths. Pure but for ``Path`` joins."""
    r = Reader(str(path) if path is not None else str(base_dir / CONFIG_FILENAME), ConfigurationError)
    doc = r.mapping(document, "")
    r.only_keys(doc, "", _TOP_KEYS)

    database = _database(r, doc.get("database"), base_dir)
    data_dir = base_dir / "data"
    if doc.get("data_dir") is not None:
        data_dir = base_dir / r.string(doc.get("data_dir"), "data_dir")
    folders = r.strings(doc.get("definitions"), "definitions") if "definitions" in doc else ["definitions"]
    definitions = tuple(base_dir / folder for folder in folders)
    runners = {name: _runner(r, name, spec, base_dir) for name, spec in _named_entries(r, doc, "runners").items()}
    if doc.get("runners_file") is not None:
        runners_file = base_dir / r.string(doc["runners_file"], "runners_file")
        for name, spec in _runners_file(runners_file).items():
            if name in runners:
                r.fail(join("runners", name), f"also defined in runners_file {runners_file}: name it in one place")
            runners[name] = spec
    default_runner = None
    if doc.get("default_runner") is not None:
        default_runner = r.known(doc.get("default_runner"), "default_runner", "runner", runners)
    targets = {meid: _target(r, meid, spec, runners) for meid, spec in _named_entries(r, doc, "targets").items()}
    profiles: dict[str, dict[str, Any]] = {DEFAULT_PROFILE: {}}
    for name, values in _named_entries(r, doc, "profiles").items():
        profiles[name] = {} if values is None else r.mapping(values, join("profiles", name))
    queues = {name: _queue(r, name, spec) for name, spec in _named_entries(r, doc, "queues").items()}
    events_doc = r.mapping(_or_empty(doc.get("events")), "events")
    r.only_keys(events_doc, "events", ("jsonl_path", "log"))
    jsonl: Path | None = data_dir / "events.jsonl"
    if "jsonl_path" in events_doc:
        raw = events_doc["jsonl_path"]
        jsonl = None if raw is None else base_dir / r.string(raw, "events.jsonl_path")
    log = r.boolean(events_doc["log"], "events.log") if "log" in events_doc else True
    sqlite_doc = r.mapping(_or_empty(doc.get("sqlite")), "sqlite")
    r.only_keys(sqlite_doc, "sqlite", ("synchronous",))
    synchronous = str(sqlite_doc.get("synchronous", "FULL")).upper()
    if synchronous not in ("FULL", "NORMAL"):
        r.fail("sqlite.synchronous", "must be one of: FULL, NORMAL")
    job_classes = _job_classes(r, doc.get("job_classes"))
    retry_policies = _policies(r, doc, "retry_policies", BUILTIN_RETRY_POLICIES)
    safe_mode = _safe_mode(r, doc.get("safe_mode"), job_classes)
    for policy in retry_policies.values():
        if policy.strategy is RetryStrategy.SAFE_MODE_ON_FAILURE and not safe_mode.allow_automatic:
            r.fail(
                f"retry_policies.{policy.retry_policy_id}.strategy",
                "safe_mode_on_failure switches safe mode on by itself: set safe_mode.allow_automatic: true to allow it",
            )
    return JobgateConfig(
        path=path,
        base_dir=base_dir,
        database=database,
        data_dir=data_dir,
        definitions=definitions,
        definitions_configured="definitions" in doc,
        runners=runners,
        targets=targets,
        profiles=profiles,
        retry_policies=retry_policies,
        timeout_policies=_policies(r, doc, "timeout_policies", BUILTIN_TIMEOUT_POLICIES),
        sla_policies=_policies(r, doc, "sla_policies", {}),
        queues=queues,
        worker=_worker(r, doc.get("worker")),
        events=EventSettings(jsonl, log),
        sqlite=SqliteSettings("FULL" if synchronous == "FULL" else "NORMAL"),
        default_runner=default_runner,
        server=_server(r, doc.get("server")),
        safe_mode=safe_mode,
        signing=_signing(r, doc.get("signing"), base_dir),
        trust_gates=_trust_gates(r, doc.get("trust_gates"), base_dir),
        policy=None if doc.get("policy") is None else base_dir / r.string(doc["policy"], "policy"),
        evidence=_evidence(r, doc.get("evidence"), base_dir),
        retention=_retention(r, doc.get("retention"), job_classes),
        alerts=parse_alerts(r, doc.get("alerts"), data_dir, base_dir),
        dependencies=parse_dependencies(r, doc, targets),
        logging=parse_logging_settings(r, doc.get("logging")),
        tracing=parse_tracing_settings(r, doc.get("tracing")),
        pubsub=parse_pubsub_settings(r, doc.get("pubsub"), base_dir),
        plugins=parse_plugin_settings(r, doc.get("plugins"), base_dir),
        packs=parse_pack_settings(r, doc.get("packs")),
        telemetry=_telemetry(r, doc.get("telemetry"), base_dir),
        governance=_governance(r, doc.get("governance")),
        scheduling=_scheduling(r, doc.get("scheduling")),
        auth=parse_auth_settings(r, doc.get("auth"), base_dir, tenant=_server(r, doc.get("server")).tenant),
        job_classes=job_classes,
    )


_JOB_CLASS_KEYS = ("name", "gates_as", "default_priority", "audit_material", "description")


def _job_classes(r: Reader, value: Any) -> dict[str, JobClassSpec]:
    """``job_classes:``: classes declared beside the built-in ones (``jobgate.core.classes``).

    Each names the built-in class whose rules it follows (``gates_as``, required: no class
    without rules); a name must not repeat a built-in one or another declared one."""
    from jobgate.core.models import JobClass, Priority

    out: dict[str, JobClassSpec] = {}
    borrowable = [c for c in BUILTIN_CLASSES if c not in UNBORROWABLE]
    for index, item in enumerate(r.sequence(_or_list(value), "job_classes")):
        at = join("job_classes", index)
        data = r.mapping(item, at)
        r.only_keys(data, at, _JOB_CLASS_KEYS)
        if "name" not in data:
            r.fail(join(at, "name"), "required: the class name definitions give as job_class")
        name = r.string(data["name"], join(at, "name"))
        if len(name) > CLASS_NAME_MAX or CLASS_NAME_PATTERN.fullmatch(name) is None:
            r.fail(join(at, "name"), CLASS_NAME_RULE)
        if name in BUILTIN_CLASSES:
            r.fail(join(at, "name"), f"{name} is a built-in class: declare a class with a name of its own")
        if name in out:
            first = join("job_classes", list(out).index(name))
            r.fail(join(at, "name"), f"duplicate class {name!r} (first declared at {first})")
        if "gates_as" not in data:
            r.fail(
                join(at, "gates_as"),
                "required: the built-in class whose trust-gate, safe-mode and policy rules it follows"
                f" (one of: {', '.join(borrowable)})",
            )
        gates_as = r.string(data["gates_as"], join(at, "gates_as"))
        if gates_as in UNBORROWABLE:
            r.fail(join(at, "gates_as"), f"{gates_as} is never held by safe mode, so no declared class may gate as it")
        if gates_as not in BUILTIN_CLASSES:
            r.fail(join(at, "gates_as"), f"unknown built-in class {gates_as!r} (one of: {', '.join(borrowable)})")
        priority = None
        if data.get("default_priority") is not None:
            priority = r.choice(data["default_priority"], join(at, "default_priority"), Priority)
        material = False
        if data.get("audit_material") is not None:
            material = r.boolean(data["audit_material"], join(at, "audit_material"))
        description = r.text(data.get("description") or "", join(at, "description"))
        out[name] = JobClassSpec(name, JobClass(gates_as), priority, material, description)
    return out


def _or_list(value: Any) -> Any:
    """An absent or ``null`` list is an empty one; any other value is checked by the caller."""
    return [] if value is None else value


def _governance(r: Reader, value: Any) -> GovernanceSettings:
    spec = r.mapping(_or_empty(value), "governance")
    r.only_keys(spec, "governance", ("four_eyes",))
    return GovernanceSettings(four_eyes=r.boolean(spec.get("four_eyes", False), "governance.four_eyes"))


MISFIRE_POLICIES = ("fire_once", "fire_all", "skip")


def _scheduling(r: Reader, value: Any) -> SchedulingSettings:
    spec = r.mapping(_or_empty(value), "scheduling")
    r.only_keys(spec, "scheduling", ("timezone", "misfire"))
    zone = r.string(spec.get("timezone", "UTC"), "scheduling.timezone")
    problem = zone_problem(zone)
    if problem is not None:
        r.fail("scheduling.timezone", problem)
    misfire = r.string(spec.get("misfire", "fire_once"), "scheduling.misfire")
    if misfire not in MISFIRE_POLICIES:
        r.fail("scheduling.misfire", f"one of {', '.join(MISFIRE_POLICIES)}")
    return SchedulingSettings(timezone=zone, misfire=misfire)


def _or_empty(value: Any) -> Any:
    """An absent or ``null`` section is an empty one; any other value is checked by the caller."""
    return {} if value is None else value


def _named_entries(r: Reader, doc: Mapping[str, Any], key: str) -> dict[str, Any]:
    """Section ``key``: a mapping of name -> entry whose names are identifiers (they appear in paths)."""
    entries = r.mapping(_or_empty(doc.get(key)), key)
    for name in entries:
        r.name(name, join(key, name))
    return entries


def _database(r: Reader, value: Any, base_dir: Path) -> str:
    if value is None:
        return f"sqlite:///{(base_dir / 'jobgate.db').as_posix()}"
    url = r.string(value, "database")
    scheme = url.split(":", 1)[0]
    if scheme.startswith("postgresql"):
        return url
    if not scheme.startswith("sqlite") or not url.startswith(f"{scheme}://"):
        r.fail("database", "must be a sqlite:///<file> or postgresql://... URL")
    rest = url[len(scheme) + 4 :] if url.startswith(f"{scheme}:///") else None
    if rest and not rest.startswith(("/", ":memory:")):
        file, sep, query = rest.partition("?")
        return f"{scheme}:///{(base_dir / file).as_posix()}{sep}{query}"
    return url


def _runner(r: Reader, name: str, value: Any, base_dir: Path) -> RunnerSpec:
    at = join("runners", name)
    spec = r.mapping(value, at)
    r.only_keys(spec, at, _RUNNER_KEYS)
    binary = r.string(spec.get("binary"), join(at, "binary"))
    if "/" in binary and not Path(binary).is_absolute():  # a path, like every path here: from this file's folder
        binary = str(base_dir / binary)
    raw_args = r.sequence(spec.get("args", []), join(at, "args"))
    args = tuple(r.text(arg, join(join(at, "args"), i)) for i, arg in enumerate(raw_args))
    codes = DEFAULT_NON_RETRYABLE_EXIT_CODES
    if "non_retryable_exit_codes" in spec:
        where = join(at, "non_retryable_exit_codes")
        items = r.sequence(spec["non_retryable_exit_codes"], where)
        codes = frozenset(r.integer(c, join(where, i), minimum=1, maximum=255) for i, c in enumerate(items))
    grace = timedelta(seconds=10)
    if spec.get("stop_grace_seconds") is not None:
        grace = r.duration(spec["stop_grace_seconds"], join(at, "stop_grace_seconds"))
    artifact = None
    if spec.get("artifact") is not None:
        artifact = r.string(spec["artifact"], join(at, "artifact"))
        if artifact.startswith("/") or ".." in Path(artifact).parts:
            r.fail(join(at, "artifact"), "must be a path inside the run's work directory (relative, no '..')")
    env_doc = r.mapping(_or_empty(spec.get("env")), join(at, "env"))
    env = tuple(
        sorted(
            (
                r.string(k, join(at, "env"), pattern=_ENV_NAME, rule="variable names are letters, digits and _"),
                r.text(v, join(join(at, "env"), k)),
            )
            for k, v in env_doc.items()
        )
    )
    # Whether the binary runs the body as a program. Unless the runner says otherwise, a runner
    # that is handed the body (``{{tmpfile}}``, or seed 004's ``{{.tmpfile}}``) is taken to
    # execute it: deny by default.
    takes_body = any("tmpfile" in placeholders(arg) for arg in args)
    executes_body = r.boolean(spec.get("executes_body", takes_body), join(at, "executes_body"))
    return RunnerSpec(name, binary, args, codes, grace, artifact, env, executes_body)


def _runners_file(path: Path) -> dict[str, RunnerSpec]:
    """Seed 004's ``runners.yaml`` (``runners: {name: {binary, args}}``), named by ``runners_file``:
    the same entries as the ``runners`` section, every refusal naming that file. Binary paths
    then live in one host file that scenarios and this configuration only name."""
    r = Reader(str(path), ConfigurationError)
    text = read_text(path, error=ConfigurationError)
    doc = r.mapping(_or_empty(parse_yaml(text, source=str(path), error=ConfigurationError)), "")
    r.only_keys(doc, "", ("runners",))
    return {name: _runner(r, name, spec, path.parent) for name, spec in _named_entries(r, doc, "runners").items()}


def _target(r: Reader, meid: str, value: Any, runners: Mapping[str, RunnerSpec]) -> TargetSpec:
    at = join("targets", meid)
    spec = r.mapping(value, at)
    r.only_keys(spec, at, _TARGET_KEYS)
    raw_cmi = spec.get("cmi")
    if raw_cmi is None:
        r.fail(join(at, "cmi"), "required: the CMI version(s) this target is compatible with")
    cmis = (
        (r.string(raw_cmi, join(at, "cmi")),)
        if isinstance(raw_cmi, str)
        else tuple(r.strings(raw_cmi, join(at, "cmi"), unique=True))
    )
    if not cmis:
        r.fail(join(at, "cmi"), "must name at least one CMI")
    ways = [key for key in ("handler", "runner", "http") if spec.get(key) is not None]
    if len(ways) != 1:
        found = ", ".join(ways) if ways else "none"
        r.fail(at, f"needs exactly one of handler, runner, http (found: {found})")
    handler = runner = None
    http = None
    if ways[0] == "handler":
        handler = r.string(spec["handler"], join(at, "handler"), pattern=HANDLER_PATTERN, rule=HANDLER_RULE)
    elif ways[0] == "runner":
        runner = r.known(spec["runner"], join(at, "runner"), "runner", runners)
    else:
        http = _http(r, spec["http"], join(at, "http"))
    description = r.text(spec.get("description", ""), join(at, "description"))
    return TargetSpec(meid, cmis, handler, runner, http, description)


def _http(r: Reader, value: Any, at: str) -> HttpTargetSpec:
    spec = r.mapping(value, at)
    r.only_keys(spec, at, ("url", "timeout_seconds", "headers"))
    url = r.http_url(spec.get("url"), join(at, "url"))
    timeout = timedelta(seconds=30)
    if spec.get("timeout_seconds") is not None:
        timeout = r.duration(spec["timeout_seconds"], join(at, "timeout_seconds"))
    headers_doc = r.mapping(_or_empty(spec.get("headers")), join(at, "headers"))
    headers = tuple(sorted((str(k), r.text(v, join(join(at, "headers"), k))) for k, v in headers_doc.items()))
    return HttpTargetSpec(url, timeout, headers)


def _queue(r: Reader, name: str, value: Any) -> QueueSettings:
    at = join("queues", name)
    spec = r.mapping(value if value is not None else {}, at)
    r.only_keys(spec, at, ("rate_per_second", "burst"))
    rate = None
    if spec.get("rate_per_second") is not None:
        rate = r.number(spec["rate_per_second"], join(at, "rate_per_second"))
        if (problem := check_rate(rate)) is not None:
            r.fail(join(at, "rate_per_second"), problem)
    burst = 1
    if spec.get("burst") is not None:
        if rate is None:
            r.fail(join(at, "burst"), "only meaningful with rate_per_second")
        burst = r.integer(spec["burst"], join(at, "burst"), minimum=1, maximum=1_000_000)
    return QueueSettings(name, rate, burst)


def _worker(r: Reader, value: Any) -> WorkerSettings:
    spec = r.mapping(value if value is not None else {}, "worker")
    r.only_keys(spec, "worker", _WORKER_KEYS)
    d = WorkerSettings()

    def seconds(key: str, default: timedelta, unit: float = 1.0, positive: bool = True) -> timedelta:
        if spec.get(key) is None:
            return default
        return r.duration(spec[key], join("worker", key), unit=unit, allow_zero=not positive)

    def count(key: str, default: int, maximum: int) -> int:
        if spec.get(key) is None:
            return default
        return r.integer(spec[key], join("worker", key), minimum=1, maximum=maximum)

    settings = WorkerSettings(
        concurrency=count("concurrency", d.concurrency, 4096),
        lease=seconds("lease_seconds", d.lease),
        poll_interval=seconds("poll_interval_ms", d.poll_interval, unit=0.001),
        shutdown_grace=seconds("shutdown_grace_seconds", d.shutdown_grace, positive=False),
        batch_size=count("batch_size", d.batch_size, 100_000),
        maximum_run_age=seconds("maximum_run_age_seconds", d.maximum_run_age),
        trusted_handlers=tuple(_module_names(r, spec.get("trusted_handlers"), "worker.trusted_handlers")),
    )
    # Seed 001: the budget is at least the lease (a live lease is never cut short by it) and
    # at most 30 days.
    if not settings.lease <= settings.maximum_run_age <= MAXIMUM_RUN_AGE_LIMIT:
        r.fail(
            join("worker", "maximum_run_age_seconds"),
            f"must be between the lease ({settings.lease.total_seconds():g} s) and 30 days",
        )
    return settings


def _module_names(r: Reader, value: Any, field: str) -> list[str]:
    """Dotted Python module names (``acme.jobs``): each part an identifier."""
    names = r.strings(value if value is not None else [], field, unique=True)
    for name in names:
        if not all(part.isidentifier() for part in name.split(".")):
            r.fail(field, f"{name!r} is not a Python module name")
    return names


def _telemetry(r: Reader, value: Any, base_dir: Path) -> TelemetrySettings:
    spec = r.mapping(_or_empty(value), "telemetry")
    r.only_keys(spec, "telemetry", ("period", "sink_path", "sink_url", "timeout_seconds", "settle_seconds"))
    d = TelemetrySettings()
    if spec.get("sink_path") is not None and spec.get("sink_url") is not None:
        r.fail("telemetry.sink_url", "give sink_path or sink_url, not both")
    path = None if spec.get("sink_path") is None else base_dir / r.string(spec["sink_path"], "telemetry.sink_path")
    url = None
    if spec.get("sink_url") is not None:
        url = r.http_url(spec["sink_url"], "telemetry.sink_url")

    def seconds(key: str, default: timedelta, allow_zero: bool) -> timedelta:
        at = join("telemetry", key)
        return default if spec.get(key) is None else r.duration(spec[key], at, allow_zero=allow_zero)

    return TelemetrySettings(
        period=d.period if spec.get("period") is None else r.choice(spec["period"], "telemetry.period", PeriodKind),
        sink_path=path,
        sink_url=url,
        timeout=seconds("timeout_seconds", d.timeout, allow_zero=False),
        settle=seconds("settle_seconds", d.settle, allow_zero=True),
    )


RETENTION_MAX_DAYS = 36_500


def _retention(r: Reader, value: Any, job_classes: Mapping[str, Any]) -> RetentionSettings:
    spec = r.mapping(_or_empty(value), "retention")
    r.only_keys(spec, "retention", ("finished_runs_days", "job_classes", "resolved_dead_letters_days"))

    def days(raw: Any, field_name: str) -> timedelta:
        number = r.number(raw, field_name)
        if number < 1:
            r.fail(field_name, "at least 1 day")
        if number > RETENTION_MAX_DAYS:  # a cutoff must stay a date; unset keeps for ever
            r.fail(field_name, f"at most {RETENTION_MAX_DAYS} days (100 years); leave it unset to keep for ever")
        return timedelta(days=number)

    finished = None
    if spec.get("finished_runs_days") is not None:
        finished = days(spec["finished_runs_days"], "retention.finished_runs_days")
    classes: dict[str, timedelta] = {}
    by_class = r.mapping(_or_empty(spec.get("job_classes")), "retention.job_classes")
    from jobgate.core.models import JobClass  # here, as in _job_classes

    known = {c.value for c in JobClass} | set(job_classes)
    for name, raw in by_class.items():
        where = join("retention.job_classes", str(name))
        if name not in known:
            r.fail(where, f"unknown job class {name!r} (a built-in one, or one declared under job_classes)")
        classes[str(name)] = days(raw, where)
    letters = None
    if spec.get("resolved_dead_letters_days") is not None:
        letters = days(spec["resolved_dead_letters_days"], "retention.resolved_dead_letters_days")
    return RetentionSettings(finished, classes, letters)


def _evidence(r: Reader, value: Any, base_dir: Path) -> EvidenceSettings:
    spec = r.mapping(_or_empty(value), "evidence")
    r.only_keys(
        spec,
        "evidence",
        (
            "anchor_window_seconds",
            "anchor_sink",
            "anchor_sink_url",
            "signing_key",
            "signing_key_id",
            "seal_interval_seconds",
            "trusted_keys",
            "unsigned_anchors_before",
            "timestamp_authority",
        ),
    )
    d = EvidenceSettings()
    window = d.anchor_window
    if spec.get("anchor_window_seconds") is not None:
        window = r.duration(spec["anchor_window_seconds"], "evidence.anchor_window_seconds")
        if window < timedelta(seconds=1):
            r.fail("evidence.anchor_window_seconds", "at least one second")
    sink = None if spec.get("anchor_sink") is None else base_dir / r.string(spec["anchor_sink"], "evidence.anchor_sink")
    url = None
    if spec.get("anchor_sink_url") is not None:
        url = r.http_url(spec["anchor_sink_url"], "evidence.anchor_sink_url")
        if sink is not None:  # one sink is written and read: the file would be silently unused
            r.fail(
                "evidence.anchor_sink_url", "name one anchor sink: anchor_sink (a file) or anchor_sink_url, not both"
            )
    key = None if spec.get("signing_key") is None else base_dir / r.string(spec["signing_key"], "evidence.signing_key")
    key_id = (
        "evidence" if spec.get("signing_key_id") is None else r.name(spec["signing_key_id"], "evidence.signing_key_id")
    )
    seal_interval = d.seal_interval
    if spec.get("seal_interval_seconds") is not None:
        seal_interval = r.duration(spec["seal_interval_seconds"], "evidence.seal_interval_seconds")
        if not timedelta(seconds=1) <= seal_interval <= timedelta(hours=1):
            r.fail("evidence.seal_interval_seconds", "between 1 and 3600 seconds")
    trusted = _roots(r, spec.get("trusted_keys"), base_dir, "evidence.trusted_keys")
    before = 0
    if spec.get("unsigned_anchors_before") is not None:
        before = r.integer(spec["unsigned_anchors_before"], "evidence.unsigned_anchors_before", minimum=0)
    tsa = None
    if spec.get("timestamp_authority") is not None:
        tsa = _timestamp_authority(r, spec["timestamp_authority"], base_dir)
    return EvidenceSettings(window, sink, url, key, key_id, seal_interval, trusted, before, tsa)


def _timestamp_authority(r: Reader, value: Any, base_dir: Path) -> TimestampSettings:
    where = "evidence.timestamp_authority"
    spec = r.mapping(value, where)
    r.only_keys(spec, where, ("url", "ca_bundle", "timeout_seconds", "max_skew_seconds", "unstamped_anchors_before"))
    for required in ("url", "ca_bundle"):
        if spec.get(required) is None:
            r.fail(f"{where}.{required}", "required")
    url = r.http_url(spec["url"], f"{where}.url")
    d = TimestampSettings(url, base_dir / r.string(spec["ca_bundle"], f"{where}.ca_bundle"))
    timeout, skew, before = d.timeout, d.max_skew, 0
    if spec.get("timeout_seconds") is not None:
        timeout = r.duration(spec["timeout_seconds"], f"{where}.timeout_seconds")
        if not timedelta(seconds=1) <= timeout <= timedelta(minutes=5):
            r.fail(f"{where}.timeout_seconds", "between 1 and 300 seconds")
    if spec.get("max_skew_seconds") is not None:
        skew = r.duration(spec["max_skew_seconds"], f"{where}.max_skew_seconds")
        if not timedelta(seconds=1) <= skew <= timedelta(hours=1):
            r.fail(f"{where}.max_skew_seconds", "between 1 and 3600 seconds")
    if spec.get("unstamped_anchors_before") is not None:
        before = r.integer(spec["unstamped_anchors_before"], f"{where}.unstamped_anchors_before", minimum=0)
    return TimestampSettings(d.url, d.ca_bundle, timeout, skew, before)


def _trust_gates(r: Reader, value: Any, base_dir: Path) -> TrustGateSettings:
    spec = r.mapping(_or_empty(value), "trust_gates")
    r.only_keys(spec, "trust_gates", ("licence", "licence_trust_roots", "environment"))
    d = TrustGateSettings()
    licence = None if spec.get("licence") is None else base_dir / r.string(spec["licence"], "trust_gates.licence")
    roots = _roots(r, spec.get("licence_trust_roots"), base_dir, "trust_gates.licence_trust_roots")
    if licence is not None and not roots:
        r.fail("trust_gates.licence_trust_roots", "a licence is checked against its signers: name at least one")
    env = r.mapping(_or_empty(spec.get("environment")), "trust_gates.environment")
    r.only_keys(env, "trust_gates.environment", ("url", "ttl_seconds", "timeout_seconds"))
    url = None
    if env.get("url") is not None:
        url = r.http_url(env["url"], "trust_gates.environment.url")

    def seconds(key: str, default: timedelta) -> timedelta:
        at = join("trust_gates.environment", key)
        return default if env.get(key) is None else r.duration(env[key], at)

    return TrustGateSettings(
        licence=licence,
        licence_trust_roots=roots,
        environment_url=url,
        environment_ttl=seconds("ttl_seconds", d.environment_ttl),
        environment_timeout=seconds("timeout_seconds", d.environment_timeout),
    )


def _signing(r: Reader, value: Any, base_dir: Path) -> SigningSettings:
    spec = r.mapping(_or_empty(value), "signing")
    r.only_keys(spec, "signing", ("require_signed_definitions", "trust_roots"))
    roots = _roots(r, spec.get("trust_roots"), base_dir, "signing.trust_roots")
    required = False
    if "require_signed_definitions" in spec:
        required = r.boolean(spec["require_signed_definitions"], "signing.require_signed_definitions")
    if required and not roots:
        r.fail("signing.trust_roots", "signed definitions are required but no trust root is configured")
    return SigningSettings(required, roots)


def _roots(r: Reader, value: Any, base_dir: Path, where: str) -> dict[str, str]:
    """Ed25519 public keys by key id: base64 inline, or ``@file`` next to the configuration."""
    from jobgate.governance.signing import public_key

    roots: dict[str, str] = {}
    for key_id, raw in r.mapping(_or_empty(value), where).items():
        at = join(where, r.name(key_id, join(where, key_id)))
        text = r.string(raw, at)
        if text.startswith("@"):  # a file next to the configuration holding the key
            path = base_dir / text[1:]
            try:
                text = path.read_text(encoding="ascii").strip()
            except OSError as exc:
                r.fail(at, f"cannot read {path}: {exc.strerror}")
        try:
            public_key(text, field=at)
        except ValidationError as exc:
            r.fail(at, exc.message)
        roots[key_id] = text
    return roots


def _safe_mode(r: Reader, value: Any, declared: Mapping[str, JobClassSpec]) -> SafeModeSettings:
    from jobgate.core.models import JobClass

    spec = r.mapping(_or_empty(value), "safe_mode")
    r.only_keys(
        spec, "safe_mode", ("suspend_job_classes", "manual_review", "profile_overrides", "job", "allow_automatic")
    )
    classes = (
        r.strings(spec["suspend_job_classes"], "safe_mode.suspend_job_classes") if "suspend_job_classes" in spec else []
    )
    known = {*BUILTIN_CLASSES, *declared}
    for i, name in enumerate(classes):
        if name not in known:
            r.fail(join("safe_mode.suspend_job_classes", i), f"unknown job class {name!r} ({known_classes(declared)})")
        if name == JobClass.SAFE_MODE_JOB.value:
            r.fail(join("safe_mode.suspend_job_classes", i), "safe mode cannot suspend its own job class")
    overrides = r.mapping(_or_empty(spec.get("profile_overrides")), "safe_mode.profile_overrides")
    return SafeModeSettings(
        suspend_job_classes=tuple(dict.fromkeys(classes)),
        manual_review=r.boolean(spec["manual_review"], "safe_mode.manual_review") if "manual_review" in spec else False,
        profile_overrides=dict(overrides),
        job=None if spec.get("job") is None else r.name(spec["job"], "safe_mode.job"),
        allow_automatic=r.boolean(spec["allow_automatic"], "safe_mode.allow_automatic")
        if "allow_automatic" in spec
        else False,
    )


def _server(r: Reader, value: Any) -> ServerSettings:
    spec = r.mapping(_or_empty(value), "server")
    r.only_keys(spec, "server", _SERVER_KEYS)
    d = ServerSettings()

    def seconds(key: str, default: timedelta, unit: float = 1.0) -> timedelta:
        return default if spec.get(key) is None else r.duration(spec[key], join("server", key), unit=unit)

    quota = d.daily_run_quota
    if spec.get("daily_run_quota") is not None:
        quota = r.integer(spec["daily_run_quota"], "server.daily_run_quota", minimum=1)
    body = d.max_body_bytes
    if spec.get("max_body_bytes") is not None:
        body = r.integer(spec["max_body_bytes"], "server.max_body_bytes", minimum=1024, maximum=1 << 30)
    tenant = d.tenant
    if spec.get("tenant") is not None:
        tenant = r.tenant(spec["tenant"], "server.tenant")
    proxies = d.trusted_proxies
    if spec.get("trusted_proxies") is not None:
        proxies = tuple(r.strings(spec["trusted_proxies"], "server.trusted_proxies"))
        for i, entry in enumerate(proxies):
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                r.fail(join("server.trusted_proxies", i), "an IP address or network (10.0.0.0/8), not a name")
    return ServerSettings(
        tenant=tenant,
        max_body_bytes=body,
        daily_run_quota=quota,
        stream_poll=seconds("stream_poll_ms", d.stream_poll, unit=0.001),
        stream_heartbeat=seconds("stream_heartbeat_seconds", d.stream_heartbeat),
        stream_queue_lag=seconds("stream_queue_lag_seconds", d.stream_queue_lag),
        stream_retry=seconds("stream_retry_ms", d.stream_retry, unit=0.001),
        stream_max=seconds("stream_max_seconds", d.stream_max),
        streams_per_token=d.streams_per_token
        if spec.get("streams_per_token") is None
        else r.integer(spec["streams_per_token"], "server.streams_per_token", minimum=1, maximum=10_000),
        trusted_proxies=proxies,
    )


_POLICY_ID_KEYS = {
    "retry_policies": "retry_policy_id",
    "timeout_policies": "timeout_policy_id",
    "sla_policies": "sla_policy_id",
}
_SLA_KEYS = SLA_FIELDS  # the seed §22 deadlines: see core.policies.SlaPolicy


def _policies(r: Reader, doc: Mapping[str, Any], key: str, builtin: Mapping[str, Any]) -> dict[str, Any]:
    """Parse a list of seed §21-shaped policies and lay them over the built-in ones of that kind.

    A configured policy with a built-in id replaces it (the operator owns this host's rules);
    the same id twice in the file is refused, since one of them would be silently lost.
    """
    items = r.sequence([] if doc.get(key) is None else doc[key], key)
    out = dict(builtin)
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        at = join(key, index)
        data = r.mapping(item, at)
        for name, number in data.items():  # bounded here: the policies turn them into timedelta
            if name.endswith("_seconds") and isinstance(number, int | float) and not isinstance(number, bool):
                r.duration(number, join(at, name), allow_zero=True)
        try:
            if key == "retry_policies":
                policy: Any = RetryPolicy.from_dict(data, source=r.source)
                policy_id = policy.retry_policy_id
            elif key == "timeout_policies":
                policy = TimeoutPolicy.from_dict(data, source=r.source)
                policy_id = policy.timeout_policy_id
            else:
                r.only_keys(data, at, _SLA_KEYS)
                policy = SlaPolicy.from_dict(data, source=r.source)
                policy_id = policy.sla_policy_id
        except ConfigurationError:
            raise
        except ValidationError as exc:
            field_path = join(at, exc.field) if exc.field else at
            raise ConfigurationError(exc.message, field=field_path, source=r.source) from None
        if policy_id in seen:
            first = join(key, seen[policy_id])
            r.fail(join(at, _POLICY_ID_KEYS[key]), f"duplicate id {policy_id!r} (first defined at {first})")
        seen[policy_id] = index
        out[policy_id] = policy
    return out
