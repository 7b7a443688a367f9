"""The configuration file: defaults, the demo, and errors that name the key path."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from jobgate.config import (
    DATABASE_ENV,
    JobgateConfig,
    build_config,
    default_config,
    load_config,
    resolve_database_url,
)
from jobgate.core.errors import ConfigurationError
from jobgate.core.policies import BUILTIN_RETRY_POLICIES, RetryStrategy
from jobgate.registry import DEFAULT_NON_RETRYABLE_EXIT_CODES, HttpTargetSpec

Write = Callable[[str, str], Path]


def test_defaults_are_relative_to_the_config_folder(tmp_path: Path) -> None:
    config = default_config(tmp_path)
    base = tmp_path.resolve()
    assert config.path is None and config.base_dir == base
    assert config.database == f"sqlite:///{base}/jobgate.db"
    assert config.data_dir == base / "data"
    assert config.definitions == (base / "definitions",)
    assert config.events.jsonl_path == base / "data" / "events.jsonl" and config.events.log is True
    assert config.sqlite.synchronous == "FULL"
    assert config.profiles == {"default": {}}
    assert config.retry_policies == BUILTIN_RETRY_POLICIES
    assert config.sla_policies == {}
    assert config.runners == {} and config.targets == {} and config.default_runner is None
    w = config.worker
    assert (w.concurrency, w.lease, w.poll_interval, w.shutdown_grace, w.batch_size) == (
        8,
        timedelta(seconds=30),
        timedelta(milliseconds=50),
        timedelta(seconds=30),
        100,
    )


def test_empty_file_is_the_default(write: Write) -> None:
    path = write("conf/jobgate.yaml", "# nothing yet\n")
    loaded = load_config(path.parent)  # a folder means <folder>/jobgate.yaml
    assert loaded.path == path
    assert loaded.database == default_config(path.parent).database


def test_demo_config(demo_config: JobgateConfig, demo_dir: Path) -> None:
    c = demo_config
    assert c.base_dir == demo_dir.resolve()
    assert set(c.targets) == {
        "MEID_TRUST_REPLAY_COORDINATOR",
        "MEID_TRUST_DAL_ANCHOR",
        "MEID_TRUST_FEDERATION_GATEWAY",
        "MEID_TRUST_QUARANTINE_MANAGER",
    }
    replay = c.targets["MEID_TRUST_REPLAY_COORDINATOR"]
    assert replay.cmis == ("vera.TG-REPLAY.ENGINE.COORDINATOR.1_0_0",)
    assert replay.handler == "jobgate.standins:replay_coordinator"
    assert c.runners["python-script"].binary == "python3"
    assert c.runners["python-script"].args == ("{{tmpfile}}",)
    assert c.runners["python-script"].artifact == "report.json"
    assert c.runners["python-script"].stop_grace == timedelta(seconds=5)
    assert c.runners["python-script"].non_retryable_exit_codes == DEFAULT_NON_RETRYABLE_EXIT_CODES
    assert c.default_runner == "python-script"
    assert set(c.profiles) == {"default", "production_scheduler_v1"}
    assert c.sla_policies["replay_sampling_daily_v1"].deadline == timedelta(hours=1)
    assert c.sla_policies["quarantine_review_48h_v1"].requires_escalation is True
    fast = c.retry_policies["demo_fast_retry_v1"]
    assert (fast.strategy, fast.max_attempts, fast.initial_delay) == (
        RetryStrategy.FIXED_DELAY,
        3,
        timedelta(seconds=1),
    )
    assert "standard_exponential_backoff_v1" in c.retry_policies  # built-ins stay
    assert c.queues["replay"].rate_per_second == 2 and c.queues["replay"].burst == 5
    assert c.registries.runners == c.runners and c.registries.targets == c.targets


def test_full_shapes(write: Write) -> None:
    path = write(
        "jobgate.yaml",
        """
