// Devices: the registered devices (searchable), and one device with its hot state, a chart per
// numeric parameter over the last hour (ClickHouse), its newest envelopes, its sessions and the
// credentials it connects to NATS with (issue, rotate, revoke; a new secret shown once).
import { api, h, table, state, when, short, facts, notice, act, documented } from "../lib.js";

export async function listDevices(view) {
  const search = h("input", { id: "device-search", type: "search", placeholder: "filter the loaded devices" });
  const body = h("tbody", { id: "devices-rows" });
  const more = h("button", { id: "devices-more", type: "button", hidden: true }, "More");
  let items = [];
  let next = "/v1/devices?limit=200";
  async function load() { // a page at a time; the fleet page searches every device on the server
    const page = await api(next);
    items = items.concat(page.items);
    next = page.next;
    more.hidden = !next;
    draw();
  }
  function draw() {
    const q = search.value.trim().toLowerCase();
    const shown = items.filter((d) => !q || [d.external_id, d.name, d.schema].some((v) => v && v.toLowerCase().includes(q)));
    body.replaceChildren(...shown.map((d) => h("tr", {},
      h("td", {}, h("a", { href: `#/devices/${encodeURIComponent(d.external_id)}` }, d.external_id)),
      h("td", {}, d.name ?? ""), h("td", {}, d.active ? "active" : "inactive"),
      h("td", {}, d.schema ? `${d.schema} v${d.schema_version ?? "?"}` : "—"), h("td", {}, when(d.updated_at)))));
  }
  search.addEventListener("input", draw);
  more.addEventListener("click", () => act(more, load));
  await load();
  const t = table(["device", "name", "state", "schema", "updated"], [], { id: "devices" });
  t.querySelector("tbody").replaceWith(body);
  view.append(h("h1", {}, "Devices"), h("div", { class: "filters" }, search), t, more);
}

export async function showDevice(view, device) {
  const enc = encodeURIComponent(device);
  const d = await api(`/v1/devices/${enc}`);
  const toggle = h("button", { id: "device-toggle", type: "button" }, d.active ? "Deactivate" : "Activate");
  toggle.addEventListener("click", () => act(toggle, async () => {
    const r = await api(`/v1/devices/${enc}/${d.active ? "deactivate" : "activate"}`, { method: "POST" });
    notice(`${device} is now ${r.device.active ? "active" : "inactive"}.`);
    d.active = r.device.active;
    toggle.textContent = d.active ? "Deactivate" : "Activate";
  }));
  const [sessions, activity] = await Promise.all([
    api(`/v1/sessions?device=${enc}&limit=50`), api(`/v1/devices/${enc}/activity`)]);
  const topics = Object.entries(activity.state).sort();
  const hot = topics.length
    ? topics.flatMap(([topic, doc]) => [
      h("h3", {}, topic, " ", h("span", { class: "muted" }, `measured ${when(doc.ts)}`, doc.seq == null ? "" : `, seq ${doc.seq}`)),
      table(["parameter", "value"], Object.entries(doc.values || {}).sort().map(([k, v]) =>
        h("tr", {}, h("td", {}, k), h("td", {}, typeof v === "object" && v !== null ? JSON.stringify(v) : String(v)))),
      { class: "hot-state", "data-topic": topic })])
    : [h("p", { class: "muted" }, "No measurement published yet.")];
  const recent = table(["envelope", "received", "measured", "seq", "topic", "status", "error"],
    activity.messages.map((m) => h("tr", {},
      h("td", {}, h("a", { href: `#/messages/${m.id}` }, m.id)), h("td", {}, when(m.received_at)),
      h("td", {}, when(m.measured_at)), h("td", {}, m.seq ?? "—"), h("td", {}, m.topic),
      h("td", {}, state(m.status)), h("td", {}, m.error_code ?? ""))), { id: "device-messages" });
  view.append(h("h1", {}, "Device ", h("code", {}, device)),
    facts([["name", d.name], ["state", d.active ? "active" : "inactive (envelopes recorded, not published)"],
      ["schema", d.schema ? `${d.schema} v${d.schema_version ?? "?"}` : null], ["registered", when(d.created_at)]]),
    h("div", { class: "actions" }, toggle),
    h("h2", {}, "Hot state"), h("div", { id: "device-hot-state" }, hot),
    h("h2", {}, "Last hour"), await charts(enc),
    h("h2", {}, "Recent envelopes"), recent,
    h("h2", {}, "Sessions"),
    table(["session", "title", "status", "uploaded"], sessions.items.map((s) => h("tr", {},
      h("td", {}, h("a", { href: `#/sessions/${s.id}` }, short(s.id))), h("td", {}, s.title ?? ""),
      h("td", {}, state(s.status)), h("td", {}, when(s.created_at))))));
  if (await documented("/v1/devices/{device}/credentials")) view.append(await credentials(device, enc));
}

