"""The run page in headless Chromium, at a desktop's and a phone's width and in two time zones:
the whole DAG inside its box with no sideways scrolling of the page, a timeline with one bar per
job that ran whose times are the API's instants in the browser's zone, and notices that can be
dismissed and do not pile up.

The run is the seeded one, cancelled from its page and retried (the cancel gives the page a
notice to dismiss); a worker then runs the retry while the page is open, so the timeline is
also seen filling in live. The browser, the person and the worker are test_console.py's.
"""

from __future__ import annotations

import asyncio
import re
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.integration.api.conftest import Seeded
from tests.integration.api.test_console import Person, browser, sign_in, worker
from tests.integration.ingest.conftest import Harness

__all__ = ["browser"]

SIZES = ((1440, 900), (390, 844))
ZONES = ("America/New_York", "UTC")


def cancel_with_notices(p: Person, s: Seeded) -> str:
    """The pending run's page: its DAG fits, nothing on the timeline yet; Cancel's notice is
    dismissed; Retry starts the run the worker will do. Returns the new run's id."""
    p.driver.set_window_size(*SIZES[0])
    p.open(f"#/runs/{s.run_id}", "#dag-svg .dag-node")
    assert "No job has started yet" in p.text("#timeline-empty")
    p.find("#run-cancel").click()
    p.notice("Cancelled:")
    (shown,) = p.all(".notice")
    shown.find_element(By.CSS_SELECTOR, ".notice-close").click()
    p.wait(lambda d: not d.find_elements(By.CSS_SELECTOR, ".notice"))
    # Many notices: the newest three stay, and one said twice shows once.
    p.driver.execute_async_script(
        "const done = arguments[0];"
        "import('/console/lib.js').then((lib) => {"
        "  for (const t of ['one', 'two', 'same', 'three', 'same', 'four']) lib.notice(t);"
        "  done();"
        "});"
    )
    texts = [e.find_element(By.CSS_SELECTOR, ".notice-text").text for e in p.all(".notice")]
    assert texts == ["four", "same", "three"], texts
    for close in p.all(".notice .notice-close"):
        close.click()
    assert not p.all(".notice")
    p.wait(lambda d: d.find_element(By.ID, "run-state").text == "cancelled")
    p.find("#run-retry").click()
    p.wait(lambda d: s.run_id not in d.execute_script("return location.hash"))
    p.find("#dag-svg .dag-node")
    p.driver.execute_script("window.__notReloaded = true")
    return str(p.driver.execute_script("return location.hash")).removeprefix("#/runs/")


def watch_the_timeline_fill(p: Person) -> None:
    p.wait(lambda d: d.find_element(By.ID, "run-state").text == "succeeded", within=240)
    p.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#timeline .tl-bar")) > 5)
    assert p.driver.execute_script("return window.__notReloaded") is True


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def shown_as(at: str, zone: str) -> str:
    """How the page must show the instant ``at`` in ``zone`` (en-US, 24-hour, the zone's name)."""
    return instant(at).astimezone(ZoneInfo(zone)).strftime("%H:%M:%S %Z")


