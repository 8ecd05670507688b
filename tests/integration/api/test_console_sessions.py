"""The session page, tried as an operator would (issue 29 items 6 to 9): headless Chromium
against the API serving a three-lap session processed by a real worker, and a session whose
only file was rejected.

- the start/finish line the laps were timed on is drawn on the track; placing another (two
  clicks on the track) and reprocessing starts a run whose config carries it, and the page
  follows that run;
- a failed session says why (the failing job's code and message, the rejected file), not
  ``NO_ACTIVE_RUN`` / ``CANCELLED``;
- Roll back is offered only with an earlier good run to go back to, and after it the page
  names the new active run;
- the compared lap pair is in the URL and survives a reload;
- the export links (laps, sectors, delta as CSV, GPX, FIT) download files that parse: each
  link's file fetched with the signed-in key (CSV by the csv module, GPX by Tideway's reader,
  FIT by fitdecode), one clicked into a real download; a file the run cannot make is named,
  not linked, and its route answers 409 EXPORT_UNAVAILABLE;
- at 1,440 x 900 and 390 x 844, in UTC and Asia/Tokyo, the page never scrolls sideways and
  its times carry the zone.

Helpers (the browser, the person, the upload of a lap session, the worker) come from
``test_console``; screenshots go to the same artifacts folder.
"""

from __future__ import annotations

import asyncio
import base64
import csv
import io
import math
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import fitdecode
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from stages.batch.formats import gpx
from tests.integration.api.conftest import Seeded
from tests.integration.api.test_console import (
    Person,
    browser,
    sign_in,
    upload_laps,
    wait_ready,
    worker,
)
from tests.integration.ingest.conftest import Harness

__all__ = ["browser"]  # the fixture, imported for pytest

SIZES = ((1440, 900), (390, 844))
ZONES = {"UTC": ("UTC", "GMT"), "Asia/Tokyo": ("GMT+9", "JST")}  # what a time shows in each


async def upload_rejected(s: Seeded) -> str:
    """A session whose only file is no recording at all (artifact_validate rejects it)."""
    form = aiohttp.FormData()
    form.add_field("device", "kart-3")
    form.add_field("file", b"this is not a recording\n" * 20, filename="junk.nmea",
                   content_type="text/plain")  # fmt: skip
    resp = await s.client.post("/v1/sessions", data=form, headers=s.acme)
    assert resp.status == 202, await resp.text()
    return str((await resp.json())["session_id"])


async def latest_run(s: Seeded, session_id: str, *, until: tuple[str, ...]) -> dict[str, Any]:
    """The session's newest run, once its status is one of ``until``."""
    got: dict[str, Any] = {}
    for _ in range(480):
        got = await (await s.client.get(f"/v1/sessions/{session_id}", headers=s.acme)).json()
        if got["runs"] and got["runs"][-1]["status"] in until:
            return dict(got["runs"][-1])
        await asyncio.sleep(0.5)
    raise AssertionError(f"session {session_id}'s newest run never became {until}: {got}")


def overflow(p: Person) -> int:
    """How far the page is wider than the window (0: no sideways scroll)."""
    page = "document.documentElement"
    return int(p.driver.execute_script(f"return {page}.scrollWidth - {page}.clientWidth"))


def line_is_drawn(p: Person, session_id: str) -> None:
    p.open(f"#/sessions/{session_id}", "#lap-table")
    line = p.find("#track-svg g#sf-line")
    assert line.get_attribute("data-source") == "config"  # the upload configured it
    assert len(line.find_elements(By.CSS_SELECTOR, "line")) == 1
    assert "run's config" in p.text("#line-legend")
    # One run: nothing to roll back to.
    assert p.all("#session-reprocess") and not p.all("#session-rollback")
    p.shot("session-line")


def lap_pair_in_url(p: Person, session_id: str) -> None:
    p.open(f"#/sessions/{session_id}", "#lap-chart path.lap-line")
    laps = [str(o.get_attribute("value")) for o in p.all("#lap-a option")]
    assert len(laps) >= 2
    shown = [Select(p.find(f"#lap-{x}")).first_selected_option.get_attribute("value") for x in "ab"]
    assert shown[0] != shown[1]
    b, a = shown  # swapped: both pickers change
    Select(p.find("#lap-a")).select_by_value(a)
    Select(p.find("#lap-b")).select_by_value(b)
    p.wait(lambda d: d.execute_script("return location.hash").endswith(f"?a={a}&b={b}"))
    p.driver.refresh()
    p.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#lap-chart path.lap-line"))
    assert Select(p.find("#lap-a")).first_selected_option.get_attribute("value") == a
    assert Select(p.find("#lap-b")).first_selected_option.get_attribute("value") == b
    drawn = [ln.get_attribute("data-lap") for ln in p.all("#lap-chart path.lap-line")]
    assert drawn == [a, b], drawn


