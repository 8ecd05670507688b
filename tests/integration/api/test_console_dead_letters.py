"""The dead-letter pages and the envelope page in headless Chromium, at a desk and on a phone.

Beside the ``seeded`` tenant's two malformed envelopes, acme gets an oversized one (a 70 KB
body: ``ENVELOPE_TOO_LARGE``, the sample that once made the groups table 4,512 px wide) and
one whose publish failed (Redis away: ``PUBLISH_FAILED``, the only kind a redrive can
publish). At 1,440×900 and 390×844, in Tokyo and New York time, the pages must not scroll
sideways, every Redrive and Resolve must be on the screen, and no ``null`` or ``undefined``
may show. The envelope page must show the body the device sent and the tenant and device
(from the subject when the row names none), offer Redrive only where a redrive can work, and
resolve a single dead letter; after each action the page shows the new state and its notice
can be dismissed. The resolved view shows each resolution's note, who and when.
"""

from __future__ import annotations

import asyncio
import re
import socket
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.integration.api.conftest import Seeded
from tests.integration.api.test_console import Person, browser, sign_in
from tests.integration.ingest.conftest import Harness, good_values

__all__ = ["browser"]  # the fixture, imported to be used here

DESK, PHONE = (1440, 900), (390, 844)
NULLISH = re.compile(r"\b(null|undefined|NaN)\b")
BLOB = "x" * 70_000


def _closed_port_redis() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"redis://127.0.0.1:{s.getsockname()[1]}/0"


async def dead_letter_of(fleet: Harness, code: str) -> dict[str, Any]:
    """The first dead letter with reason ``code``: its id and its envelope's."""
    async with fleet.pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT id, ingestion_message_id FROM dead_letters WHERE reason_code = $1"
            " ORDER BY id LIMIT 1",
            code,
        )
    assert row is not None, code
    return dict(row)


async def more_dead_letters(fleet: Harness) -> tuple[dict[str, Any], dict[str, Any]]:
    """acme's oversized envelope and its envelope whose publish failed, both dead-lettered."""
    before = await fleet.count()
    await fleet.publish("d1", None, raw=b'{"ts": 5000, "seq": 9, "blob": "' + BLOB.encode() + b'"}')
    await fleet.consume(before + 1)
    dead = fleet.settings.with_services(redis_url=_closed_port_redis())
    await fleet.publish("d2", {"ts": 6_000, "seq": 1, "values": good_values()})
    await fleet.consume(before + 2, settings=dead, within=30)
    return (await dead_letter_of(fleet, "ENVELOPE_TOO_LARGE"),
            await dead_letter_of(fleet, "PUBLISH_FAILED"))  # fmt: skip


def size(p: Person, wh: tuple[int, int], zone: str) -> None:
    p.driver.set_window_size(*wh)
    p.driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": zone})
    # The layout viewport must be what was asked (a headless window's chrome takes nothing).
    p.wait(lambda d: d.execute_script("return window.innerWidth") <= wh[0])


def holds_up(p: Person, name: str, controls: str = "") -> None:
    """No sideways scroll of the page, every control of ``controls`` (CSS) on the screen once
    scrolled to, no null/undefined/NaN shown, no browser console error; a screenshot."""
    scroll_w, inner_w = p.driver.execute_script(
        "return [document.documentElement.scrollWidth, window.innerWidth]"
    )
    assert scroll_w <= inner_w, f"{name}: the page is {scroll_w} px wide in {inner_w} px"
    if controls:
        found = p.all(controls)
        assert found, f"{name}: no {controls}"
        for el in found:
            p.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", el)
            left, right, top, bottom, w, h = p.driver.execute_script(
                "const r = arguments[0].getBoundingClientRect();"
                " return [r.left, r.right, r.top, r.bottom, window.innerWidth, window.innerHeight]",
                el,
            )
            assert left >= 0 and right <= w and top >= 0 and bottom <= h, (
                f"{name}: {el.get_attribute('class') or el.get_attribute('id')} at x {left:.0f}"
                f"-{right:.0f}, y {top:.0f}-{bottom:.0f} in {w}×{h}"
            )
    # The page's own words: what a device or a stage said (shown verbatim in code, pre and
    # clipped text) may well say null.
    text = p.driver.execute_script(
        "const out = [], walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);"
        " while (walk.nextNode()) { const n = walk.currentNode, e = n.parentElement;"
        "   if (e.closest('pre, code, .long-text') || !e.checkVisibility()) continue;"
        "   out.push(n.textContent); }"
        " return out.join(' ')"
    )
    assert not NULLISH.search(text), f"{name}: {NULLISH.search(text)!r} shown in {text!r}"
    p.shot(f"dlq-{name}")


