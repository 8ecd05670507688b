"""Every console view's state lives in its URL (issue 29 item 9): a link copied from the address
bar shows a colleague the same view.

In headless Chromium, for each page but the session page, the state is set with the page's own
controls (a filter picked, a column sorted, a range chosen, a job clicked, a sample opened); the
address bar must then name it, and the address opened as a new page load (the tab sent away
first, so the page starts from nothing but its URL) must show the same state. The fleet's link is
opened in a browser tab that is not signed in, as a colleague would: the sign-in keeps the link.
The navigation links still lead to each page's default view, and Back returns to the view left.

The ``seeded`` tenant is conftest.py's, with one oversized envelope more (a sample long enough to
open, from test_console_dead_letters.py); the browser and the person are test_console.py's.
"""

from __future__ import annotations

import asyncio
from urllib.parse import quote

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from tests.integration.api.conftest import Seeded
from tests.integration.api.test_console import Person, browser, sign_in
from tests.integration.api.test_console_dead_letters import BLOB
from tests.integration.ingest.conftest import Harness

__all__ = ["browser"]  # the fixture, imported to be used here


def href(p: Person) -> str:
    return str(p.driver.execute_script("return location.href"))


def reopen(p: Person, url: str, ready: str) -> None:
    """Open ``url`` as a new page load, the page starting from nothing but the URL, and wait
    until ``ready`` shows in the view. (Reloaded: a change of the hash alone would not reload,
    and a page left for another address may stay in the back-forward cache holding its event
    stream's connection, of which Chromium keeps six per host.)"""
    p.driver.get(url)
    p.driver.refresh()
    p.wait(lambda d: d.find_elements(By.CSS_SELECTOR, f"#view {ready}"))


def reopen_signed_out(p: Person, url: str, key: str, ready: str) -> None:
    """Open ``url`` as a colleague would: not signed in (the key is kept per tab), signing in."""
    p.driver.get(url)
    p.driver.execute_script("sessionStorage.clear()")
    p.driver.refresh()
    p.wait(lambda d: d.find_element(By.ID, "api-key").is_displayed())
    p.find("#api-key").send_keys(key)
    p.find("#sign-in button[type=submit]").click()
    p.wait(lambda d: d.find_elements(By.CSS_SELECTOR, f"#view {ready}"))


def chosen(p: Person, css: str) -> str:
    return str(Select(p.find(css)).first_selected_option.get_attribute("value"))


def shown(p: Person, rows: str, attribute: str) -> list[str]:
    """The rows' ``attribute``, read in one script: a list the live events redraw between
    finding a row and reading it would make the row stale."""
    return [str(x) for x in p.driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])]"
        ".map((r) => r.getAttribute(arguments[1]));", rows, attribute)]


def runs_list(p: Person, s: Seeded) -> None:
    p.open("#/runs", "#runs-rows tr")
    Select(p.find("#run-status")).select_by_value("pending")
    p.wait(lambda d: "status=pending" in href(p))
    p.find("#run-session").send_keys(s.session_id, Keys.TAB)  # a change: the filter applies
    p.wait(lambda d: f"session={s.session_id}" in href(p))
    reopen(p, href(p), "#runs-rows tr[data-run]")
    assert chosen(p, "#run-status") == "pending"
    assert p.find("#run-session").get_attribute("value") == s.session_id
    assert shown(p, "#runs-rows tr", "data-run") == [s.run_id]
    # A filter that matches nothing, linked, matches nothing again.
    Select(p.find("#run-status")).select_by_value("failed")
    p.wait(lambda d: not p.all("#runs-rows tr[data-run]"))  # the "No runs." row only
    url = href(p)
    assert "status=failed" in url and "pages" not in url, url
    reopen(p, url, "#run-status")
    assert chosen(p, "#run-status") == "failed"
    assert not p.all("#runs-rows tr[data-run]") and "No runs." in p.text("#runs-rows")
    p.shot("url-runs")