_FETCH = """
const [href, done] = arguments;
fetch(href, { headers: { Authorization: `Bearer ${sessionStorage.getItem("tideway.api-key")}` } })
  .then(async (r) => {
    const bytes = new Uint8Array(await r.arrayBuffer());
    let binary = "";
    for (const b of bytes) binary += String.fromCharCode(b);
    done({ status: r.status, type: r.headers.get("Content-Type"),
           disposition: r.headers.get("Content-Disposition"), body: btoa(binary) });
  })
  .catch((e) => done({ error: String(e) }));
"""


def _parses(file: str, body: bytes) -> int:
    """How many laps (CSV rows, GPX lap segments, FIT lap messages) the file holds."""
    if file.endswith(".csv"):
        rows = list(csv.DictReader(io.StringIO(body.decode())))
        assert rows and "lap" in rows[0], file
        return len({r["lap"] for r in rows})
    if file.endswith(".gpx"):
        assert gpx.read(body).streams["gnss"].num_rows > 100
        return body.count(b"<tideway:lap>")
    with fitdecode.FitReader(io.BytesIO(body), check_crc=fitdecode.CrcCheck.ENABLED) as fit:
        names = [f.name for f in fit if isinstance(f, fitdecode.FitDataMessage)]
    assert names.count("record") > 100
    return names.count("lap")


def downloads_work(p: Person, session_id: str, laps: int) -> list[str]:
    """Every export link's file parses and holds the laps; a click downloads one. The files
    the page does not link (their routes are checked by the caller)."""
    p.open(f"#/sessions/{session_id}", "#session-downloads a")
    # Read in one script: the page redraws the section while the lap analysis loads, and an
    # element found before a redraw is stale after it.
    links = p.driver.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#session-downloads a')]"
        ".map((a) => [a.dataset.file, a.href]));")
    assert {"laps.csv", "session.gpx", "session.fit"} <= set(links), links
    for file, href in links.items():
        got = p.driver.execute_async_script(_FETCH, href)
        assert got.get("status") == 200, (file, got.get("status"), got.get("error"))
        assert got["disposition"] == f'attachment; filename="session-{session_id[:8]}-{file}"'
        assert _parses(file, base64.b64decode(got["body"])) == laps, file
    with tempfile.TemporaryDirectory() as folder:
        p.driver.execute_cdp_cmd("Browser.setDownloadBehavior",
                                 {"behavior": "allow", "downloadPath": folder})  # fmt: skip
        p.find('#session-downloads a[data-file="laps.csv"]').click()
        saved = Path(folder) / f"session-{session_id[:8]}-laps.csv"
        p.wait(lambda d: saved.exists())
        assert _parses("laps.csv", saved.read_bytes()) == laps
    every = ("laps.csv", "sectors.csv", "delta.csv", "session.gpx", "session.fit")
    missing = [f for f in every if f not in links]
    if missing:
        assert "reprocess" in p.text("#session-downloads-missing")
    p.shot("session-downloads")
    return missing


def fits_everywhere(p: Person, session_id: str, pair: str) -> None:
    """Every size and zone: no sideways scroll, the track inside the window, zoned times."""
    cdp = p.driver.execute_cdp_cmd
    try:
        for zone, shown in ZONES.items():
            for width, height in SIZES:
                p.screen(width, zone, height=height, mobile=False)
                p.driver.get("about:blank")  # a fresh load (sessionStorage keeps the key)
                p.driver.get(f"{p.base}#/sessions/{session_id}?{pair}")
                p.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#view #lap-chart path.lap-line"))
                assert overflow(p) <= 0, (zone, width, overflow(p))
                track = p.find("#track-svg").rect
                assert 0 <= track["x"] <= track["x"] + track["width"] <= width, (zone, track)
                for link in p.all("#session-downloads a"):  # on one line or wrapped, inside
                    r = link.rect
                    assert 0 <= r["x"] <= r["x"] + r["width"] <= width, (link.text, r)
                for button in p.all("#view .actions button:not([hidden])"):
                    r = button.rect
                    assert 0 <= r["x"] <= r["x"] + r["width"] <= width, (button.text, r)
                uploaded = p.find("#view dl.facts time").text
                assert any(z in uploaded for z in shown), (zone, uploaded)
                assert "null" not in p.text("#view") and "undefined" not in p.text("#view")
                p.shot(f"session-{width}-{zone.replace('/', '-')}")
                p.driver.execute_script("document.getElementById('session-downloads')"
                                        ".scrollIntoView({block: 'center'})")  # fmt: skip
                p.shot(f"session-downloads-{width}-{zone.replace('/', '-')}")
    finally:
        cdp("Emulation.clearDeviceMetricsOverride", {})
        cdp("Emulation.setTimezoneOverride", {"timezoneId": "UTC"})


