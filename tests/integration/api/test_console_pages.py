"""Every console page at a desk and on a phone, in three time zones (issue 29 item 8).

One browser opens each page of the ``seeded`` tenant (the list of runs, its run, the dead
letters and a group of them, an envelope, the sessions, the devices, a device, the fleet) at
1,440×900 and 390×844 with the browser's zone set to UTC, America/New_York and Asia/Tokyo.
Every page shows times, so every page is seen in every zone. On each: the page itself does
not scroll sideways, every visible control (button, input, select) lies inside the viewport
horizontally, no ``null``/``undefined``/``NaN`` shows in the page's own words (what a device
or a stage said is shown verbatim in code, pre and clipped text, and may say null), and the
browser's console has no error. The sign-in screen is seen at both widths before signing in
(it shows no time). A screenshot of each whole page goes to test_console.py's ARTIFACTS folder.
"""

from __future__ import annotations

import asyncio
import base64
import re
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.integration.api.conftest import Seeded
from tests.integration.api.test_console import (
    ARTIFACTS,
    Person,
    browser,
    measure_this_hour,
    sign_in,
)
from tests.integration.ingest.conftest import Harness

__all__ = ["browser"]  # the fixture, imported to be used here

SIZES = ((1440, 900), (390, 844))
ZONES = ("UTC", "America/New_York", "Asia/Tokyo")
NULLISH = re.compile(r"\b(null|undefined|NaN)\b")
CONTROLS = "button, input:not([type=hidden]), select, textarea"

CHECK = """
const w = window.innerWidth, out = {scrollWidth: document.documentElement.scrollWidth,
  innerWidth: w, outside: [], text: []};
for (const el of document.querySelectorAll(arguments[0])) {
  if (!el.checkVisibility()) continue;
  const r = el.getBoundingClientRect();
  if (r.left < -0.5 || r.right > w + 0.5)
    out.outside.push(`${el.tagName.toLowerCase()}#${el.id}.${el.className}`
      + ` "${(el.textContent || el.value || '').trim().slice(0, 30)}" at x ${r.left}-${r.right}`);
}
const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
while (walk.nextNode()) {
  const n = walk.currentNode, e = n.parentElement;
  if (e.closest('pre, code, .long-text') || !e.checkVisibility()) continue;
  out.text.push(n.textContent);
}
out.text = out.text.join(' ');
return out;
"""


def pages(s: Seeded) -> list[tuple[str, str, str]]:
    """(name, address, what shows once the page is drawn) for every page."""
    return [
        ("runs", "#/runs", f"#runs-rows tr[data-run='{s.run_id}']"),
        ("run", f"#/runs/{s.run_id}", "#dag-svg .dag-node"),
        ("dead-letters", "#/dead-letters", "#session-dlq-rows tr"),
        ("dead-letter-group", f"#/dead-letters/open/{s.group_id}", "#dlq-letters tbody tr"),
        ("envelope", f"#/messages/{s.message_id}", "#msg-stages tbody tr"),
        ("sessions", "#/sessions", "#sessions-rows tr"),
        ("devices", "#/devices", "#devices-rows tr"),
        ("device", f"#/devices/{s.device}", "#device-charts svg.param-chart"),
        ("fleet", "#/fleet", "#fleet-rows tr"),
    ]


def holds_up(p: Person, name: str) -> None:
    """The checks of the module's docstring on the page shown; a screenshot named ``name``."""
    got: dict[str, Any] = p.driver.execute_script(CHECK, CONTROLS)
    where = f"{name}: {got['scrollWidth']} px wide in {got['innerWidth']} px"
    assert got["scrollWidth"] <= got["innerWidth"], f"{where}, scrolls sideways"
    assert not got["outside"], f"{where}, controls off the screen: {got['outside']}"
    found = NULLISH.search(got["text"])
    assert not found, f"{name}: {found.group()!r} shown in {got['text']!r}"
    p.check_console()
    whole_page_shot(p, f"pages-{name}")


def whole_page_shot(p: Person, name: str) -> None:
    """A screenshot of the whole page, scrolled parts included (a phone's page is long)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # As wide as the window: the content's width leaves out the scrollbar's, which is gone
    # while the whole page is drawn, and the picture would lose the page's right edge.
    size = p.driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    width = p.driver.execute_script("return window.innerWidth")
    clip = {"x": 0, "y": 0, "width": width, "height": size["height"], "scale": 1}
    shot = p.driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    (ARTIFACTS / f"{name}.png").write_bytes(base64.b64decode(shot["data"]))


def resize(p: Person, wh: tuple[int, int], zone: str) -> None:
    p.driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": zone})
    p.driver.set_window_size(*wh)
    # The layout viewport must be what was asked (a headless window's chrome takes nothing).
    p.wait(lambda d: d.execute_script("return window.innerWidth") == wh[0])


def sign_in_screen(p: Person) -> None:
    p.driver.get(p.base)
    p.wait(lambda d: d.find_element(By.ID, "api-key").is_displayed())
    for wh in SIZES:
        resize(p, wh, "UTC")
        holds_up(p, f"sign-in-{wh[0]}")


def every_page(p: Person, s: Seeded, zone: str, wh: tuple[int, int]) -> None:
    resize(p, wh, zone)
    for name, address, ready in pages(s):
        p.open(address, ready)
        if name == "run":  # with a job's details open below the DAG
            p.find("#dag-svg .dag-node").click()
            p.find("#job-detail .job")
        holds_up(p, f"{name}-{wh[0]}-{zone.replace('/', '-').lower()}")
    p.open("#/nowhere", ".error")  # so the next round's first page is drawn afresh


async def test_every_page_fits_a_desk_and_a_phone_in_three_zones(
    seeded: Seeded, browser: WebDriver, fleet: Harness
) -> None:
    await measure_this_hour(fleet)  # readings of this hour: the device's and fleet's charts
    p = Person(browser, str(seeded.client.make_url("/")))
    await asyncio.to_thread(sign_in_screen, p)
    await asyncio.to_thread(sign_in, p, seeded.acme["Authorization"].removeprefix("Bearer "))
    for zone in ZONES:
        for wh in SIZES:
            await asyncio.to_thread(every_page, p, seeded, zone, wh)
    await asyncio.to_thread(p.check_console)
