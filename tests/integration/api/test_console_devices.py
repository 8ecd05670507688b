"""The device page in a real browser (issue 29): its charts in UTC, New York and Tokyo, on a
desktop and on a phone, and Deactivate/Activate.

d1 of the ``seeded`` tenant sends a reading every 30 s over the last 20 minutes, except for six
minutes in the middle (a gap), with its boolean ``door_open`` changing and, in one bucket, both
open and shut. In each time zone (set in the browser through the DevTools protocol, the page
reloaded) every chart must be drawn inside its plot, fill the plot's width (the readings span the
drawing, not the last tenth of an hour), keep the gap blank, tick its time axis on the browser's
own wall clock, name the zone, and draw the boolean as a band of shares, never as averaged
values. At 1,440x900 and at 390x844 the page must not scroll sideways. Deactivate must show the
new state at once, without a reload, and its notice must be dismissible.

Screenshots go where test_console.py puts its own (``$TIDEWAY_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import time
from typing import Any
from zoneinfo import ZoneInfo

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.integration.api.conftest import Seeded
from tests.integration.api.test_console import Person, browser, sign_in
from tests.integration.ingest.conftest import Harness, good_values

__all__ = ["browser"]  # the fixture, shared with test_console.py

STEP_S = 10  # the bucket the API picks for about 20 minutes of readings (span / 239, rounded up)
PLOT = (46.0, 350.0)  # the drawing's plot, left to right, in its own units (devices.js L, W - R)
HOLE = range(480, 840)  # seconds back without readings: the gap
ZONES = ("UTC", "America/New_York", "Asia/Tokyo")


def _readings(now: float) -> list[tuple[float, dict[str, Any]]]:
    """(measured at, values): every 30 s over 20 minutes, 1 s after a bucket's start, none in
    :data:`HOLE`; the door open for the first five minutes, then shut; at 5 minutes back a
    second reading in the same bucket with the door open (that bucket: half the readings true)."""
    base = (int(now) // STEP_S) * STEP_S - 2 * STEP_S + 1
    out = []
    for back in range(1200, -1, -30):
        if back in HOLE:
            continue
        at = base - back
        values = {**good_values(20.0 + back / 100), "door": int(back >= 900)}
        out.append((at, values))
        if back == 300:
            out.append((at + 2, {**values, "door": 1}))
    return out


async def _measure(s: Seeded, fleet: Harness) -> list[float]:
    readings = _readings(time.time())
    for seq, (at, values) in enumerate(readings, start=2):
        await fleet.publish("d1", {"ts": int(at * 1000), "seq": seq, "values": values})
    await fleet.consume(3 + len(readings))
    buckets = len({int(at) // STEP_S for at, _ in readings})
    for _ in range(200):  # until ClickHouse has them all (the consumer writes it before Postgres)
        body = await (await s.client.get("/v1/devices/d1/series", headers=s.acme)).json()
        temp = next((p for p in body["parameters"] if p["parameter"] == "temp_c"), None)
        if temp is not None and len(temp["points"]) == buckets:
            assert body["step_s"] == STEP_S, body["step_s"]
            return [at for at, _ in readings]
        await asyncio.sleep(0.1)
    raise AssertionError(f"the series never held the {buckets} buckets: {body}")


def _marks(p: Person) -> dict[str, dict[str, Any]]:
    """Per chart: where its marks lie (bounding box in the drawing's units), its kind, the
    number of separate lines and dots, and its tick labels with their instants."""
    return dict(
        p.driver.execute_script(
            """
            const out = {};
            for (const c of document.querySelectorAll('#device-charts svg.param-chart')) {
              const marks = [...c.querySelectorAll('.param-line, .param-dot, .bool-bucket rect')];
              const boxes = marks.map((m) => m.getBBox());
              out[c.dataset.parameter] = {
                kind: c.dataset.kind,
                left: Math.min(...boxes.map((b) => b.x)),
                right: Math.max(...boxes.map((b) => b.x + b.width)),
                lines: [...c.querySelectorAll('path.param-line')].map((l) =>
                  (l.getAttribute('d').match(/M/g) || []).length).reduce((a, b) => a + b, 0),
                dots: c.querySelectorAll('.param-dot').length,
                title: c.querySelector('.chart-title').textContent,
                ticks: [...c.querySelectorAll('.tick-label[data-t]')].map((t) =>
                  [t.dataset.t, t.textContent]),
                shares: [...c.querySelectorAll('.bool-bucket')].map((g) => Number(g.dataset.share)),
              };
            }
            return out;
            """
        )
    )


def look_in(p: Person, zone: str, readings: list[float]) -> None:
    p.driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": zone})
    p.driver.refresh()  # the page drawn again in the zone (the key is kept in session storage)
    p.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#device-charts svg.param-chart"))
    assert (
        p.driver.execute_script("return Intl.DateTimeFormat().resolvedOptions().timeZone") == zone
    )
    assert p.find("#device-charts").get_attribute("data-zone") == zone
    caption = p.text("#device-charts-caption")
    assert f"Times in {zone}" in caption, caption

    charts = _marks(p)
    assert {"temp_c", "humidity", "door_open"} <= set(charts), set(charts)
    width = PLOT[1] - PLOT[0]
    for name, c in charts.items():
        # Inside the plot, and across most of it: the first reading at its left edge, the newest
        # a few seconds before "now" at its right.
        assert PLOT[0] - 0.5 <= c["left"] and c["right"] <= PLOT[1] + 0.5, (zone, name, c)
        assert c["right"] - c["left"] >= 0.9 * width, (zone, name, c)
        # A readable time axis on the browser's own wall clock: HH:MM at round local minutes.
        assert len(c["ticks"]) >= 3, (zone, name, c["ticks"])
        for at, label in c["ticks"]:
            local = dt.datetime.fromisoformat(at).astimezone(ZoneInfo(zone))
            want = (
                f"{local:%b} {local.day}" if local.hour == local.minute == 0 else f"{local:%H:%M}"
            )
            assert label == want, (zone, name, at, label)  # midnight: the day instead
            assert local.second == 0 and local.minute % 5 == 0, (zone, at)
    temp = charts["temp_c"]
    assert temp["kind"] == "number"
    assert temp["lines"] == 2 and temp["dots"] == 0, "one line each side of the gap"
    assert re.search(r"temp_c: \d+\.\d+ to \d+\.\d+ degC", temp["title"]), temp["title"]

    door = charts["door_open"]
    assert door["kind"] == "boolean" and door["lines"] == 0
    assert "share of readings true" in door["title"] and " to " not in door["title"]
    assert set(door["shares"]) == {0.0, 0.5, 1.0}, door["shares"]
    assert len(door["shares"]) == len({int(at) // STEP_S for at in readings})
    p.driver.execute_script("arguments[0].scrollIntoView()", p.find("#device-charts-section"))
    p.shot(f"device-charts-{zone.replace('/', '-')}")


def pick_a_day(p: Person) -> None:
    """The last 24 hours: the same 20 minutes of readings, still across the whole width, in the
    same 10 s buckets (the range asked bounds the readings; they set the axis)."""
    p.find("#device-range option[value='1440']").click()
    p.wait(lambda d: d.find_element(By.ID, "device-charts").get_attribute("data-minutes") == "1440")
    assert "10 s bucket" in p.text("#device-charts-caption")
    width = PLOT[1] - PLOT[0]
    for name, c in _marks(p).items():
        assert c["right"] - c["left"] >= 0.9 * width, (name, c)
    p.find("#device-range option[value='60']").click()


def fits(p: Person, width: int, height: int) -> None:
    p.driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 700},
    )
    p.driver.refresh()
    p.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#device-charts svg.param-chart"))
    p.find("#device-credentials")  # the page is whole
    sizes = p.driver.execute_script(
        """
        const charts = [...document.querySelectorAll('#device-charts svg.param-chart')];
        return {scroll: document.documentElement.scrollWidth, view: window.innerWidth,
                right: Math.max(...charts.map((c) => c.getBoundingClientRect().right)),
                narrowest: Math.min(...charts.map((c) => c.getBoundingClientRect().width))};
        """
    )
    assert sizes["view"] == width, sizes
    assert sizes["scroll"] <= width, f"the page scrolls sideways at {width}x{height}: {sizes}"
    assert sizes["right"] <= width and sizes["narrowest"] >= min(300, width - 60), sizes
    p.shot(f"device-{width}x{height}")
    p.driver.execute_script("arguments[0].scrollIntoView()", p.find("#device-charts"))
    p.shot(f"device-{width}x{height}-charts")
    p.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def deactivate(p: Person) -> None:
    assert p.text("#device-state") == "active"
    p.driver.execute_script("window.__notReloaded = true")
    p.find("#device-toggle").click()
    p.wait(lambda d: d.find_element(By.ID, "device-toggle").text == "Activate")
    assert p.text("#device-state").startswith("inactive")
    assert "d1 is now inactive." in p.notice("is now")
    assert p.driver.execute_script("return window.__notReloaded") is True
    p.driver.execute_script("window.scrollTo(0, 0)")
    p.shot("device-deactivated")
    # The notice goes when dismissed.
    p.find(".notice .notice-close").click()
    p.wait(lambda d: not d.find_elements(By.CSS_SELECTOR, ".notice"))


def activate(p: Person) -> None:
    p.find("#device-toggle").click()
    p.wait(lambda d: d.find_element(By.ID, "device-toggle").text == "Deactivate")
    assert p.text("#device-state") == "active"


async def _active(s: Seeded) -> bool:
    body = await (await s.client.get("/v1/devices/d1", headers=s.acme)).json()
    return bool(body["active"])


async def test_the_device_page_in_three_zones_two_sizes(
    seeded: Seeded, browser: WebDriver, fleet: Harness
) -> None:
    readings = await _measure(seeded, fleet)
    p = Person(browser, str(seeded.client.make_url("/")))
    await asyncio.to_thread(sign_in, p, seeded.acme["Authorization"].removeprefix("Bearer "))
    await asyncio.to_thread(p.open, "#/devices/d1", "#device-charts svg.param-chart")
    for zone in ZONES:
        await asyncio.to_thread(look_in, p, zone, readings)
    await asyncio.to_thread(pick_a_day, p)
    for width, height in ((1440, 900), (390, 844)):
        await asyncio.to_thread(fits, p, width, height)

    await asyncio.to_thread(deactivate, p)
    assert not await _active(seeded)  # what the page shows is what the registry holds
    await asyncio.to_thread(activate, p)
    assert await _active(seeded)
    await asyncio.to_thread(p.check_console)


def try_version(p: Person, version: int) -> dict[str, Any]:
    """Pick ``version`` in the device page's schema trial, press Try, read what it shows."""
    from selenium.webdriver.support.ui import Select

    Select(p.find("#trial-version")).select_by_value(str(version))
    p.find("#trial-run").click()
    p.find(f'#trial-verdict[data-version="{version}"]')
    return dict(p.driver.execute_script(
        """
        const verdict = document.getElementById('trial-verdict');
        const changes = {};
        for (const r of document.querySelectorAll('#trial-result table:not([id]) tbody tr')) {
          const cells = r.querySelectorAll('td');
          changes[cells[0].textContent] = Number(cells[cells.length - 1].textContent);
        }
        return {flagged: verdict.dataset.flagged === 'true', text: verdict.textContent, changes,
                envelopes: document.querySelectorAll('#trial-envelopes tbody tr').length};
        """
    ))


async def test_a_schema_version_tried_from_the_device_page(
    seeded: Seeded, browser: WebDriver, fleet: Harness
) -> None:
    from schemas.device_schema import parse_schema_text
    from streams import registry
    from tests.integration.ingest.test_schema_trial import candidate_text

    for seq in range(2, 42):  # 40 readings, 20 of them above the tighter limit (25 °C)
        values = good_values(20.0 + (seq % 2) * 10)
        await fleet.publish("d1", {"ts": 1_780_000_000_000 + seq * 1000, "seq": seq,
                                   "values": values})
    await fleet.consume(3 + 40)
    text = candidate_text()
    async with fleet.pool.acquire() as conn:  # stored as v2; d1 stays on v1
        await registry.apply_schema(conn, parse_schema_text(text), source_text=text)
    p = Person(browser, str(seeded.client.make_url("/")))
    await asyncio.to_thread(sign_in, p, seeded.acme["Authorization"].removeprefix("Bearer "))
    await asyncio.to_thread(p.open, "#/devices/d1", "#device-schema-trial")

    tried = await asyncio.to_thread(try_version, p, 2)
    assert tried["flagged"], tried
    assert tried["changes"].get("completed → failed_validation") == 20, tried
    assert tried["changes"].get("OUT_OF_RANGE") == 20, tried
    assert tried["envelopes"] == 20  # each changed envelope listed, linked to its page
    same = await asyncio.to_thread(try_version, p, 1)
    # The device's own version changes nothing; the seeded malformed envelope is refused by
    # both (its reason is listed, no status changes).
    assert not same["flagged"] and same["envelopes"] == 0, same
    assert same["changes"] == {"ENVELOPE_UNPARSEABLE": 1}, same
    await asyncio.to_thread(trial_fits_a_phone, p)
    await asyncio.to_thread(p.check_console)


def trial_fits_a_phone(p: Person) -> None:
    """At 390 px in Tokyo: nothing wider than the screen, each measured time in the zone."""
    p.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                             {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True})
    p.driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Asia/Tokyo"})
    try:
        p.driver.refresh()
        p.find("#device-schema-trial")
        assert try_version(p, 2)["envelopes"] == 20
        times = p.driver.execute_script(
            "return [...document.querySelectorAll('#trial-envelopes time')]"
            ".map((t) => [t.getAttribute('datetime'), t.textContent])")
        assert times, "no measured times listed"
        for iso, text in times:
            tokyo = dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(
                ZoneInfo("Asia/Tokyo"))
            assert tokyo.strftime("%H:%M:%S") in text and "GMT+9" in text, (iso, text)
        sizes = p.driver.execute_script(
            "return {scroll: document.documentElement.scrollWidth, view: window.innerWidth,"
            " right: document.getElementById('trial-envelopes').getBoundingClientRect().right}")
        assert sizes["view"] == 390 and sizes["scroll"] <= 390 and sizes["right"] <= 390, sizes
        p.shot("device-schema-trial-phone")
    finally:
        p.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        p.driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "UTC"})