def zone_suffix(p: Person) -> str:
    """The zone name the page's times end with (the browser's own spelling of it)."""
    return str(p.driver.execute_script(
        "return new Date().toLocaleString(undefined, {timeZoneName: 'short'}).split(' ').pop()"
    ))  # fmt: skip


def open_envelope(p: Person, message_id: int) -> None:
    """The envelope page of ``message_id``, once it (not the page before) is drawn."""
    p.driver.execute_script("location.hash = arguments[0]", f"#/messages/{message_id}")
    p.wait(lambda d: [e.text for e in d.find_elements(By.CSS_SELECTOR, "#msg h1 code")]
           == [str(message_id)])  # fmt: skip


def groups_at_every_width(p: Person) -> None:
    for wh, zone in ((DESK, "Asia/Tokyo"), (PHONE, "America/New_York")):
        size(p, wh, zone)
        p.open("#/runs", "#runs-rows")  # then the dead letters, drawn in this zone afresh
        p.open("#/dead-letters", "#dlq-rows tr[data-group]")
        codes = [r.find_element(By.CSS_SELECTOR, "td a").text for r in p.all("#dlq-rows tr")]
        assert {"ENVELOPE_TOO_LARGE", "ENVELOPE_UNPARSEABLE", "PUBLISH_FAILED"} <= set(codes)
        big = p.find("#dlq-rows tr[data-group] td.dlq-sample details")
        assert len(big.find_element(By.CSS_SELECTOR, "summary code").text) <= 120
        suffix = zone_suffix(p)
        assert all(t.text.endswith(suffix) for t in p.all("#dlq-rows time")), suffix
        holds_up(p, f"groups-{wh[0]}", "#dlq-rows .dlq-redrive, #dlq-rows .dlq-resolve")
        # The oversized sample opened: still no sideways scroll, the actions still in view.
        big.find_element(By.CSS_SELECTOR, "summary").click()
        assert BLOB[:400] in big.find_element(By.CSS_SELECTOR, "pre").text
        holds_up(p, f"groups-{wh[0]}-sample-open", "#dlq-rows .dlq-redrive, #dlq-rows .dlq-resolve")
        # A group of one page: its letters, and no "null" under the table.
        row = next(r for r in p.all("#dlq-rows tr[data-group]") if "ENVELOPE_TOO_LARGE" in r.text)
        row.find_element(By.CSS_SELECTOR, "td a").click()
        p.find("#dlq-letters tbody tr[data-dead-letter]")
        holds_up(p, f"group-{wh[0]}")


def envelope_pages(
    p: Person, bad: dict[str, Any], big: dict[str, Any], failed: dict[str, Any]
) -> None:
    for wh, zone in ((PHONE, "Asia/Tokyo"), (DESK, "America/New_York")):
        size(p, wh, zone)
        # The oversized malformed envelope: its body, who sent it, Resolve but no Redrive.
        open_envelope(p, big["ingestion_message_id"])
        assert "70,0" in p.text("#msg-body") and "bytes" in p.text("#msg-body")
        assert BLOB[:200] in p.text("#msg-body pre")
        assert p.text("#msg-tenant").startswith("acme") and p.text("#msg-device").startswith("d1")
        # d1 is registered: its malformed envelope's row names it (no "from the subject").
        assert "from the subject" not in p.text("#msg-device")
        assert "ENVELOPE_TOO_LARGE" in p.text("#msg-dead-letter")
        assert not p.all("#msg-redrive") and p.all("#msg-not-redrivable")
        assert all(t.text.endswith(zone_suffix(p)) for t in p.all("#msg time"))
        holds_up(p, f"envelope-too-large-{wh[0]}", "#msg-resolve")
        # A malformed envelope of the seeded two, not JSON: its text, the same offer.
        open_envelope(p, bad["ingestion_message_id"])
        assert "not json" in p.text("#msg-body")
        assert not p.all("#msg-redrive")
        holds_up(p, f"envelope-unparseable-{wh[0]}", "#msg-resolve")
        # The envelope whose publish failed: Redrive offered.
        open_envelope(p, failed["ingestion_message_id"])
        assert p.text("#msg-tenant") == "acme" and p.text("#msg-device") == "d2"
        assert '"values"' in p.text("#msg-body")  # the device's own field names, as sent
        holds_up(p, f"envelope-publish-failed-{wh[0]}", "#msg-redrive, #msg-resolve")


