"""The console, tried as a person would: headless Chromium (Debian's ``chromium`` and
``chromium-driver``) driven by Selenium against the API serving real data (the ``seeded``
tenant: envelopes, dead letters, an uploaded session and its run).

Every page is opened and checked for what a person looks at; a redrive, a resolve, a cancel, a
retry and a device credential's issue, rotation and revocation are done with the page's buttons
(confirmed in the browser's own dialog where the page asks); a worker is started while the run
page is open and the page must show ``succeeded`` without a reload. Any error in the browser's
console fails the test. Screenshots of each page go to ``$TIDEWAY_TEST_ARTIFACTS`` (default
``.artifacts/console`` in the checkout, ignored by git).

Selenium blocks, so each browser step runs in a thread while the event loop serves the API.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from stages.batch import formats
from stages.batch.synth import synthesize
from stages.jobs.dag import DEFAULT_DAG
from streams.config import Settings
from streams.jobs.worker import run_worker
from streams.sessions.stage_executors import SessionExecutors
from tests.integration.api.conftest import Seeded
from tests.integration.ingest.conftest import Harness, good_values
from tests.shared_data import REPO_ROOT, skip_or_fail

ARTIFACTS = Path(os.environ.get("TIDEWAY_TEST_ARTIFACTS", REPO_ROOT / ".artifacts" / "console"))
WAIT_S = 20.0


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        skip_or_fail("needs Debian's chromium and chromium-driver (.ci/run installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = str(chromium)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # The driver's path given, so Selenium Manager never looks for one on the internet.
    drv = webdriver.Chrome(options=options, service=Service(executable_path=str(driver)))
    try:
        yield drv
    finally:
        drv.quit()


class Person:
    """What a person does with the console: open pages, read, click, wait."""

    def __init__(self, driver: WebDriver, base: str) -> None:
        self.driver, self.base, self.errors = driver, base, []  # type: list[dict[str, Any]]

    def wait(self, check: Callable[[WebDriver], Any], within: float = WAIT_S) -> Any:
        try:
            return WebDriverWait(
                self.driver, within, ignored_exceptions=(StaleElementReferenceException,)
            ).until(check)
        except TimeoutException:  # say what the page said, not just that it did not come
            self.shot("timed-out", check=False)
            raise AssertionError(
                f"timed out; browser console: {self.driver.get_log('browser')}"
            ) from None

    def find(self, css: str) -> WebElement:
        return self.wait(lambda d: d.find_element(By.CSS_SELECTOR, css))

    def all(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text(self, css: str) -> str:
        return str(self.find(css).text)

    def open(self, hash_: str, ready: str) -> None:
        """Go to a page by its address and wait until ``ready`` (a CSS selector) shows."""
        self.driver.execute_script("location.hash = arguments[0]", hash_)
        self.wait(lambda d: d.find_elements(By.CSS_SELECTOR, f"#view {ready}"))

    def answer_dialog(self, *, accept: bool) -> str:
        """Answer the page's ``confirm()`` dialog; its question."""
        dialog = self.wait(expected_conditions.alert_is_present())
        question = str(dialog.text)
        dialog.accept() if accept else dialog.dismiss()
        return question

    def notice(self, contains: str) -> str:
        return str(
            self.wait(
                lambda d: next(
                    (
                        e.text
                        for e in d.find_elements(By.CSS_SELECTOR, ".notice")
                        if contains in e.text
                    ),
                    None,
                )
            )
        )

    def screen(self, width: int, zone: str, *, height: int = 844,
               mobile: bool | None = None) -> None:
        """Look as a ``width`` x ``height`` screen in time zone ``zone`` does (``mobile``: a
        phone's viewport rules; by default below 700 px). The zone is read when a page loads."""
        cdp = self.driver.execute_cdp_cmd
        cdp("Emulation.setTimezoneOverride", {"timezoneId": zone})
        cdp("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1,
            "mobile": width < 700 if mobile is None else mobile})

    def shot(self, name: str, *, check: bool = True) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))
        if check:
            self.check_console()

    def check_console(self) -> None:
        logs = self.driver.get_log("browser")
        self.errors += [e for e in logs if e["level"] in ("SEVERE", "ERROR")]
        assert not self.errors, self.errors


