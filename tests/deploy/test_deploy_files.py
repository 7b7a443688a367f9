"""The files of ``deploy/`` hold together and say what jobgate does: the configuration loads with
jobgate's own loader, every YAML file parses, the compose file names only services and volumes it
defines, the systemd units parse (``systemd-analyze verify`` where it is installed), the Kubernetes
manifests have what the API server requires, the Dockerfile keeps its rules, and every jobgate
command line in them is one the command line accepts (command, options, values)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.docs.test_docs_site import resolve

from jobgate.api.routes.health import router as health_router
from jobgate.cli.context import CONFIG_ENV
from jobgate.cli.serve import serve
from jobgate.config import DATABASE_ENV, load_config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CONFIG = DEPLOY / "jobgate.yaml"
IN_CONTAINER = "/etc/jobgate/jobgate.yaml"
DATA_DIR = "/var/lib/jobgate"
YAML_FILES = sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml"), ROOT / "mkdocs.yml"])
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
HEALTH_ROUTES = {getattr(route, "path", None) for route in health_router.routes}


def grace() -> timedelta:
    return load_config(CONFIG).worker.shutdown_grace


def test_the_environment_variables_the_files_use_are_the_ones_jobgate_reads() -> None:
    assert (DATABASE_ENV, CONFIG_ENV) == ("JOBGATE_DATABASE_URL", "JOBGATE_CONFIG")
    used = set()
    for path in DEPLOY.rglob("*"):
        if path.is_file():
            used |= set(re.findall(r"\bJOBGATE_[A-Z_]+", path.read_text(encoding="utf-8")))
    # JOBGATE_DB_PASSWORD feeds compose and the database's first start; JOBGATE_WORKER_ARGS a unit.
    assert used == {DATABASE_ENV, CONFIG_ENV, "JOBGATE_DB_PASSWORD", "JOBGATE_WORKER_ARGS"}


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_yaml_file_parses(path: Path) -> None:
    documents = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    assert documents and all(isinstance(d, dict) for d in documents)


def test_the_configuration_loads_with_jobgates_loader_and_names_no_database() -> None:
    config = load_config(CONFIG)
    assert str(config.data_dir) == DATA_DIR
    assert config.governance.four_eyes
    assert "database" not in yaml.safe_load(CONFIG.read_text(encoding="utf-8"))  # from JOBGATE_DATABASE_URL
    assert config.logging.format == "json"
    assert timedelta(0) < config.worker.shutdown_grace <= timedelta(seconds=60)


# Compose ----------------------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
    return document


def command_of(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    return shlex.split(command) if isinstance(command, str) else list(command)


def seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)", value)
    assert match, value
    return int(match.group(1)) * (60 if match.group(2) == "m" else 1)


def test_compose_has_postgres_a_one_shot_migrate_serve_and_two_workers() -> None:
    services = compose()["services"]
    assert services["postgres"]["image"].startswith("postgres:15")
    assert command_of(services["migrate"]) == ["migrate"] and services["migrate"]["restart"] == "no"
    assert resolve(command_of(services["serve"])) == ["serve"]
    assert "--no-worker" in command_of(services["serve"])
    workers = [name for name, s in services.items() if name != "postgres" and command_of(s)[0] == "worker"]
    assert len(workers) == 2
    for name in ("serve", *workers):
        service = services[name]
        resolve(command_of(service))
        assert service["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}
        assert seconds(service["stop_grace_period"]) > grace().total_seconds()
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    serve_args = command_of(services["serve"])
    assert serve_args[serve_args.index("--host") + 1] == "0.0.0.0"
    assert "127.0.0.1:8080:8080" in services["serve"]["ports"]


def test_compose_names_only_services_volumes_and_files_it_has() -> None:
    document = compose()
    services = document["services"]
    volumes = set(document.get("volumes") or {})
    used_volumes = set()
    for name, service in services.items():
        for target in service.get("depends_on") or {}:
            assert target in services and target != name, f"{name} depends on {target}, which is not a service"
        for mount in service.get("volumes") or []:
            source = mount.split(":", 1)[0]
            if source.startswith((".", "/")):
                assert (DEPLOY / source).exists(), f"{name} mounts {source}, which is not in deploy/"
            else:
                used_volumes.add(source)
                assert source in volumes, f"{name} mounts the volume {source}, which is not defined"
        if "build" in service:
            context = (DEPLOY / service["build"]["context"]).resolve()
            assert context == ROOT and (context / service["build"]["dockerfile"]).is_file()
        if name != "postgres":
            env = service["environment"]
            assert env[CONFIG_ENV] == IN_CONTAINER and env[DATABASE_ENV].startswith("postgresql://jobgate:")
            assert f"./jobgate.yaml:{IN_CONTAINER}:ro" in service["volumes"]
            assert any(m.endswith(f":{DATA_DIR}") for m in service["volumes"])
    assert used_volumes == volumes, f"volumes defined and not used: {volumes - used_volumes}"


def test_postgres_gives_jobgate_an_ordinary_role_owning_its_schema() -> None:
    script = DEPLOY / "postgres" / "init-jobgate.sh"
    assert script.stat().st_mode & 0o111, "the postgres image runs an executable init script"
    text = script.read_text(encoding="utf-8")
    assert "CREATE ROLE jobgate LOGIN" in text and "CREATE SCHEMA jobgate AUTHORIZATION jobgate" in text
    assert not re.search(r"SUPERUSER|BYPASSRLS|CREATEROLE", text.split("<<", 1)[1])


# systemd ----------------------------------------------------------------------------------------


def unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """A unit file's sections and keys; a key may repeat (EnvironmentFile=), so values are lists."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None and "=" in line and not line.endswith("\\"), f"{path.name}: {raw!r}"
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def test_the_systemd_units_run_serve_the_scheduler_and_templated_workers_hardened() -> None:
    names = {u.name for u in UNITS}
    assert names == {"jobgate-serve.service", "jobgate-scheduler.service", "jobgate-worker@.service"}
    commands = {}
    for path in UNITS:
        sections = unit(path)
        assert set(sections) == {"Unit", "Service", "Install"}, path.name
        service = {k: v[-1] for k, v in sections["Service"].items()}
        assert service["User"] == service["Group"] == "jobgate"
        assert "/etc/jobgate/jobgate.env" in sections["Service"]["EnvironmentFile"]
        for key, value in {
            "NoNewPrivileges": "yes",
            "ProtectSystem": "strict",
            "PrivateTmp": "yes",
            "Restart": "on-failure",
            "KillSignal": "SIGTERM",
            "ReadWritePaths": DATA_DIR,
        }.items():
            assert service.get(key) == value, f"{path.name}: {key}={service.get(key)}"
        assert int(service["TimeoutStopSec"]) > grace().total_seconds() * 2, "past the grace, and the stops after it"
        assert sections["Install"]["WantedBy"] == ["multi-user.target"]
        words = shlex.split(service["ExecStart"])
        assert words[0] == "/opt/jobgate/venv/bin/jobgate", path.name
        args = [w for w in words[1:] if not w.startswith("$")]
        commands[path.name] = resolve(args)
    assert commands == {
        "jobgate-serve.service": ["serve"],
        "jobgate-scheduler.service": ["scheduler"],
        "jobgate-worker@.service": ["worker"],
    }
    serve_args = shlex.split(unit(DEPLOY / "systemd" / "jobgate-serve.service")["Service"]["ExecStart"][0])
    assert {"--no-worker", "--no-scheduler", "--migrate"} <= set(serve_args)  # the other units run those
    assert "%i" in unit(DEPLOY / "systemd" / "jobgate-worker@.service")["Unit"]["Description"][0]
    env_example = (DEPLOY / "systemd" / "jobgate.env.example").read_text(encoding="utf-8")
    assert f"{CONFIG_ENV}=/etc/jobgate/jobgate.yaml" in env_example and f"{DATABASE_ENV}=postgresql://" in env_example


