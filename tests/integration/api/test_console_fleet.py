"""The console's fleet page in headless Chromium, as an operator in Tokyo or on a phone sees it:
latencies in the unit that shows them (a millisecond is never ``0.00 s``), the ingest-rate and
end-to-end latency charts drawn inside their plots on a time axis in the browser's zone (named
on the axis), for every range of the picker, and no sideways scrolling of the page at
1,440×900 or 390×844. Any error in the browser's console fails the test; screenshots go to the
console test's artifacts.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import time
from zoneinfo import ZoneInfo

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.integration.api.conftest import Seeded
from tests.integration.api.test_console import Person, browser, measure_this_hour, sign_in
from tests.integration.ingest.conftest import Harness, good_values

__all__ = ["browser"]

ZONES = ("UTC", "Asia/Tokyo")
SIZES = ((1440, 900), (390, 844))
SMALL = re.compile(r"^-?[\d.,]+ (µs|ms)$")

# Every drawn point's centre and the plot's box, in CSS pixels, per chart.
_GEOMETRY = """
return [...document.querySelectorAll('svg.fleet-chart')].map((svg) => {
  const plot = svg.querySelector('.fleet-plot').getBoundingClientRect();
  const dots = [...svg.querySelectorAll('circle.fleet-dot')].map((c) => {
    const r = c.getBoundingClientRect();
    return [r.left + r.width / 2, r.top + r.height / 2];
  });
  return {id: svg.id, plot: [plot.left, plot.top, plot.right, plot.bottom], dots,
          ticks: [...svg.querySelectorAll('.fleet-tick')].map((t) => [t.dataset.t, t.textContent]),
          text: svg.textContent};
});
"""


async def measured_now(fleet: Harness) -> None:
    """d2's envelopes measured as they are sent: its transport latency is milliseconds."""
    for seq in range(1, 4):
        await fleet.publish("d2", {"ts": int(time.time() * 1000), "seq": seq,
                                   "values": good_values()})  # fmt: skip
    await fleet.consume(0, until=lambda: _recorded(fleet, 3))


async def _recorded(fleet: Harness, n: int) -> bool:
    return await fleet.count(
        "SELECT count(*) FROM device_telemetry_logs t JOIN devices d ON d.id = t.device_id"
        " WHERE d.external_id = 'd2'") >= n  # fmt: skip


def check_charts(p: Person, zone: str, range_: str) -> None:
    charts = {c["id"]: c for c in p.driver.execute_script(_GEOMETRY)}
    assert set(charts) == {"fleet-rate-chart", "fleet-latency-chart"}
    for chart in charts.values():
        left, top, right, bottom = chart["plot"]
        assert chart["dots"], f"{chart['id']} drew no point ({range_}, {zone})"
        for x, y in chart["dots"]:
            assert left - 0.5 <= x <= right + 0.5 and top - 0.5 <= y <= bottom + 0.5, (
                chart["id"], zone, range_, (x, y), chart["plot"])
        assert f"time ({zone})" in chart["text"]
        assert chart["ticks"], f"{chart['id']} has no time ticks"
        for at, label in chart["ticks"]:  # each tick says its time in the browser's zone
            local = dt.datetime.fromisoformat(at.replace("Z", "+00:00")).astimezone(ZoneInfo(zone))
            if ":" not in label:  # midnight on a long range: the date
                assert (local.hour, local.minute) == (0, 0), (label, local)
                continue
            hours, minutes = (int(v) for v in re.findall(r"\d+", label)[:2])
            assert minutes == local.minute and hours % 12 == local.hour % 12, (label, local)
    # The newest bucket's point sits at the right of the rate chart: the data is from now.
    rate = charts["fleet-rate-chart"]
    assert max(x for x, _ in rate["dots"]) > rate["plot"][2] - 0.1 * (rate["plot"][2]
                                                                      - rate["plot"][0])


def read_the_fleet(p: Person) -> None:
    for zone in ZONES:
        p.driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": zone})
        for width, height in SIZES:
            p.driver.set_window_size(width, height)
            p.driver.refresh()
            p.open("#/fleet", "#fleet-rows tr[data-device=d2]")
            p.find("#fleet-rate-chart circle.fleet-dot")
            rows = {r.get_attribute("data-device"): r for r in p.all("#fleet-rows tr")}
            cell = rows["d2"].find_element(By.CSS_SELECTOR, "[data-col=latency_p50_s]").text
            assert SMALL.match(cell), cell
            skew = rows["d1"].find_element(By.CSS_SELECTOR, "[data-col=clock_skew_s]").text
            assert SMALL.match(skew) and skew != "0.00 s", skew
            live = p.text("#fleet-e2e")
            assert "0.00 s" not in live and re.search(r"p50 -?[\d.,]+ (µs|ms|s)", live), live
            for range_ in ("15m", "1h", "6h", "24h"):
                p.find(f"#fleet-range button[data-range='{range_}']").click()
                p.wait(lambda d, r=range_: d.find_element(
                    By.CSS_SELECTOR, f"#fleet-range button[data-range='{r}']"
                ).get_attribute("aria-pressed") == "true")  # fmt: skip
                p.find("#fleet-latency-chart circle.fleet-dot")
                check_charts(p, zone, range_)
                overflow = p.driver.execute_script(
                    "return document.documentElement.scrollWidth > window.innerWidth")
                assert not overflow, (zone, width, range_)
            assert p.driver.execute_script("return window.innerWidth") <= width
            p.shot(f"fleet-{zone.replace('/', '-')}-{width}x{height}")


async def test_the_fleet_page_in_every_zone_and_width(
    seeded: Seeded, browser: WebDriver, fleet: Harness
) -> None:
    await measure_this_hour(fleet)
    await measured_now(fleet)
    p = Person(browser, str(seeded.client.make_url("/")))
    key = seeded.acme["Authorization"].removeprefix("Bearer ")
    await asyncio.to_thread(sign_in, p, key)
    await asyncio.to_thread(read_the_fleet, p)
    await asyncio.to_thread(p.check_console)