def run_page(p: Person, s: Seeded) -> None:
    p.open(f"#/runs/{s.run_id}", "#dag-svg .dag-node")
    job = str(p.all("#dag-svg .dag-node")[2].get_attribute("data-job"))
    p.find(f"#dag-svg .dag-node[data-job='{job}']").click()
    p.wait(lambda d: "job=" in href(p))
    assert href(p).endswith(f"#/runs/{s.run_id}?job={quote(job)}"), href(p)
    reopen(p, href(p), "#dag-svg .dag-node.selected")
    assert shown(p, "#dag-svg .dag-node.selected", "data-job") == [job]
    assert job in p.text("#job-detail h2")
    p.shot("url-run-job")


def open_sample(p: Person) -> str:
    """The oversized envelope's group: its sample opened; the group's id."""
    p.open("#/dead-letters", "#dlq-rows tr[data-group]")
    row = next(r for r in p.all("#dlq-rows tr[data-group]") if "ENVELOPE_TOO_LARGE" in r.text)
    group = str(row.get_attribute("data-group"))
    row.find_element(By.CSS_SELECTOR, ".dlq-sample details summary").click()
    p.wait(lambda d: "expanded=" in href(p))
    reopen(p, href(p), "#dlq-rows tr[data-group]")
    assert chosen(p, "#dlq-state") == "open"
    opened = [
        r.get_attribute("data-group")
        for r in p.all("#dlq-rows tr[data-group]")
        if r.find_elements(By.CSS_SELECTOR, ".dlq-sample details[open]")
    ]
    assert opened == [group]
    p.shot("url-dead-letters-expanded")
    return group


def resolved_view(p: Person, group: str) -> None:
    """The resolved view, linked; a group of it and back to it (not to the open view)."""
    reopen(p, f"{p.base}#/dead-letters", "#dlq-rows tr[data-group]")
    Select(p.find("#dlq-state")).select_by_value("resolved")
    p.wait(lambda d: "state=resolved" in href(p))
    reopen(p, href(p), "#dlq-rows tr[data-group]")
    assert chosen(p, "#dlq-state") == "resolved"
    assert shown(p, "#dlq-rows tr[data-group]", "data-group") == [group]
    p.find("#dlq-rows tr[data-group] td a").click()
    p.find("#dlq-letters")
    p.find("#view a[href^='#/dead-letters?']").click()
    p.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#view #dlq-rows tr[data-group]"))
    assert chosen(p, "#dlq-state") == "resolved"
    assert shown(p, "#dlq-rows tr[data-group]", "data-group") == [group]


def devices(p: Person, s: Seeded) -> None:
    p.open("#/devices", "#devices-rows tr")
    p.find("#device-search").send_keys(s.device)
    p.wait(lambda d: f"q={s.device}" in href(p))
    reopen(p, href(p), "#devices-rows tr")
    assert p.find("#device-search").get_attribute("value") == s.device
    assert [r.text.split()[0] for r in p.all("#devices-rows tr")] == [s.device]

    p.open(f"#/devices/{s.device}", "#device-charts[data-minutes]")
    assert chosen(p, "#device-range") == "60"
    Select(p.find("#device-range")).select_by_value("360")
    p.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#device-charts[data-minutes='360']"))
    assert href(p).endswith(f"#/devices/{s.device}?minutes=360"), href(p)
    reopen(p, href(p), "#device-charts[data-minutes]")
    assert chosen(p, "#device-range") == "360"
    assert p.find("#device-charts").get_attribute("data-minutes") == "360"
    p.shot("url-device-range")


def sessions_list(p: Person) -> None:
    p.open("#/sessions", "#sessions-rows tr")
    p.find("#session-device").send_keys("kart-1", Keys.TAB)
    p.wait(lambda d: "device=kart-1" in href(p))
    reopen(p, href(p), "#sessions-rows tr")
    assert p.find("#session-device").get_attribute("value") == "kart-1"
    devices_shown = p.driver.execute_script(
        "return [...document.querySelectorAll('#sessions-rows tr')]"
        ".map((r) => r.querySelectorAll('td')[1].innerText);")
    assert devices_shown == ["kart-1"]