def test_systemd_analyze_verifies_the_units(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here (the parse above still ran)")
    jobgate = Path(sys.executable).parent / "jobgate"
    assert jobgate.exists()
    files = []
    for path in UNITS:  # verify checks that ExecStart's binary exists: point it at this one
        text = path.read_text(encoding="utf-8").replace("/opt/jobgate/venv/bin/jobgate", str(jobgate))
        for name in {path.name, path.name.replace("@.", "@1.")}:
            (tmp_path / name).write_text(text, encoding="utf-8")
            files.append(str(tmp_path / name))
    proc = subprocess.run([analyze, "verify", "--man=no", *files], capture_output=True, text=True, timeout=60)
    complaints = [line for line in proc.stderr.splitlines() if "jobgate" in line]
    assert proc.returncode == 0 and not complaints, proc.stderr


# Kubernetes -------------------------------------------------------------------------------------


def manifests() -> dict[tuple[str, str], dict[str, Any]]:
    found = {}
    for path in MANIFESTS:
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            assert {"apiVersion", "kind", "metadata"} <= set(doc), path.name
            found[(doc["kind"], doc["metadata"]["name"])] = doc
    return found


def check_pod(spec: dict[str, Any], config_map: str) -> dict[str, Any]:
    """The pod rules every jobgate pod keeps; returns its one container."""
    security = spec["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] != 0 and security["runAsGroup"] != 0
    (container,) = spec["containers"]
    assert container["image"] and ":" in container["image"] and not container["image"].endswith(":latest")
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False and context["capabilities"]["drop"] == ["ALL"]
    assert context["readOnlyRootFilesystem"] is True
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    env = {e["name"]: e for e in container["env"]}
    assert env[CONFIG_ENV]["value"] == IN_CONTAINER
    assert env[DATABASE_ENV]["valueFrom"]["secretKeyRef"] == {"name": "jobgate-database", "key": "url"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert set(mounts.values()) <= set(volumes), "a volumeMount names a volume the pod does not have"
    assert volumes[mounts["/etc/jobgate"]]["configMap"]["name"] == config_map
    assert DATA_DIR in mounts
    resolve(container["args"])
    return dict(container)


def test_the_kubernetes_manifests_have_what_they_need() -> None:
    found = manifests()
    config_map = found[("ConfigMap", "jobgate-config")]
    assert config_map["data"]["jobgate.yaml"] == CONFIG.read_text(encoding="utf-8"), "deploy/jobgate.yaml differs"
    grace_s = grace().total_seconds()

    job = found[("Job", "jobgate-migrate")]
    assert job["apiVersion"] == "batch/v1"
    migrate = check_pod(job["spec"]["template"]["spec"], "jobgate-config")
    assert migrate["args"] == ["migrate"] and job["spec"]["template"]["spec"]["restartPolicy"] in {"OnFailure", "Never"}

    deployments = {}
    for name in ("jobgate-serve", "jobgate-worker"):
        deployment = found[("Deployment", name)]
        assert deployment["apiVersion"] == "apps/v1"
        template = deployment["spec"]["template"]
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector.items() <= template["metadata"]["labels"].items(), f"{name}: the selector misses its pods"
        assert template["spec"]["terminationGracePeriodSeconds"] > grace_s
        deployments[name] = (deployment, check_pod(template["spec"], "jobgate-config"))

    serve_deployment, serve_container = deployments["jobgate-serve"]
    assert resolve(serve_container["args"]) == ["serve"] and "--no-worker" in serve_container["args"]
    assert serve_container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert serve_container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert {"/readyz", "/healthz"} <= HEALTH_ROUTES
    ports = {p["name"]: p["containerPort"] for p in serve_container["ports"]}
    args = serve_container["args"]
    assert ports["http"] == int(args[args.index("--port") + 1]) and args[args.index("--host") + 1] == "0.0.0.0"
    for probe in ("readinessProbe", "livenessProbe"):
        assert serve_container[probe]["httpGet"]["port"] in ports

    service = found[("Service", "jobgate")]
    pod_labels = serve_deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert all(p["targetPort"] in ports or p["targetPort"] in ports.values() for p in service["spec"]["ports"])

    worker_deployment, worker_container = deployments["jobgate-worker"]
    assert worker_deployment["spec"]["replicas"] == 2 and resolve(worker_container["args"]) == ["worker"]


def test_the_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kubernetes" / "kustomization.yaml").read_text(encoding="utf-8"))
    assert kustomization["kind"] == "Kustomization"
    assert sorted(kustomization["resources"]) == sorted(p.name for p in MANIFESTS if p.name != "kustomization.yaml")


# Dockerfile -------------------------------------------------------------------------------------


def instructions() -> list[tuple[int, str, str]]:
    """(stage, INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    out: list[tuple[int, str, str]] = []
    stage = -1
    for line in joined.splitlines():
        if not line.strip():
            continue
        word, _, rest = line.strip().partition(" ")
        if word.upper() == "FROM":
            stage += 1
        out.append((stage, word.upper(), " ".join(rest.split())))
    return out


def test_the_dockerfile_is_multi_stage_non_root_and_without_build_tools_in_its_final_image() -> None:
    steps = instructions()
    froms = [args for _, word, args in steps if word == "FROM"]
    assert len(froms) >= 2 and froms[0].endswith(" AS builder"), "a builder stage, then the image"
    stages = [f.split(" AS ")[0] for f in froms]
    for image in stages:  # pinned: a tag, never latest
        assert re.fullmatch(r"[\w./-]+:[\w.-]+", image) and not image.endswith(":latest"), image
    assert stages[-1] == "python:3.11-slim"
    last = len(froms) - 1
    builder = " ".join(args for stage, word, args in steps if stage == 0 and word == "RUN")
    assert "pip wheel" in builder and "--wheel-dir /wheels" in builder
    final = [(word, args) for stage, word, args in steps if stage == last]
    runs = " ".join(args for word, args in final if word == "RUN")
    for tool in ("apt-get", "apk ", "gcc", "build-essential", "pip wheel", "python -m build", "setuptools", "git "):
        assert tool not in runs, f"the final stage runs {tool}"
    assert "--no-index" in runs and "/wheels/jobgate-*.whl" in runs and "from=builder" in runs
    copies = [args for word, args in final if word == "COPY"]
    assert copies == ["deploy/jobgate.yaml /etc/jobgate/jobgate.yaml"], "only the configuration is copied in"

    words = [word for word, _ in final]
    users = [args for word, args in final if word == "USER"]
    assert users and words.index("USER") > max(i for i, w in enumerate(words) if w == "RUN"), "USER after every RUN"
    assert users[-1].split(":")[0] not in {"0", "root"}
    assert f"{CONFIG_ENV}={IN_CONTAINER}" in " ".join(args for word, args in final if word == "ENV")

    port = next(p.default for p in serve.params if p.name == "port")
    assert [args for word, args in final if word == "EXPOSE"] == [str(port)]
    (healthcheck,) = [args for word, args in final if word == "HEALTHCHECK"]
    assert "/healthz" in healthcheck and "urllib" in healthcheck and "/healthz" in HEALTH_ROUTES
    assert "curl" not in healthcheck and "wget" not in healthcheck
    (entrypoint,) = [json.loads(args) for word, args in final if word == "ENTRYPOINT"]
    (cmd,) = [json.loads(args) for word, args in final if word == "CMD"]
    assert entrypoint == ["jobgate"] and resolve(cmd) == ["serve"]
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0" and cmd[cmd.index("--port") + 1] == str(port)


def test_the_build_context_holds_what_the_dockerfile_copies_and_nothing_else() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*", "an allow-list: everything is left out but what is named"
    allowed = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    for _, word, args in instructions():
        if word == "COPY" and not args.startswith("--from"):
            for source in args.split()[:-1]:
                assert source.rstrip("/") in allowed and (ROOT / source).exists(), source


def test_hadolint_passes_the_dockerfile() -> None:
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        pytest.skip("hadolint is not installed here (the static rules above still ran)")
    proc = subprocess.run([hadolint, str(DEPLOY / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