def sign_in(p: Person, key: str) -> None:
    p.driver.get(p.base)
    p.wait(lambda d: d.find_element(By.ID, "api-key").is_displayed())  # once the script ran
    p.find("#api-key").send_keys(key)
    p.find("#sign-in button[type=submit]").click()
    p.wait(lambda d: d.find_element(By.ID, "live").text == "live")
    p.find("#runs-rows tr")


def look_around(p: Person, s: Seeded) -> None:
    """Every page, as a person reads it."""
    rows = p.all("#runs-rows tr")
    assert [r.get_attribute("data-run") for r in rows] == [s.run_id]
    p.shot("runs")

    p.find(f"#runs-rows a[href='#/sessions/{s.session_id}']").click()
    p.find("#view #session-runs")
    assert s.run_id[:8] in p.text("#session-runs")
    assert "kart-1" in p.text("#view dl.facts")
    p.shot("session")

    p.open("#/devices", "#devices-rows tr")
    devices = [r.find_element(By.CSS_SELECTOR, "td").text for r in p.all("#devices-rows tr")]
    assert {"d1", "d2"} <= set(devices)
    p.find("#device-search").send_keys("d1")
    p.wait(lambda d: [r.text.split()[0] for r in p.all("#devices-rows tr")] == ["d1"])
    p.shot("devices")
    p.find("#devices-rows a").click()
    assert p.text("#device-toggle") in ("Activate", "Deactivate")
    # A small chart per numeric parameter from ClickHouse, drawn from this hour's envelopes.
    charts = {c.get_attribute("data-parameter"): c for c in p.all("#device-charts svg.param-chart")}
    assert {"temp_c", "humidity", "battery_v"} <= set(charts), set(charts)  # names after mutate
    line = charts["temp_c"].find_element(By.CSS_SELECTOR, "path.param-line")
    assert str(line.get_attribute("d")).count("L") == 2, "three envelopes, three minutes apart"
    assert "20.50 to 22.00" in charts["temp_c"].text
    # Its hot state (from Redis) and its newest envelope, with its status.
    assert p.find("#device-hot-state .hot-state").get_attribute("data-topic") == "state"
    assert "completed" in p.text("#device-messages")
    p.shot("device")

    p.open("#/fleet", "#fleet-rows tr")
    fleet = {r.get_attribute("data-device"): r for r in p.all("#fleet-rows tr")}
    # d2 sent one envelope this hour, malformed: it is d2's all the same (its subject names
    # d2), so d2 is listed, every envelope of it invalid (issue 29 item 4).
    assert set(fleet) == {"d1", "d2"}
    assert fleet["d1"].find_element(By.CSS_SELECTOR, "[data-col=seq_gaps]").text == "0"
    assert fleet["d2"].find_element(By.CSS_SELECTOR, "[data-col=invalid_share]").text == "100.0 %"
    assert "2 open dead letters" in p.text("#fleet-summary")
    # Live figures: d1's four envelopes and the two malformed ones (d1's, d2's) of the last
    # minutes, all consumed.
    assert "over 6 envelopes in the last 5 min" in p.text("#fleet-live")
    assert p.text("#fleet-e2e").startswith("end-to-end latency p50 ")
    assert "—" not in p.text("#fleet-e2e")
    assert p.text("#fleet-pending") == "consumer pending 0, unacknowledged 0"
    p.find("#fleet th[data-sort=device]").click()
    p.wait(lambda d: "▼" in d.find_element(By.CSS_SELECTOR, "#fleet th[data-sort=device]").text)
    p.shot("fleet")

    p.open(f"#/messages/{s.message_id}", "#msg-stages")
    assert "completed" in p.text("#view dl.facts")
    assert p.all("#msg-stages tbody tr"), "the stage log of a completed envelope"
    p.shot("message")


SECRET = re.compile(r"twd_[a-z2-7]{16}_[A-Za-z0-9_-]{43}")