def fleet_sorted(p: Person, key: str) -> None:
    """The fleet sorted by device, ascending, over 6 h, searched for "d": a colleague's link."""
    p.open("#/fleet", "#fleet-rows tr")
    p.find("#fleet th[data-sort=device]").click()
    p.wait(lambda d: "▼" in d.find_element(By.CSS_SELECTOR, "#fleet th[data-sort=device]").text)
    p.find("#fleet th[data-sort=device]").click()
    p.wait(lambda d: "▲" in d.find_element(By.CSS_SELECTOR, "#fleet th[data-sort=device]").text)
    p.find("#fleet-range button[data-range='6h']").click()
    p.find("#fleet-search").send_keys("d")
    p.wait(lambda d: "q=d" in href(p))
    url = href(p)
    for part in ("sort=device", "order=asc", "range=6h"):
        assert part in url, url
    reopen_signed_out(p, url, key, "#fleet-rows tr")
    assert "▲" in p.text("#fleet th[data-sort=device]")
    pressed = shown(p, "#fleet-range button[aria-pressed=true]", "data-range")
    assert pressed == ["6h"]
    assert p.find("#fleet-search").get_attribute("value") == "d"
    assert shown(p, "#fleet-rows tr", "data-device") == ["d1", "d2"]
    assert href(p) == url, "signing in kept the link"
    p.shot("url-fleet")


def nav_links(p: Person) -> None:
    """From a view with state, the navigation leads to each page's default; Back to the view."""
    p.open("#/runs", "#runs-rows tr")
    Select(p.find("#run-status")).select_by_value("pending")
    p.wait(lambda d: "status=pending" in href(p))
    p.find("nav a[href='#/fleet']").click()
    p.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#view #fleet-rows tr"))
    assert href(p).endswith("#/fleet")
    assert "▼" in p.text("#fleet th[data-sort=seq_gaps]"), "the default sort"
    assert [a.text for a in p.all("nav a.current")] == ["Fleet"]
    p.driver.back()
    p.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#view #run-status"))
    assert href(p).endswith("#/runs?status=pending")
    assert chosen(p, "#run-status") == "pending"
    # The link to the page shown: its default view.
    p.find("nav a[href='#/runs']").click()
    p.wait(lambda d: href(p).endswith("#/runs"))
    p.wait(lambda d: chosen(p, "#run-status") == "")
    for page, ready in (("dead-letters", "#dlq-rows"), ("sessions", "#sessions-rows"),
                        ("devices", "#devices-rows"), ("runs", "#runs-rows")):  # fmt: skip
        p.find(f"nav a[href='#/{page}']").click()
        p.wait(lambda d, ready=ready: d.find_elements(By.CSS_SELECTOR, f"#view {ready}"))
        assert href(p).endswith(f"#/{page}")
        assert [a.text for a in p.all("nav a.current")] == [p.find(f"nav a[href='#/{page}']").text]


async def test_a_link_shows_a_colleague_the_same_view(
    seeded: Seeded, browser: WebDriver, fleet: Harness
) -> None:
    before = await fleet.count()
    await fleet.publish("d1", None, raw=b'{"ts": 5000, "seq": 9, "blob": "' + BLOB.encode() + b'"}')
    await fleet.consume(before + 1)
    p = Person(browser, str(seeded.client.make_url("/")))
    key = seeded.acme["Authorization"].removeprefix("Bearer ")
    await asyncio.to_thread(sign_in, p, key)
    await asyncio.to_thread(runs_list, p, seeded)
    await asyncio.to_thread(run_page, p, seeded)
    group = await asyncio.to_thread(open_sample, p)
    resolve = await seeded.client.post(
        f"/v1/dead-letter-groups/{quote(group, safe='')}/resolve",
        json={"note": "too large, by design"},
        headers=seeded.acme,
    )
    assert resolve.status == 200, await resolve.text()
    await asyncio.to_thread(resolved_view, p, group)
    await asyncio.to_thread(devices, p, seeded)
    await asyncio.to_thread(sessions_list, p)
    await asyncio.to_thread(fleet_sorted, p, key)
    await asyncio.to_thread(nav_links, p)
    await asyncio.to_thread(p.check_console)