def rejected_file_is_told(p: Person, session_id: str) -> None:
    p.open(f"#/sessions/{session_id}", "#session-failure")
    failure = p.text("#session-failure")
    assert "UNSUPPORTED_FORMAT" in failure and "junk.nmea" in failure, failure
    assert "not NMEA" in failure, failure  # the job's own message
    assert "rejected" in p.text("#session-files")
    page = p.text("#view")
    assert "NO_ACTIVE_RUN" not in page and "CANCELLED" not in page, page
    assert "failed" in p.text("#track-legend")
    assert not p.all("#session-rollback")
    p.shot("session-rejected")


def place_line(p: Person, session_id: str) -> tuple[str, dict[str, float]]:
    """Two clicks beside the configured line's ends, then Reprocess: the new run's id (the
    page follows it) and the configured line, for comparing."""
    p.open(f"#/sessions/{session_id}", "#track-svg g#sf-line")
    svg = p.find("#track-svg")
    ends = p.driver.execute_script(
        "const s = arguments[0].getBoundingClientRect();"
        "return [...document.querySelectorAll('#sf-line circle')].map((c) => {"
        " const r = c.getBoundingClientRect();"
        " return [r.x + r.width / 2 - (s.x + s.width / 2),"
        "         r.y + r.height / 2 - (s.y + s.height / 2)]; });",
        svg,
    )
    p.find("#line-place").click()
    assert "Click one end" in p.text("#line-hint")
    for dx, dy in ends:  # 3 px beside each end: a line of its own, close to the first
        clicks = ActionChains(p.driver).move_to_element_with_offset(svg, int(dx) + 3, int(dy))
        clicks.click().perform()
    p.find("#track-svg g#sf-draft")
    p.shot("session-line-placed")
    p.find("#line-reprocess").click()
    p.wait(lambda d: d.execute_script("return location.hash").startswith("#/runs/"))
    return str(p.driver.execute_script("return location.hash")).removeprefix("#/runs/"), ends


def roll_back(p: Person, session_id: str, first_run: str) -> None:
    p.open(f"#/sessions/{session_id}", "#session-rollback")
    assert first_run not in p.text("#session-active-run")
    p.find("#session-rollback").click()
    p.wait(lambda d: d.find_element(By.ID, "session-active-run").text == first_run)
    note = p.find("#main > .notice")
    assert first_run[:8] in note.text
    # One good run before the active one no longer: nothing left to roll back to.
    assert not p.all("#session-rollback")
    note.find_element(By.CSS_SELECTOR, ".notice-close").click()
    p.wait(lambda d: not d.find_elements(By.CSS_SELECTOR, "#main > .notice"))
    p.shot("session-rolled-back")