def manage_credentials(p: Person, s: Seeded) -> None:
    """d1's credentials on its page: issue (the secret shown once), rotate, revoke."""
    p.open(f"#/devices/{s.device}", "#device-credentials")

    def states() -> dict[str, str]:
        rows = p.all("#credential-rows tr[data-key]")
        return {str(r.get_attribute("data-key")): str(r.get_attribute("data-state")) for r in rows}

    assert states() == {s.credential: "active"}
    assert not p.all("#credential-secret-value")
    p.find("#credential-issue").click()
    secret = str(p.find("#credential-secret-value").get_attribute("value"))
    assert SECRET.fullmatch(secret), secret
    box = p.text("#credential-secret")
    assert "will not be shown again" in box and "copy" in box.lower()
    assert p.text("#credential-username") == f"acme.{s.device}"
    p.wait(lambda d: len(states()) == 2)
    issued = secret.split("_")[1]
    assert states() == {s.credential: "active", issued: "active"}
    p.shot("device-credential-issued")

    # Rotate asks first; the new secret replaces the one shown, the others are retired.
    p.find("#credential-rotate").click()
    assert "Rotate the credentials of d1" in p.answer_dialog(accept=True)
    p.wait(lambda d: d.find_element(By.ID, "credential-secret-value").get_attribute("value")
           != secret)  # fmt: skip
    rotated = str(p.find("#credential-secret-value").get_attribute("value")).split("_")[1]
    p.wait(lambda d: states().get(rotated) == "active")
    assert states() == {s.credential: "rotated", issued: "rotated", rotated: "active"}
    p.find("#credential-secret-done").click()
    p.wait(lambda d: not d.find_elements(By.ID, "credential-secret-value"))

    # Revoke asks first too: declined changes nothing, accepted retires the credential.
    revoke = f"#credential-rows tr[data-key='{rotated}'] .credential-revoke"
    p.find(revoke).click()
    assert rotated in p.answer_dialog(accept=False)
    assert states()[rotated] == "active"
    p.find(revoke).click()
    p.answer_dialog(accept=True)
    assert "Revoked credential" in p.notice("Revoked credential")
    p.wait(lambda d: states().get(rotated) == "revoked")
    assert not p.all(".credential-revoke")
    p.shot("device-credentials")

    # Shown once: the page opened again lists the credentials, never a secret.
    p.open("#/devices", "#devices-rows tr")
    p.open(f"#/devices/{s.device}", "#device-credentials")
    p.wait(lambda d: len(states()) == 3)
    assert not SECRET.search(p.driver.page_source)


def triage(p: Person, s: Seeded) -> None:
    """Dead letters: the group, its letters, a redrive and a resolve from the page."""
    p.open("#/dead-letters", "#dlq-rows tr[data-group]")
    (group,) = p.all("#dlq-rows tr[data-group]")
    assert group.find_element(By.CSS_SELECTOR, ".dlq-count").text == "2"
    assert "not json" in group.text  # the sample payload
    # Beside them, the session notice intake dead-lettered (SESSIONS_DLQ).
    p.find("#session-dlq-rows tr[data-session-dead-letter]")  # it comes after the groups
    (session_dead,) = p.all("#session-dlq-rows tr[data-session-dead-letter]")
    assert "kart-2" in session_dead.text and "BAD_NOTICE" in session_dead.text
    p.shot("dead-letters")
    group.find_element(By.CSS_SELECTOR, ".dlq-redrive").click()
    # Malformed envelopes cannot be redriven: the page says so and the group stays open.
    assert "2 not redrivable" in p.notice("Redrive:")
    p.find("#dlq-rows .dlq-note").send_keys("garbage from a test rig")
    p.find("#dlq-rows .dlq-resolve").click()
    assert "Resolved 2 dead letters" in p.notice("Resolved")
    p.wait(lambda d: "No dead letters" in d.find_element(By.ID, "dlq-rows").text)
    p.find("#dlq-state option[value=resolved]").click()
    p.find("#dlq-rows tr[data-group]")
    p.shot("dead-letters-resolved")

    p.find("#dlq-rows a").click()  # the group's dead letters, then the first one's envelope
    p.find("#dlq-letters tbody a").click()
    assert "resolved" in p.text("#msg-dead-letter")
    p.shot("message-dead-letter")