def same_instant(attribute: str, api: str) -> bool:
    """The page's ``datetime`` (milliseconds) is the API's instant (microseconds) cut to ms."""
    a, b = instant(attribute), instant(api)
    return a == b.replace(microsecond=b.microsecond // 1000 * 1000)


FITS = """
const box = document.getElementById('dag').getBoundingClientRect();
const out = [];
for (const n of document.querySelectorAll('#dag-svg .dag-node')) {
  const r = n.getBoundingClientRect();
  if (r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5
      || r.bottom > box.bottom + 0.5 || r.width === 0) out.push(n.dataset.job);
}
return {outside: out, overflow: document.documentElement.scrollWidth > window.innerWidth,
        scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth};
"""


OVERFLOW = "return document.documentElement.scrollWidth > window.innerWidth"

# The first track and every bar, measured in one script: read element by element, a live
# redraw (or a scrollbar coming or going) between two reads could mix two layouts.
BARS = """
const track = document.querySelector('#timeline .tl-track').getBoundingClientRect();
const bars = {};
for (const b of document.querySelectorAll('#timeline .tl-bar')) {
  const r = b.getBoundingClientRect();
  bars[b.dataset.job] = {x: r.left, width: r.width};
}
return {track: {x: track.left, width: track.width}, bars: bars};
"""


def read_the_run(
    p: Person, run_id: str, dag: dict[str, Any], zone: str, size: tuple[int, int]
) -> None:
    p.driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": zone})
    p.driver.set_window_size(*size)
    p.driver.refresh()  # the key stays in sessionStorage; the page renders in the new zone
    p.wait(lambda d: d.find_element(By.ID, "live").text == "live")
    p.open(f"#/runs/{run_id}", "#timeline .tl-bar")
    jobs = {j["name"]: j for j in dag["jobs"]}
    p.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#dag-svg .dag-node")) == len(jobs))
    where = f"{zone} at {size}"

    fits = p.driver.execute_script(FITS)
    assert fits["outside"] == [], (where, fits)
    assert not fits["overflow"], (where, fits)

    # One bar per job that ran, none for the others (skipped jobs never started).
    ran = {name for name, j in jobs.items() if j["attempts"]}
    bars = {str(b.get_attribute("data-job")) for b in p.all("#timeline .tl-bar")}
    assert len(p.all("#timeline .tl-bar")) == len(bars) == len(ran) and bars == ran, where
    assert zone in p.text("#timeline-zone") or (zone == "UTC" and "UTC" in p.text("#timeline-zone"))
    drawn = p.driver.execute_script(BARS)
    track = drawn["track"]
    for name in ran:
        job = jobs[name]
        row = p.find(f"#timeline .tl-row[data-job='{name}']")
        bar = drawn["bars"][name]
        assert track["x"] - 0.5 <= bar["x"], (name, where)
        assert bar["x"] + bar["width"] <= track["x"] + track["width"] + 0.5, (name, where)
        start = row.find_element(By.CSS_SELECTOR, ".tl-start time")
        assert same_instant(str(start.get_attribute("datetime")), job["started_at"]), (name, where)
        assert start.text == shown_as(job["started_at"], zone), (name, where, start.text)
        end = row.find_element(By.CSS_SELECTOR, ".tl-end time")
        assert same_instant(str(end.get_attribute("datetime")), job["finished_at"]), (name, where)
        assert end.text == shown_as(job["finished_at"], zone), (name, where, end.text)
        assert "ran " in row.text

    # A job picked in the DAG shows its attempts, with times in the zone too.
    p.find("#dag-svg .dag-node[data-job='parse_raw']").click()
    p.wait(lambda d: "parse_raw" in d.find_element(By.ID, "job-detail").text)
    first = jobs["parse_raw"]["attempts"][0]["started_at"]
    cell = p.find("#job-detail tbody tr td:nth-child(4) time")
    assert cell.text == shown_as(first, zone)
    body = p.driver.find_element(By.TAG_NAME, "body").text
    assert not re.search(r"\b(null|undefined|NaN)\b", body), where
    slug = zone.replace("/", "-").lower()
    p.shot(f"run-{slug}-{size[0]}")
    p.driver.execute_script("arguments[0].scrollIntoView()", p.find("#timeline"))
    p.shot(f"run-timeline-{slug}-{size[0]}")
    assert not p.driver.execute_script(FITS)["overflow"], where

    # The list of runs: its created times in the zone, and no sideways scrolling either.
    p.open("#/runs", f"#runs-rows tr[data-run='{run_id}']")
    created = p.find(f"#runs-rows tr[data-run='{run_id}'] time")
    assert same_instant(str(created.get_attribute("datetime")), dag["created_at"]), where
    assert created.text.endswith(shown_as(dag["created_at"], zone)), (where, created.text)
    assert not p.driver.execute_script(OVERFLOW), where
    p.shot(f"runs-{slug}-{size[0]}")


async def test_the_run_page_fits_and_times_its_jobs(
    seeded: Seeded, browser: WebDriver, fleet: Harness
) -> None:
    p = Person(browser, str(seeded.client.make_url("/")))
    await asyncio.to_thread(sign_in, p, seeded.acme["Authorization"].removeprefix("Bearer "))
    run_id = await asyncio.to_thread(cancel_with_notices, p, seeded)
    async with worker(fleet.settings):
        await asyncio.to_thread(watch_the_timeline_fill, p)
    got = await seeded.client.get(f"/v1/runs/{run_id}/dag", headers=seeded.acme)
    dag = await got.json()
    run = await (await seeded.client.get(f"/v1/runs/{run_id}", headers=seeded.acme)).json()
    dag["created_at"] = run["created_at"]  # the run's, for the list of runs

    # What the timeline draws: a job could start when its last dependency finished.
    jobs = {j["name"]: j for j in dag["jobs"]}
    for job in jobs.values():
        if not job["attempts"]:
            continue
        # (or when it started, if a worker's clock read that a hair before its release)
        ends = [instant(jobs[d["on"]]["finished_at"]) for d in job["deps"]]
        released = max([instant(job["created_at"]), *ends])
        assert instant(job["queued_at"]) == min(released, instant(job["started_at"])), job["name"]
        assert job["started_at"] == job["attempts"][0]["started_at"], job["name"]

    for zone in ZONES:
        for size in SIZES:
            await asyncio.to_thread(read_the_run, p, run_id, dag, zone, size)
    await asyncio.to_thread(p.check_console)


async def test_the_runs_page_lists_scheduled_backfills(seeded: Seeded, browser: WebDriver,
                                                       fleet: Harness) -> None:
    from streams.sessions.schedules import add_schedule

    async with fleet.pool.acquire() as conn:
        await add_schedule(conn, tenant="acme", name="nightly", cron="0 3 * * *",
                           uploaded_within_s=7 * 86400)
        await add_schedule(conn, tenant="globex", name="theirs", cron="@hourly")
    p = Person(browser, str(seeded.client.make_url("/")))
    await asyncio.to_thread(sign_in, p, seeded.acme["Authorization"].removeprefix("Bearer "))

    def look(width: int, zone: str) -> dict[str, Any]:
        p.screen(width, zone)
        p.driver.refresh()
        p.find("#backfill-schedules tr[data-schedule]")
        return dict(p.driver.execute_script(
            """
            const rows = [...document.querySelectorAll('#schedules tr[data-schedule]')];
            return {names: rows.map((r) => r.dataset.schedule),
                    text: rows.map((r) => r.textContent).join(' '),
                    next: rows.map((r) => r.querySelector('td[data-label=next]').textContent),
                    scroll: document.documentElement.scrollWidth, view: window.innerWidth};
            """))

    try:
        # The nightly tick at 03:00 UTC reads 12:00 in Tokyo, 03:00 in UTC.
        for width, zone, hour in ((1440, "UTC", "03:00:00 UTC"), (390, "Asia/Tokyo",
                                                                   "12:00:00 GMT+9")):
            shown = await asyncio.to_thread(look, width, zone)
            assert shown["names"] == ["nightly"], shown  # not another tenant's
            assert "0 3 * * *" in shown["text"] and "uploaded within 7 d" in shown["text"], shown
            assert hour in shown["next"][0], shown
            assert shown["scroll"] <= shown["view"], shown
    finally:
        p.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        p.driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "UTC"})
    await asyncio.to_thread(p.check_console)