/** The device's credentials with Issue, Rotate and Revoke; a secret just issued shown once. */
async function credentials(device, enc) {
  const path = `/v1/devices/${enc}/credentials`;
  const rows = h("tbody", { id: "credential-rows" });
  // The secret lives only in this box's DOM: it is never stored, and the API never shows it again.
  const secretBox = h("div", { id: "credential-secret" });
  async function load() {
    const page = await api(path);
    rows.replaceChildren(...(page.items.length ? page.items.map(row)
      : [h("tr", {}, h("td", { colspan: 5, class: "muted" }, "No credential issued yet."))]));
  }
  function row(c) {
    let revoke = "";
    if (c.state === "active") {
      revoke = h("button", { type: "button", class: "credential-revoke" }, "Revoke");
      revoke.addEventListener("click", () => act(revoke, async () => {
        if (!confirm(`Revoke credential ${c.key_id} of ${device}? Its connections are closed.`)) return;
        await api(`${path}/${encodeURIComponent(c.key_id)}`, { method: "DELETE" });
        notice(`Revoked credential ${c.key_id} of ${device}.`);
        await load();
      }));
    }
    return h("tr", { "data-key": c.key_id, "data-state": c.state },
      h("td", {}, h("code", {}, c.key_id)), h("td", {}, state(c.state)), h("td", {}, when(c.created_at)),
      h("td", {}, when(c.revoked_at)), h("td", {}, revoke));
  }
  function showSecret(issued) {
    const value = h("input", { id: "credential-secret-value", class: "secret-value", type: "text",
      readonly: true, value: issued.secret, "aria-label": "secret", spellcheck: "false", autocomplete: "off" });
    value.addEventListener("focus", () => value.select());
    const hint = h("span", { class: "muted" }, "Select it and copy (Ctrl+C / ⌘C), or use Copy.");
    const copy = h("button", { type: "button" }, "Copy");
    copy.addEventListener("click", () => {
      value.focus();
      // The clipboard API needs a secure origin; elsewhere the selected text is the copy hint.
      navigator.clipboard?.writeText(issued.secret).then(() => { hint.textContent = "Copied."; }, () => {});
    });
    const done = h("button", { type: "button", id: "credential-secret-done" }, "Done, I stored it");
    done.addEventListener("click", () => secretBox.replaceChildren());
    secretBox.replaceChildren(h("div", { class: "secret-box", role: "alert" },
      h("p", {}, h("strong", {}, "This secret will not be shown again."),
        " Store it on the device now: Tideway keeps only its hash, so a lost secret is replaced (Rotate), never shown."),
      facts([["username", h("code", { id: "credential-username" }, issued.username)], ["secret", value],
        ["key id", h("code", {}, issued.key_id)]]),
      h("p", {}, "The device connects to NATS with user ", h("code", {}, issued.username),
        " and the secret as password; over MQTT, the same username and password."),
      issued.retired.length ? h("p", {}, `Retired: ${issued.retired.join(", ")}.`) : "",
      h("div", { class: "actions" }, copy, done, hint)));
    secretBox.scrollIntoView({ block: "nearest" }); // below the fold on a long device page
  }
  const issue = h("button", { id: "credential-issue", type: "button" }, "Issue");
  issue.addEventListener("click", () => act(issue, async () => {
    showSecret(await api(path, { method: "POST" }));
    await load();
  }));
  const rotate = h("button", { id: "credential-rotate", type: "button" }, "Rotate");
  rotate.addEventListener("click", () => act(rotate, async () => {
    if (!confirm(`Rotate the credentials of ${device}? Every current one is retired and its connections are closed; the device needs the new secret.`)) return;
    showSecret(await api(`${path}/rotate`, { method: "POST" }));
    await load();
  }));
  await load();
  const t = table(["key id", "state", "created", "revoked", ""], [], { id: "device-credentials" });
  t.querySelector("tbody").replaceWith(rows);
  return h("section", {}, h("h2", {}, "Credentials"),
    h("p", { class: "muted" }, "The secrets ", device, " connects to NATS or MQTT with, as the password of user ",
      h("code", {}, `<tenant>.${device}`), ". A secret is shown once, when it is issued."),
    h("div", { class: "actions" }, issue, rotate), secretBox, t);
}

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, text) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text !== undefined) el.textContent = text;
  return el;
}

/** One small line chart: the parameter's bucket averages over the window, min and max marked. */
export function drawParameter(series, since, until) {
  const W = 300, H = 90, L = 4, R = 4, T = 14, B = 4;
  const t0 = Date.parse(since), t1 = Date.parse(until);
  const vs = series.points.map((p) => p.value);
  const lo = Math.min(...vs), hi = Math.max(...vs);
  const x = (t) => (L + ((Date.parse(t) - t0) / (t1 - t0 || 1)) * (W - L - R)).toFixed(1);
  const y = (v) => (T + (hi === lo ? 0.5 : 1 - (v - lo) / (hi - lo)) * (H - T - B)).toFixed(1);
  const d = series.points.map((p, i) => `${i ? "L" : "M"}${x(p.t)},${y(p.value)}`).join("");
  const unit = series.unit ? ` ${series.unit}` : "";
  const root = svg("svg", { class: "chart param-chart", "data-parameter": series.parameter, width: W, height: H,
    viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `${series.parameter} over the window` });
  root.append(svg("text", { class: "axis-label", x: L, y: 11 },
    `${series.parameter}: ${lo.toPrecision(4)} to ${hi.toPrecision(4)}${unit}`));
  // A lone point is still a mark: a zero-length line with round caps would vanish, so a dot.
  root.append(series.points.length > 1 ? svg("path", { class: "param-line", d })
    : svg("circle", { class: "param-dot", cx: x(series.points[0].t), cy: y(vs[0]), r: 2.5 }));
  return root;
}

/** The device's charts from ClickHouse; a sentence instead when there is nothing or it fails. */
async function charts(enc) {
  const box = h("div", { id: "device-charts", class: "charts" });
  try {
    const r = await api(`/v1/devices/${enc}/series?window_minutes=60`);
    box.append(...(r.parameters.length ? r.parameters.map((p) => drawParameter(p, r.since, r.until))
      : [h("p", { class: "muted" }, r.reason ? `Charts unavailable: ${r.reason}.` : "No numeric values measured in the last hour.")]));
  } catch (err) {  // the page stays usable without its charts (ClickHouse down, an older API)
    box.append(h("p", { class: "muted" }, `Charts unavailable: ${err.message}`));
  }
  return box;
}