def cancel_then_retry(p: Person, s: Seeded) -> str:
    """The run's DAG, cancelled and retried from its page; returns the new run's id."""
    p.open(f"#/runs/{s.run_id}", "#dag-svg .dag-node")
    nodes = p.all("#dag-svg .dag-node")
    assert len(nodes) > 5, "the session DAG's jobs"
    assert len(p.all("#dag-svg path.edge")) >= len(nodes) - 1
    assert {n.get_attribute("data-state") for n in nodes} <= {"created", "queued"}
    nodes[0].click()
    assert "attempts" in p.text("#job-detail")
    p.shot("run-dag")
    p.find("#run-cancel").click()
    assert "Cancelled:" in p.notice("Cancelled:")
    p.wait(lambda d: d.find_element(By.ID, "run-state").text == "cancelled")
    p.wait(
        lambda d: all(
            n.get_attribute("data-state") == "cancelled"
            for n in d.find_elements(By.CSS_SELECTOR, "#dag-svg .dag-node")
        )
    )
    p.shot("run-cancelled")
    p.find("#run-retry").click()
    p.wait(lambda d: s.run_id not in d.execute_script("return location.hash"))
    new = str(p.driver.execute_script("return location.hash")).removeprefix("#/runs/")
    p.find("#dag-svg .dag-node")
    # A mark the page would lose if it were reloaded.
    p.driver.execute_script("window.__notReloaded = true")
    return new


def watch_it_succeed(p: Person) -> None:
    p.wait(lambda d: d.find_element(By.ID, "run-state").text == "succeeded", within=240)
    assert p.driver.execute_script("return window.__notReloaded") is True
    states = {n.get_attribute("data-state") for n in p.all("#dag-svg .dag-node")}
    assert states <= {"succeeded", "skipped"}, states
    p.shot("run-succeeded")
    p.open("#/runs", "#runs-rows tr")
    assert "succeeded" in p.text("#runs-rows")
    p.find("#runs-rows a").click()
    p.find("#run-state").find_element(By.XPATH, "//a[contains(@href, '#/sessions/')]").click()
    # The track, drawn from the downsampled series in speed bands, and the features.
    segments = p.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#track-svg path.track-seg"))
    assert len(segments) >= 2, "more than one speed band"
    assert all(len(str(s.get_attribute("d"))) > 20 for s in segments)
    assert "km/h" in p.text("#track-legend")
    assert "overview" in p.text("#session-features")
    p.shot("session-track")


async def measure_this_hour(fleet: Harness) -> None:
    """Three more of d1's envelopes, measured in the last minutes (seq after the seeded one)."""
    now_ms, before = int(time.time() * 1000), await fleet.analytics_rows()
    assert before > 0
    for seq, temp in ((2, 20.5), (3, 22.0), (4, 21.0)):
        envelope = {"ts": now_ms - (4 - seq) * 60_000, "seq": seq, "values": good_values(temp)}
        await fleet.publish("d1", envelope)

    async def published() -> bool:  # the seeded envelope is d1's only one: ``before`` rows each
        return await fleet.analytics_rows() >= 4 * before

    await fleet.consume(6, until=published)


async def upload_laps(s: Seeded) -> str:
    """A synthetic three-lap kart session (NMEA) with its start/finish line; its session id."""
    session = synthesize(laps=3, seed=5)
    data = formats.write("nmea", {"gnss": session.gnss, "imu": session.imu}, compressed=False)
    line = orjson.loads(orjson.dumps(session.truth.truth_json(), default=str))["start_finish"]
    form = aiohttp.FormData()
    form.add_field("device", "kart-2")
    form.add_field("config", orjson.dumps({"start_finish": line}).decode())
    form.add_field("file", data, filename="laps.nmea", content_type="text/plain")
    resp = await s.client.post("/v1/sessions", data=form, headers=s.acme)
    assert resp.status == 202, await resp.text()
    return str((await resp.json())["session_id"])


async def wait_ready(s: Seeded, session_id: str) -> None:
    for _ in range(480):
        got = await (await s.client.get(f"/v1/sessions/{session_id}", headers=s.acme)).json()
        if got["query_ready"]:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"session {session_id} never became ready: {got}")