def act_on_envelopes(p: Person, big: dict[str, Any], failed: dict[str, Any]) -> None:
    size(p, DESK, "Asia/Tokyo")
    # Redrive the one that can be: the page reads itself again and shows it redriven.
    open_envelope(p, failed["ingestion_message_id"])
    p.find("#msg-redrive").click()
    assert "Redrive: completed" in p.notice("Redrive:")
    p.wait(lambda d: d.find_element(By.ID, "msg-dead-letter").get_attribute("data-state")
           == "resolved")  # fmt: skip
    assert not p.all("#msg-redrive") and not p.all("#msg-resolve")
    assert "completed" in p.text("#view dl.facts")  # the envelope's status, read again
    assert "redriven" in p.text("#msg-dead-letter")
    p.find(".notice .notice-close").click()
    p.wait(lambda d: not d.find_elements(By.CSS_SELECTOR, ".notice"))
    holds_up(p, "envelope-redriven")

    # Resolve the oversized one alone, with a note: the page shows the note, who and when.
    open_envelope(p, big["ingestion_message_id"])
    p.find("#msg-resolve").click()  # no note: refused, said in a notice
    assert "say why" in p.notice("say why")
    p.find("#msg-note").send_keys("oversized test rig frame")
    p.find("#msg-resolve").click()
    assert f"Resolved dead letter {big['id']}" in p.notice("Resolved dead letter")
    assert len(p.all(".notice")) == 1, "the refusal's notice went when the new one came"
    p.wait(lambda d: d.find_element(By.ID, "msg-dead-letter").get_attribute("data-state")
           == "resolved")  # fmt: skip
    assert p.text("#msg-resolution-note") == "oversized test rig frame"
    assert p.text("#msg-resolved-by").startswith('api key "test"')
    assert not p.all("#msg-resolve")
    holds_up(p, "envelope-resolved")


def resolved_view(p: Person) -> None:
    for wh, zone in ((DESK, "Asia/Tokyo"), (PHONE, "America/New_York")):
        size(p, wh, zone)
        p.open("#/dead-letters", "#dlq-rows tr[data-group]")
        p.find("#dlq-state option[value=resolved]").click()
        p.wait(lambda d: "ENVELOPE_TOO_LARGE" in d.find_element(By.ID, "dlq-rows").text)
        row = next(r for r in p.all("#dlq-rows tr[data-group]") if "ENVELOPE_TOO_LARGE" in r.text)
        assert "oversized test rig frame" in row.text
        assert 'api key "test"' in row.text
        assert row.find_element(By.CSS_SELECTOR, ".dlq-resolution time").text.endswith(
            zone_suffix(p)
        )
        redriven = next(r for r in p.all("#dlq-rows tr[data-group]") if "PUBLISH_FAILED" in r.text)
        assert "Redriven" in redriven.text
        holds_up(p, f"resolved-{wh[0]}")
        row.find_element(By.CSS_SELECTOR, "td a").click()
        letter = p.find("#dlq-letters tbody tr[data-dead-letter]")
        assert "oversized test rig frame" in letter.text and 'api key "test"' in letter.text
        holds_up(p, f"resolved-group-{wh[0]}")


async def test_dead_letters_hold_up_at_every_width_and_act_from_the_envelope(
    seeded: Seeded, browser: WebDriver, fleet: Harness
) -> None:
    bad = await dead_letter_of(fleet, "ENVELOPE_UNPARSEABLE")
    big, failed = await more_dead_letters(fleet)
    p = Person(browser, str(seeded.client.make_url("/")))
    key = seeded.acme["Authorization"].removeprefix("Bearer ")
    await asyncio.to_thread(sign_in, p, key)
    await asyncio.to_thread(groups_at_every_width, p)
    await asyncio.to_thread(envelope_pages, p, bad, big, failed)
    await asyncio.to_thread(act_on_envelopes, p, big, failed)
    await asyncio.to_thread(resolved_view, p)
    await asyncio.to_thread(p.check_console)