async def test_the_session_page(seeded: Seeded, browser: WebDriver, fleet: Harness) -> None:
    p = Person(browser, str(seeded.client.make_url("/")))
    key = seeded.acme["Authorization"].removeprefix("Bearer ")
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "UTC"})
    await asyncio.to_thread(sign_in, p, key)
    laps_session, rejected = await upload_laps(seeded), await upload_rejected(seeded)
    async with worker(fleet.settings):
        await wait_ready(seeded, laps_session)
        await latest_run(seeded, rejected, until=("failed",))
    get = seeded.client.get
    first = await (await get(f"/v1/sessions/{laps_session}", headers=seeded.acme)).json()
    first_run = first["active_run_id"]
    configured = (await (await get(f"/v1/runs/{first_run}", headers=seeded.acme)).json())["config"]

    await asyncio.to_thread(line_is_drawn, p, laps_session)
    await asyncio.to_thread(lap_pair_in_url, p, laps_session)
    missing = await asyncio.to_thread(downloads_work, p, laps_session, 3)
    for file in missing:  # not linked: the run lacks its dataset, and the API says so
        resp = await get(f"/v1/sessions/{laps_session}/export/{file}", headers=seeded.acme)
        assert resp.status == 409 and (await resp.json())["code"] == "EXPORT_UNAVAILABLE", file
    await asyncio.to_thread(fits_everywhere, p, laps_session, "a=3&b=1")
    await asyncio.to_thread(rejected_file_is_told, p, rejected)

    new_run, _ = await asyncio.to_thread(place_line, p, laps_session)
    assert new_run != first_run
    run = await (await get(f"/v1/runs/{new_run}", headers=seeded.acme)).json()
    placed, before = run["config"]["start_finish"], configured["start_finish"]
    assert set(placed) == {"lat1", "lon1", "lat2", "lon2"}
    assert placed != before
    # A few pixels from the configured ends: within metres of them.
    for end in "12":
        k = math.cos(math.radians(before[f"lat{end}"]))
        north = (placed[f"lat{end}"] - before[f"lat{end}"]) * 111_195
        east = (placed[f"lon{end}"] - before[f"lon{end}"]) * 111_195 * k
        assert math.hypot(north, east) < 20, (placed, before)
    assert {k: v for k, v in run["config"].items() if k != "start_finish"} == {
        k: v for k, v in configured.items() if k != "start_finish"
    }

    async with worker(fleet.settings):
        await latest_run(seeded, laps_session, until=("succeeded", "partial"))
    await asyncio.to_thread(roll_back, p, laps_session, first_run)
    await asyncio.to_thread(p.check_console)


async def test_the_sessions_page_lists_the_tracks(seeded: Seeded, browser: WebDriver,
                                                  fleet: Harness) -> None:
    from schemas.run_config import StartFinish, TrackConfig
    from streams.sessions.saved_tracks import add_track

    line = StartFinish(lat1=47.0, lon1=8.0, lat2=47.0002, lon2=8.0)
    async with fleet.pool.acquire() as conn:
        await conn.execute("INSERT INTO tenants (name) VALUES ('globex') ON CONFLICT DO NOTHING")
        await add_track(conn, tenant="acme", track=TrackConfig(
            name="Hill climb", start_finish=line, finish=line, sectors=[line, line]))
        await add_track(conn, tenant="globex", track=TrackConfig(name="Theirs",
                                                                 start_finish=line))
        await conn.execute("UPDATE saved_tracks SET created_at = '2026-11-27T03:00:00Z'")
    p = Person(browser, str(seeded.client.make_url("/")))
    await asyncio.to_thread(sign_in, p, seeded.acme["Authorization"].removeprefix("Bearer "))

    def look(width: int, zone: str) -> dict[str, Any]:
        p.screen(width, zone)
        p.driver.get(str(seeded.client.make_url("/")) + "#/sessions")
        p.driver.refresh()  # the zone is read when the page loads
        p.find("#tracks tr[data-track]")
        return dict(p.driver.execute_script(
            """
            const rows = [...document.querySelectorAll('#saved-tracks tr[data-track]')];
            document.querySelector('#track-library').open = true;
            return {names: rows.map((r) => r.dataset.track),
                    text: rows.map((r) => r.textContent).join(' '),
                    saved: rows.map((r) => r.querySelector('td[data-label=saved]').textContent),
                    library: [...document.querySelectorAll('#track-library li')].map(
                        (li) => li.dataset.key),
                    source: document.querySelector('#track-library .track-source').textContent,
                    scroll: document.documentElement.scrollWidth, view: window.innerWidth};
            """))

    try:
        # Saved at 03:00 UTC: 12:00 in Tokyo.
        for width, zone, hour in ((1440, "UTC", "03:00:00 UTC"), (390, "Asia/Tokyo",
                                                                   "12:00:00 GMT+9")):
            shown = await asyncio.to_thread(look, width, zone)
            assert shown["names"] == ["Hill climb", "Home circuit"], shown  # not globex's
            assert "stage (start → finish), 3 sectors" in shown["text"], shown
            assert all(hour in s for s in shown["saved"]), shown
            assert "gb-1948" in shown["library"] and "bacinger/f1-circuits" in shown["source"]
            assert shown["scroll"] <= shown["view"], shown
    finally:
        p.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        p.driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "UTC"})
    await asyncio.to_thread(p.check_console)