async def trace_matches_lap(s: Seeded, session_id: str) -> None:
    """The drawn trace ends where the lap table says the lap ends: same distance, same time."""
    get = s.client.get
    report = await (await get(f"/v1/sessions/{session_id}/laps", headers=s.acme)).json()
    lap = report["laps"][1]
    url = f"/v1/sessions/{session_id}/laps/{lap['lap']}/trace"
    trace = await (await get(url, headers=s.acme)).json()
    d = [pt["d_m"] for pt in trace["points"]]
    assert d == sorted(d) and d[0] == 0
    assert abs(d[-1] - lap["distance_m"]) < 0.01 * lap["distance_m"], (d[-1], lap)
    assert abs(trace["points"][-1]["t_s"] - lap["lap_time_s"]) < 1.0
    assert all(c["start_m"] <= c["end_m"] for c in trace["segments"])
    missing = await get(f"/v1/sessions/{session_id}/laps/99/trace", headers=s.acme)
    assert missing.status == 404
    # Sectors, their bests and the theoretical best (issue 32 items 1-2).
    assert len(report["sector_lines"]) == 2
    for row in report["laps"]:
        assert [x["sector"] for x in row["sectors"]] == [1, 2, 3]
        assert abs(sum(x["time_s"] for x in row["sectors"]) - row["lap_time_s"]) < 1e-6
        assert row["lap_time_sigma_s"] > 0 and all(x["sigma_s"] > 0 for x in row["sectors"])
    best_sectors = [min(r["sectors"][k]["time_s"] for r in report["laps"] if r["valid"])
                    for k in range(3)]
    assert abs(report["theoretical_best_s"] - sum(best_sectors)) < 1e-9
    # The delta channel and corners against the reference lap (items 3-4).
    url = f"/v1/sessions/{session_id}/laps/{lap['lap']}/analysis"
    analysis = await (await get(url, headers=s.acme)).json()
    assert analysis["reference_lap"] == report["reference_lap"]
    ref = next(r for r in report["laps"] if r["lap"] == analysis["reference_lap"])
    assert abs(analysis["delta"][-1]["delta_s"] - (lap["lap_time_s"] - ref["lap_time_s"])) < 1e-4
    assert analysis["corners"] and len(analysis["mini_sectors"]) == 20
    assert all(c["apex_speed_mps"] <= c["entry_speed_mps"] for c in analysis["corners"])
    missing = await get(f"/v1/sessions/{session_id}/laps/99/analysis", headers=s.acme)
    assert missing.status == 404


def compare_laps(p: Person, session_id: str) -> None:
    """The lap table with exactly one best lap, and two laps overlaid as speed over distance."""
    p.open(f"#/sessions/{session_id}", "#lap-table")
    laps = p.all("#lap-table tbody tr")
    assert len(laps) >= 2, "the recording's laps"
    (best,) = p.all("#lap-table tbody tr.best")
    assert "best" in best.text
    lines = p.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#lap-chart path.lap-line"))
    assert lines[0].get_attribute("data-lap") == best.get_attribute("data-lap")
    assert len({ln.get_attribute("data-lap") for ln in lines}) == 2, "two laps overlaid"
    assert all(str(ln.get_attribute("d")).count("L") > 10 for ln in lines)
    assert "km/h" in p.text("#lap-chart")
    # The reference lap's corners: marked under the lines and listed, in the order driven.
    bands = p.all("#lap-chart rect.corner")
    assert len(bands) >= 3, "the synthetic circuit's corners"
    rows = p.all("#corner-table tbody tr")
    assert [r.get_attribute("data-corner") for r in rows] == [
        b.get_attribute("data-corner") for b in bands
    ]
    assert [float(str(b.get_attribute("x"))) for b in bands] == sorted(
        float(str(b.get_attribute("x"))) for b in bands
    )
    p.driver.execute_script("arguments[0].scrollIntoView()", p.find("#lap-chart"))
    p.shot("session-laps")


def lap_time(text: str) -> float:
    """A time as the lap table shows it (``31.402``, ``1:20.402``) in seconds."""
    minutes, _, seconds = text.rpartition(":")
    return 60 * int(minutes or 0) + float(seconds)


def shown_as(seconds: float) -> str:
    """How the lap table shows a time (pages/sessions.js lapTime)."""
    ms = round(seconds * 1000)
    return f"{ms / 1000:.3f}" if ms < 60_000 else f"{ms // 60_000}:{ms % 60_000 / 1000:06.3f}"


def path_ys(d: str) -> list[float]:
    return [float(y) for y in re.findall(r"[ML][-\d.]+,([-\d.]+)", d)]


