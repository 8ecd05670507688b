"""``tideway schema`` and ``tideway devices`` run as a user would, against a real Postgres."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "weather-station.yaml"
PAYLOAD = REPO / "examples" / "payload.json"
# What the console script runs, from this checkout (an installed `tideway` script may belong
# to another checkout of the project).
TIDEWAY = (sys.executable, "-c", "from streams.cli.main import main; main()")


async def tideway(dsn: str | None, *args: str, cwd: Path,
                  env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run the CLI as a user would (``env``: more ``TIDEWAY_*`` settings, such as NATS's)."""
    extra, env = env or {}, {k: v for k, v in os.environ.items() if not k.startswith("TIDEWAY_")}
    env.update(extra)
    env["TIDEWAY_CONFIG"] = str(cwd / "absent.toml")
    env["COLUMNS"] = "200"
    env["PYTHONPATH"] = str(REPO)
    if dsn is not None:
        env["TIDEWAY_POSTGRES_DSN"] = dsn
    proc = await asyncio.create_subprocess_exec(
        *TIDEWAY, *args, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def as_json(out: str) -> Any:
    return json.loads(out)


async def test_schema_commands(pg_dsn: str, tmp_path: Path) -> None:
    code, out, err = await tideway(pg_dsn, "schema", "apply", str(EXAMPLE), cwd=tmp_path)
    assert code == 0, err
    assert "applied weather-station v1 for tenant acme" in out

    code, out, _ = await tideway(pg_dsn, "schema", "apply", str(EXAMPLE), "--json", cwd=tmp_path)
    assert code == 0
    result = as_json(out)
    assert (result["status"], result["version"], result["created"]) == ("unchanged", 1, False)

    code, out, _ = await tideway(pg_dsn, "schema", "list", "--tenant", "acme", "--json",
                                 cwd=tmp_path)
    assert code == 0
    assert [(s["name"], s["latest_version"]) for s in as_json(out)] == [("weather-station", 1)]

    code, out, _ = await tideway(pg_dsn, "schema", "show", "weather-station", "--tenant", "acme",
                                 "--json", cwd=tmp_path)
    shown = as_json(out)
    assert shown["version"] == 1 and shown["source_text"] == EXAMPLE.read_text()
    assert [p["name"] for p in shown["parameters"]][:2] == ["temp_c", "humidity"]

    code, _, err = await tideway(pg_dsn, "schema", "show", "nope", "--tenant", "acme",
                                 cwd=tmp_path)
    assert code == 1 and "not found" in err and "NOT_FOUND" in err


async def test_schema_apply_refuses_a_broken_file_naming_it(pg_dsn: str, tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(EXAMPLE.read_text().replace("temp_c * 9 / 5 + 32", "temp_c.__class__"))
    code, _, err = await tideway(pg_dsn, "schema", "apply", str(broken), cwd=tmp_path)
    assert code == 1
    assert "broken.yaml" in err and "topic 'state'" in err and "parameter 'temp_f'" in err
    assert "EXPR_FORBIDDEN" in err


async def test_schema_test_needs_no_services(tmp_path: Path) -> None:
    code, out, err = await tideway(None, "schema", "test", str(EXAMPLE), "--payload",
                                   str(PAYLOAD), "--json", cwd=tmp_path)
    assert code == 0, err
    report = as_json(out)
    assert report["outcome"] == "processed"
    assert report["mutate"]["values"]["battery_v"] == 12.0
    assert report["derive"]["derived"]["temp_f"] == 88.7
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rh": 50}))
    code, out, _ = await tideway(None, "schema", "test", str(EXAMPLE), "--payload", str(bad),
                                 cwd=tmp_path)
    assert code == 3  # ExitCode.FAILED: the command worked, the payload would be refused
    assert "MISSING_REQUIRED" in out and "failed_validation" in out


async def test_schema_test_holds_an_envelope_to_the_ingest_contract(tmp_path: Path) -> None:
    # What the running pipeline dead-letters as ENVELOPE_INVALID is no "processed" here.
    bad = tmp_path / "bad-envelope.json"
    bad.write_text(json.dumps({"ts": "yesterday-ish", "seq": -5,
                               "values": json.loads(PAYLOAD.read_text())["values"]}))
    code, out, _ = await tideway(None, "schema", "test", str(EXAMPLE), "--payload", str(bad),
                                 "--json", cwd=tmp_path)
    assert code == 3, out
    report = as_json(out)
    assert report["outcome"] == "failed_ingress"
    assert report["ingress"]["code"] == "ENVELOPE_INVALID" and report["validate"] is None
    bad.write_text(PAYLOAD.read_text().replace('"seq": 42', '"seq": -5'))
    code, out, _ = await tideway(None, "schema", "test", str(EXAMPLE), "--payload", str(bad),
                                 cwd=tmp_path)
    assert code == 3 and "ENVELOPE_INVALID" in out and "failed_ingress" in out, out


async def test_device_commands(pg_dsn: str, tmp_path: Path) -> None:
    assert (await tideway(pg_dsn, "schema", "apply", str(EXAMPLE), cwd=tmp_path))[0] == 0
    code, out, err = await tideway(pg_dsn, "devices", "add", "ws-001", "--tenant", "acme",
                                   "--schema", "weather-station", "--json", cwd=tmp_path)
    assert code == 0, err
    assert as_json(out)["schema_version"] == 1
    code, out, _ = await tideway(pg_dsn, "devices", "deactivate", "ws-001", "--tenant", "acme",
                                 cwd=tmp_path)
    assert code == 0 and "deactivated" in out
    code, out, _ = await tideway(pg_dsn, "devices", "list", "--tenant", "acme", "--inactive",
                                 "--json", cwd=tmp_path)
    assert [d["external_id"] for d in as_json(out)] == ["ws-001"]
    code, _, err = await tideway(pg_dsn, "devices", "add", "ws-001", "--tenant", "acme",
                                 cwd=tmp_path)
    assert code == 1 and "already exists" in err


async def test_schema_test_reads_a_huge_number_as_the_pipeline_does(tmp_path: Path) -> None:
    # A number beyond float64 in an optional parameter is that parameter's issue, not a file
    # that "is not JSON": schema test reads the payload exactly as the consumer reads a body.
    payload = tmp_path / "huge.json"
    payload.write_text(PAYLOAD.read_text().replace("104.2", "1e309"))
    code, out, err = await tideway(None, "schema", "test", str(EXAMPLE), "--payload",
                                   str(payload), "--json", cwd=tmp_path)
    assert code == 0, err
    report = as_json(out)
    assert report["outcome"] == "processed"
    assert "NUMBER_TOO_LARGE" in out