database: postgresql+psycopg://jobgate@db/jobgate
data_dir: /var/lib/jobgate
definitions: [defs, more/defs]
runners:
  etl:
    binary: ./etl
    args: ["--in", "{{tmpfile}}"]
    non_retryable_exit_codes: [2, 64]
    env: {B: "2", A: "1"}
targets:
  MEID_HTTP:
    cmi: [a.1, a.2]
    http: {url: "https://engine.example/run", timeout_seconds: 5, headers: {X-Key: abc}}
  MEID_CMD:
    cmi: b.1
    runner: etl
retry_policies:
  - retry_policy_id: no_retry_v1
    strategy: none
events: {jsonl_path: null, log: false}
sqlite: {synchronous: normal}
worker: {concurrency: 2, lease_seconds: 10, poll_interval_ms: 20, shutdown_grace_seconds: 0, batch_size: 10}
""",
    )
    c = load_config(path)
    base = path.parent.resolve()
    assert c.database == "postgresql+psycopg://jobgate@db/jobgate"
    assert c.data_dir == Path("/var/lib/jobgate")
    assert c.definitions == (base / "defs", base / "more" / "defs")
    assert c.runners["etl"].non_retryable_exit_codes == frozenset({2, 64})
    # a relative binary path, like every path in the file, is from the file's folder (not from
    # wherever a worker was started: found by a review)
    assert c.runners["etl"].binary == str(base / "etl")
    assert c.runners["etl"].env == (("A", "1"), ("B", "2"))
    assert c.targets["MEID_HTTP"].http == HttpTargetSpec(
        "https://engine.example/run", timedelta(seconds=5), (("X-Key", "abc"),)
    )
    assert c.targets["MEID_HTTP"].cmis == ("a.1", "a.2")
    assert c.targets["MEID_CMD"].runner == "etl"
    assert c.events.jsonl_path is None and c.events.log is False
    assert c.sqlite.synchronous == "NORMAL"
    assert c.worker.poll_interval == timedelta(milliseconds=20)
    assert c.worker.shutdown_grace == timedelta(0)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///state/jobgate.db", "sqlite:///{base}/state/jobgate.db"),
        ("sqlite:////abs/jobgate.db", "sqlite:////abs/jobgate.db"),
        ("sqlite:///jobgate.db?timeout=5", "sqlite:///{base}/jobgate.db?timeout=5"),
        ("sqlite:///:memory:", "sqlite:///:memory:"),
        ("sqlite://", "sqlite://"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
    ],
)
def test_relative_sqlite_files_follow_the_config(write: Write, url: str, expected: str) -> None:
    path = write("jobgate.yaml", f"database: '{url}'\n")
    assert load_config(path).database == expected.format(base=path.parent.resolve())


def test_database_url_precedence(tmp_path: Path) -> None:
    config = default_config(tmp_path)
    assert resolve_database_url(config, None, {}) == config.database
    assert resolve_database_url(config, None, {DATABASE_ENV: ""}) == config.database
    assert resolve_database_url(config, None, {DATABASE_ENV: "sqlite:///env.db"}) == "sqlite:///env.db"
    assert resolve_database_url(config, "sqlite:///cli.db", {DATABASE_ENV: "sqlite:///env.db"}) == "sqlite:///cli.db"


def test_database_url_reads_the_process_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATABASE_ENV, "postgresql://from-env/db")
    assert resolve_database_url(default_config(tmp_path), None) == "postgresql://from-env/db"


BAD: list[tuple[str, str | None, str]] = [
    ("colour: blue\n", "colour", "unknown field"),
    ("runners:\n  etl:\n    binary: ./etl\n    args: [--in, 3]\n", "runners.etl.args[1]", "must be a string"),
    ("runners:\n  etl: {args: []}\n", "runners.etl.binary", "must be a non-empty string"),
    ("runners:\n  etl: {binary: x, argz: []}\n", "runners.etl.argz", "unknown field (did you mean 'args'?)"),
    (
        "runners:\n  etl: {binary: x, non_retryable_exit_codes: [0]}\n",
        "runners.etl.non_retryable_exit_codes[0]",
        "must be >= 1",
    ),
    (
        "runners:\n  etl: {binary: x, artifact: ../out.txt}\n",
        "runners.etl.artifact",
        "inside the run's work directory",
    ),
    ("runners:\n  etl: {binary: x, env: {1BAD: x}}\n", "runners.etl.env", "variable names"),
    ("runners:\n  'bad name': {binary: x}\n", "runners.bad name", "must be 1-200 characters"),
    ("default_runner: nope\n", "default_runner", "unknown runner 'nope' (known: none are configured)"),
    ("targets:\n  M: {cmi: c.1, runner: ghost}\n", "targets.M.runner", "unknown runner 'ghost'"),
    ("targets:\n  M: {handler: 'm:f'}\n", "targets.M.cmi", "required"),
    ("targets:\n  M: {cmi: [], handler: 'm:f'}\n", "targets.M.cmi", "at least one CMI"),
    ("targets:\n  M: {cmi: c.1}\n", "targets.M", "needs exactly one of handler, runner, http (found: none)"),
    (
        "runners: {r: {binary: x}}\ntargets:\n  M: {cmi: c.1, handler: 'm:f', runner: r}\n",
        "targets.M",
        "(found: handler, runner)",
    ),
    (
        "targets:\n  M: {cmi: c.1, handler: 'not a handler'}\n",
        "targets.M.handler",
        "must be 'module:function'",
    ),
    ("targets:\n  M: {cmi: c.1, http: {url: 'ftp://x'}}\n", "targets.M.http.url", "http:// or https://"),
    ("profiles:\n  default: [a]\n", "profiles.default", "must be a mapping, not a list"),
    (
        "retry_policies:\n  - {retry_policy_id: r, strategy: sometimes}\n",
        "retry_policies[0].strategy",
        "must be one of: none, fixed_delay",
    ),
    (
        "retry_policies:\n  - {retry_policy_id: r, strategy: none, max_attempts: 3}\n",
        "retry_policies[0].max_attempts",
        "exactly 1 attempt",
    ),
    ("retry_policies:\n  - {strategy: none}\n", "retry_policies[0].retry_policy_id", "required"),
    (
        "retry_policies:\n  - {retry_policy_id: r, strategy: none}\n  - {retry_policy_id: r, strategy: none}",
        "retry_policies[1].retry_policy_id",
        "duplicate id 'r' (first defined at retry_policies[0])",
    ),
    (
        "timeout_policies:\n  - {timeout_policy_id: t, execution_timeout_seconds: -1}\n",
        "timeout_policies[0].execution_timeout_seconds",
        "must not be negative",
    ),
    (
        "sla_policies:\n  - {sla_policy_id: s, deadline_seconds: 0}\n",
        "sla_policies[0].deadline_seconds",
        "must be a positive number",
    ),
    (
        "sla_policies:\n  - {sla_policy_id: s, deadline_seconds: 5, escalate: true}\n",
        "sla_policies[0].escalate",
        "unknown field",
    ),
    ("sla_policies: {s: 1}\n", "sla_policies", "must be a list"),
    ("queues:\n  q: {burst: 3}\n", "queues.q.burst", "only meaningful with rate_per_second"),
    ("queues:\n  q: {rate_per_second: 0}\n", "queues.q.rate_per_second", "must be greater than 0"),
    ("worker: {concurrency: 0}\n", "worker.concurrency", "must be >= 1"),
    ("worker: {lease_seconds: fast}\n", "worker.lease_seconds", "must be a number, not a string"),
    ("worker: {threads: 3}\n", "worker.threads", "unknown field"),
    ("events: {log: maybe}\n", "events.log", "must be true or false"),
    ("sqlite: {synchronous: OFF}\n", "sqlite.synchronous", "must be one of: FULL, NORMAL"),
    ("database: mysql://x/y\n", "database", "must be a sqlite:///<file> or postgresql://... URL"),
    ("definitions: defs\n", "definitions", "must be a list, not a string"),
    ("- just\n- a list\n", None, "must be a mapping, not a list"),
    (
        "runners:\n  etl: {binary: x}\n  etl: {binary: y}\n",
        None,
        "invalid YAML at line 3, column 3: duplicate key 'etl'",
    ),
    ("runners:\n  etl: {binary: x\n", None, "invalid YAML at line 3"),
    ("profiles:\n  default: {threshold: .nan}\n", "profiles.default.threshold", "must be a finite number"),
    (
        "runners:\n  r: {binary: x, stop_grace_seconds: 1.0e+300}\n",
        "runners.r.stop_grace_seconds",
        "(100 years)",
    ),
    ("worker: {poll_interval_ms: 1.0e+300}\n", "worker.poll_interval_ms", "must be at most 3153600000000"),
    (
        "retry_policies:\n  - {retry_policy_id: r, strategy: fixed_delay, max_delay_seconds: 1.0e+300}\n",
        "retry_policies[0].max_delay_seconds",
        "must be at most",
    ),
    (
        "sla_policies:\n  - {sla_policy_id: s, deadline_seconds: -5}\n",
        "sla_policies[0].deadline_seconds",
        "negative",
    ),
]


@pytest.mark.parametrize(("text", "field", "rule"), BAD, ids=[f"{b[1]}|{b[2][:30]}" for b in BAD])
def test_errors_name_the_file_and_key_path(write: Write, text: str, field: str | None, rule: str) -> None:
    path = write("jobgate.yaml", text)
    with pytest.raises(ConfigurationError) as caught:
        load_config(path)
    assert caught.value.source == str(path)
    assert caught.value.field == field
    assert rule in caught.value.message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_config(tmp_path / "jobgate.yaml")
    assert (caught.value.source, caught.value.message) == (str(tmp_path / "jobgate.yaml"), "no such file")


def test_profile_values_stay_json(write: Write) -> None:
    path = write("jobgate.yaml", "profiles:\n  p: {since: 2026-01-01, nested: {a: [1, 2.5, true, null]}}\n")
    assert load_config(path).profiles["p"] == {"since": "2026-01-01", "nested": {"a": [1, 2.5, True, None]}}


def test_configured_policy_replaces_a_builtin(write: Write) -> None:
    path = write(
        "jobgate.yaml",
        "retry_policies:\n  - {retry_policy_id: fixed_delay_v1, strategy: fixed_delay, "
        "max_attempts: 2, initial_delay_seconds: 1, max_delay_seconds: 1}\n",
    )
    assert load_config(path).retry_policies["fixed_delay_v1"].max_attempts == 2


URL_FIELDS = [
    ({"evidence": {"anchor_sink_url": "{url}"}}, "evidence.anchor_sink_url"),
    ({"telemetry": {"sink_url": "{url}"}}, "telemetry.sink_url"),
    ({"alerts": {"webhook_url": "{url}"}}, "alerts.webhook_url"),
    ({"tracing": {"endpoint": "{url}"}}, "tracing.endpoint"),
    ({"trust_gates": {"environment": {"url": "{url}"}}}, "trust_gates.environment.url"),
    ({"targets": {"M1": {"cmi": "a.1", "http": {"url": "{url}"}}}}, "targets.M1.http.url"),
]
BAD_URLS = [
    "http://user:s3cret@[::1/p",  # an IPv6 host never closed
    "http://host:99999/",  # no such port
    "http://host:0/",
    "http://host:port/",
    "http:///no-host",
    "https://",
    "ftp://host/",
    "http://host/a b",
    "http://host/\x00",
    # found by the next review: hosts no request can be made to (exit 70 where used)
    "http://u:s3cret@a..b:18150/p",  # an empty label
    "http://" + "a" * 70 + ".example/",  # a label over 63 characters
    "http://u:s3cret@xn--zz:18150/",  # not a valid A-label
    # and by the regression review: hosts httpx refuses (InvalidURL, neither ValueError nor UnicodeError)
    "http://\u2603.net/x",
    "http://[v1.x]/x",
    "http://\uff41\uff42\uff43.com/x",
    "http://ex\xadample.com/x",
]


@pytest.mark.parametrize(("doc", "field"), URL_FIELDS, ids=[f for _, f in URL_FIELDS])
@pytest.mark.parametrize("url", BAD_URLS)
def test_every_url_setting_is_one_that_can_be_taken_apart(
    tmp_path: Path, doc: dict[str, object], field: str, url: str
) -> None:
    """Found by a regression review: a URL that only started right ('http://u:p@[::1/p') was
    accepted and failed where it was used (audit anchor exited 70). One rule for every URL
    setting; the refusal names the setting and does not repeat the URL (it may hold a secret)."""

    def filled(value: object) -> object:
        if isinstance(value, dict):
            return {k: filled(v) for k, v in value.items()}
        return url if value == "{url}" else value

    document = filled(doc)
    with pytest.raises(ConfigurationError) as refused:
        build_config(document, base_dir=tmp_path, path=None)
    assert refused.value.field == field and "s3cret" not in str(refused.value)


@pytest.mark.parametrize("zone", ["right/Europe/London", "posix/Europe/London", "Factory", "localtime", "Mars/Base"])
def test_a_zone_is_refused_by_one_rule_at_every_door(tmp_path: Path, zone: str) -> None:
    """Found by a review: a ``right/`` zone was accepted (Python reads it an hour off in winter)
    and ``Factory`` was accepted by the configuration, then refused at every cron definition's
    apply, naming a field the definition did not have."""
    from jobgate.scheduling.model import Schedule, ScheduleKind, check_schedule, zone_problem

    assert zone_problem(zone) is not None and zone_problem("Europe/London") is None
    with pytest.raises(ConfigurationError) as refused:
        build_config({"scheduling": {"timezone": zone}}, base_dir=tmp_path, path=None)
    assert refused.value.field == "scheduling.timezone"
    from datetime import UTC, datetime

    from jobgate.core.errors import ValidationError

    with pytest.raises(ValidationError) as refused_schedule:
        check_schedule(
            Schedule("s", "job", ScheduleKind.CRON, datetime(2026, 1, 1, tzinfo=UTC), cron="0 1 * * *", timezone=zone)
        )
    assert refused_schedule.value.field == "timezone"


def test_two_anchor_sinks_are_refused_naming_the_url(tmp_path: Path) -> None:
    """Found by a review: with both a file and an HTTP sink set, anchors went to the URL alone
    and the file was never written, silently."""
    both = {"evidence": {"anchor_sink": "anchors.jsonl", "anchor_sink_url": "https://sink.example/anchors"}}
    with pytest.raises(ConfigurationError) as refused:
        build_config(both, base_dir=tmp_path, path=None)
    assert refused.value.field == "evidence.anchor_sink_url" and "not both" in refused.value.message
    one = build_config({"evidence": {"anchor_sink_url": "https://sink.example/anchors"}}, base_dir=tmp_path, path=None)
    assert one.evidence.anchor_sink_url == "https://sink.example/anchors"


def test_trusted_proxies_are_addresses_or_networks(tmp_path: Path) -> None:
    ok = build_config(
        {"server": {"trusted_proxies": ["10.0.0.0/8", "192.0.2.7", "fd00::1"]}}, base_dir=tmp_path, path=None
    )
    assert ok.server.trusted_proxies == ("10.0.0.0/8", "192.0.2.7", "fd00::1")
    assert build_config({}, base_dir=tmp_path, path=None).server.trusted_proxies == ("127.0.0.1",)
    with pytest.raises(ConfigurationError) as refused:
        build_config({"server": {"trusted_proxies": ["proxy.example"]}}, base_dir=tmp_path, path=None)
    assert refused.value.field == "server.trusted_proxies[0]"