def read_lap_timing(p: Person, session_id: str, report: dict[str, Any]) -> None:
    """Issue 32 items 1-4 as a person reads them: sector columns that add up to the lap, one
    purple best per sector, every time with its uncertainty, the theoretical best; under the
    speed comparison the delta to the reference lap and the compared lap's corners. At 390 px in
    Tokyo the page does not scroll sideways (the lap table scrolls inside its box) and shows the
    same times: durations, not clock times."""
    p.open(f"#/sessions/{session_id}", "#delta-chart path.delta-line")
    heads = [th.text for th in p.all("#lap-table thead th")]
    sectors = [h for h in heads if re.fullmatch(r"S\d+", h)]
    assert sectors == ["S1", "S2", "S3"], heads
    rows = p.all("#lap-table tbody tr")
    assert len(rows) == len(report["laps"])
    for row in rows:
        cells = row.find_elements(By.CSS_SELECTOR, "td.sector")
        times = [lap_time(c.find_element(By.CSS_SELECTOR, ".t").text) for c in cells]
        lap = lap_time(row.find_element(By.CSS_SELECTOR, "td.lap-time .t").text)
        assert len(times) == 3 and abs(sum(times) - lap) <= 0.002, (row.text, times, lap)
        for c in [*cells, row.find_element(By.CSS_SELECTOR, "td.lap-time")]:  # time ±sigma
            assert re.fullmatch(r"[\d:.]+ ±(\d\.\d{3}|<0\.001)", c.text), c.text
    for k in (1, 2, 3):
        (best,) = p.all(f"#lap-table td.best-sector[data-sector='{k}']")
        column = [
            lap_time(c.find_element(By.CSS_SELECTOR, ".t").text)
            for c in p.all(f"#lap-table tr:not(.invalid) td.sector[data-sector='{k}']")
        ]
        assert lap_time(best.find_element(By.CSS_SELECTOR, ".t").text) == min(column)
    assert p.text("#theoretical-best") == shown_as(report["theoretical_best_s"])
    assert "Theoretical best" in p.text("#lap-summary")
    assert p.text("#reference-lap") == str(report["reference_lap"])
    # The delta: one line per compared lap, on the speed chart's x scale (its corner bands
    # where the speed chart's are); the reference lap's line flat on the zero line.
    compared = [ln.get_attribute("data-lap") for ln in p.all("#lap-chart path.lap-line")]
    deltas = p.all("#delta-chart path.delta-line")
    assert [ln.get_attribute("data-lap") for ln in deltas] == compared
    ref = str(report["reference_lap"])
    assert ref in compared, "the best lap is compared by default, and it is the reference"
    (flat,) = [ln for ln in deltas if ln.get_attribute("data-reference") == "true"]
    assert flat.get_attribute("data-lap") == ref
    zero = path_ys(str(p.find("#delta-chart path.zero-line").get_attribute("d")))
    assert set(path_ys(str(flat.get_attribute("d")))) == set(zero)
    other = next(ln for ln in deltas if ln is not flat)
    assert len(set(path_ys(str(other.get_attribute("d"))))) > 10, "the other lap's delta varies"
    assert f"lap {ref} (reference)" in p.text("#delta-chart-legend")
    xs = [
        [r.get_attribute("x") for r in p.all(f"#{c} rect.corner")]
        for c in ("lap-chart", "delta-chart")
    ]
    assert xs[0] == xs[1] and xs[0], xs
    # The corners of the lap compared with the reference: gained green (-), lost red (+).
    rows = p.all("#corner-table tbody tr")
    assert len(rows) >= 3
    for r in rows:
        cell = r.find_element(By.CSS_SELECTOR, "td.corner-delta")
        delta = float(str(cell.get_attribute("data-delta")))
        assert cell.text.endswith(" s") and "km/h" in p.text("#corner-table thead")
        want = "time-lost" if delta >= 0.0005 else "time-gained" if delta <= -0.0005 else ""
        assert want in str(cell.get_attribute("class")).split() or not want, (cell.text, delta)
    assert "against reference lap" in p.text("#lap-compare h3:last-of-type")
    p.driver.execute_script("arguments[0].scrollIntoView()", p.find("#lap-summary"))
    p.shot("session-lap-timing")
    p.driver.execute_script("arguments[0].scrollIntoView()", p.find("#delta-chart"))
    p.shot("session-delta")
    desk = p.text("#lap-table tbody")
    cdp = p.driver.execute_cdp_cmd
    try:
        p.screen(390, "Asia/Tokyo", mobile=False)
        p.driver.get("about:blank")  # a fresh load (sessionStorage keeps the key)
        p.driver.get(f"{p.base}#/sessions/{session_id}")
        p.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#view #delta-chart path.delta-line"))
        page = "document.documentElement"
        assert p.driver.execute_script(f"return {page}.scrollWidth - {page}.clientWidth") <= 0
        box = p.find("#laps .lap-scroll")
        assert box.rect["x"] >= 0 and box.rect["x"] + box.rect["width"] <= 390, box.rect
        for chart in ("#lap-chart", "#delta-chart"):
            r = p.find(chart).rect
            assert r["x"] >= 0 and r["x"] + r["width"] <= 390, (chart, r)
        p.driver.execute_script("arguments[0].scrollIntoView()", p.find("#lap-summary"))
        p.shot("session-lap-timing-390")
        p.driver.execute_script("arguments[0].scrollLeft = 10000", box)
        p.shot("session-lap-timing-390-scrolled")
        p.driver.execute_script("arguments[0].scrollIntoView()", p.find("#delta-chart"))
        p.shot("session-delta-390")
        p.driver.execute_script("arguments[0].scrollLeft = 0", box)
        cdp("Emulation.clearDeviceMetricsOverride", {})
        p.wait(lambda d: d.execute_script("return window.innerWidth") > 700)
        assert p.text("#lap-table tbody") == desk, "the same durations in Tokyo"
    finally:
        cdp("Emulation.clearDeviceMetricsOverride", {})
        cdp("Emulation.setTimezoneOverride", {"timezoneId": "UTC"})
    # Two laps that are not the reference: the zero line is the reference, and says so.
    pair = [str(x["lap"]) for x in report["laps"] if x["lap"] != report["reference_lap"]][:2]
    for picker, lap in zip(("#lap-a", "#lap-b"), pair, strict=True):
        p.find(f"{picker} option[value='{lap}']").click()
    drawn = "#delta-chart path.delta-line"
    p.wait(lambda d: [ln.get_attribute("data-lap") for ln in p.all(drawn)] == pair)
    assert f"0 is reference lap {ref}" in p.text("#delta-chart-legend")
    assert not p.all("#delta-chart path[data-reference]")
    assert f"Corners of lap {pair[1]} against reference lap {ref}" in p.text("#lap-compare")
    p.driver.execute_script("arguments[0].scrollIntoView()", p.find("#delta-chart"))
    p.shot("session-delta-no-reference")


@contextlib.asynccontextmanager
async def worker(settings: Settings) -> Any:
    executors = SessionExecutors(settings, compute="thread", dag=DEFAULT_DAG)
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_worker(
            settings, executors=executors, pool=None, concurrency=2, stop=stop, dag=DEFAULT_DAG
        )
    )
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await executors.aclose()


async def test_a_person_uses_the_console(
    seeded: Seeded, browser: WebDriver, fleet: Harness
) -> None:
    await measure_this_hour(fleet)
    p = Person(browser, str(seeded.client.make_url("/")))
    key = seeded.acme["Authorization"].removeprefix("Bearer ")
    await asyncio.to_thread(sign_in, p, key)
    await asyncio.to_thread(look_around, p, seeded)
    await asyncio.to_thread(manage_credentials, p, seeded)
    await asyncio.to_thread(triage, p, seeded)
    laps_session = await upload_laps(seeded)
    new_run = await asyncio.to_thread(cancel_then_retry, p, seeded)
    assert new_run != seeded.run_id
    async with worker(fleet.settings):
        await asyncio.to_thread(watch_it_succeed, p)
        await wait_ready(seeded, laps_session)
    await asyncio.to_thread(compare_laps, p, laps_session)
    got = await seeded.client.get(f"/v1/sessions/{laps_session}/laps", headers=seeded.acme)
    await asyncio.to_thread(read_lap_timing, p, laps_session, await got.json())
    await trace_matches_lap(seeded, laps_session)
    await asyncio.to_thread(p.check_console)


async def test_the_console_is_served_without_a_key_and_only_talks_to_its_origin(
    seeded: Seeded,
) -> None:
    page = await seeded.client.get("/")
    assert page.status == 200
    assert page.content_type == "text/html"
    assert "default-src 'self'" in page.headers["Content-Security-Policy"]
    body = await page.text()
    assert "/console/app.js" in body
    for asset in ("/console/app.js", "/console/pages/runs.js", "/console/style.css"):
        resp = await seeded.client.get(asset)
        assert resp.status == 200, asset
        assert "default-src 'self'" in resp.headers["Content-Security-Policy"]
    # The data still needs a key.
    assert (await seeded.client.get("/v1/runs")).status == 401
    missing = await seeded.client.get("/console/nope.js")
    assert missing.status == 404
    assert missing.content_type == "application/problem+json"
