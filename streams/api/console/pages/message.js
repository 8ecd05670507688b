// One envelope explained, for a person: what the device sent, who sent it, what each stage
// did, what was recorded and published, and its dead letter with the actions it allows.
//
// Redrive re-runs publish from the telemetry row (streams/ingest/dlq.py): only an open dead
// letter whose row is `publish_failed` can be redriven. Any other open one (a malformed
// envelope, a stage bug, a refused row) can only be resolved, with a note.
import { api, h, table, state, facts, timeAt, longText, tell, attempt, json } from "../lib.js";

const BODY_LINES = 40; // a longer body opens in a scrolling box
const BODY_CHARS = 65_536; // and a body longer than this is cut (a huge one would stall the page)

/** ``telemetry.<tenant>.<device>.<topic>`` at the end of a subject (after any namespace). */
function fromSubject(subject) {
  const p = String(subject ?? "").split(".");
  const i = p.length - 4;
  return i >= 0 && p[i] === "telemetry" ? { tenant: p[i + 1], device: p[i + 2], topic: p[i + 3] } : {};
}

/** A value, with "(from the subject)" when the row names none and the subject does. */
function named(value, guess) {
  if (value) return value;
  if (guess) return [guess, " ", h("span", { class: "muted" }, "(from the subject)")];
  return "—";
}

const micros = (us) => (us == null ? "—" : us < 1000 ? `${us} µs` : `${(us / 1000).toFixed(us < 10_000 ? 2 : 1)} ms`);

/** The body as the device sent it: pretty JSON when it is JSON, the text otherwise. */
function bodyOf(letter) {
  const whole = letter.envelope !== null ? JSON.stringify(letter.envelope, null, 2) : letter.payload_text;
  const shown = whole.length > BODY_CHARS ? whole.slice(0, BODY_CHARS) : whole;
  const cut = letter.payload_bytes > new TextEncoder().encode(letter.payload_text).length;
  const lines = shown.split("\n").length;
  return h("div", { id: "msg-body" },
    h("p", { class: "muted" }, `${letter.payload_bytes.toLocaleString()} bytes`,
      letter.envelope !== null ? ", JSON (shown indented)" : ", not JSON (shown as text)",
      cut && letter.envelope === null ? `; the first ${letter.payload_text.length.toLocaleString()} characters` : null,
      shown !== whole ? `; the first ${BODY_CHARS.toLocaleString()} of ${whole.length.toLocaleString()} characters` : null,
      Object.keys(letter.headers || {}).length ? `; headers: ${Object.keys(letter.headers).join(", ")}` : null),
    h("pre", { class: lines > BODY_LINES || shown.length > 4096 ? "msg-body-text clipped" : "msg-body-text" }, shown));
}

function stagesTable(stages) {
  return table(["pass", "stage", "status", "took", "error", "at"], stages.map((s) => h("tr", { "data-stage": s.stage },
    h("td", { "data-label": "pass" }, s.attempt), h("td", { "data-label": "stage" }, s.stage),
    h("td", { "data-label": "status" }, state(s.status)), h("td", { "data-label": "took" }, micros(s.duration_us)),
    h("td", { "data-label": "error" }, s.error_code ? [h("strong", {}, s.error_code), " ", longText(s.error_message ?? "", 200)] : "—",
      s.input_snapshot ? h("div", {}, "in: ", longText(JSON.stringify(s.input_snapshot), 120)) : null,
      s.output_snapshot ? h("div", {}, "out: ", longText(JSON.stringify(s.output_snapshot), 120)) : null),
    h("td", { "data-label": "at" }, timeAt(s.created_at)))), { class: "msg-table" });
}

function valuesTable(values) {
  const entries = Object.entries(values || {});
  if (!entries.length) return h("p", { class: "muted" }, "No values.");
  return facts(entries.map(([k, v]) => [k, v !== null && typeof v === "object" ? longText(JSON.stringify(v)) : String(v)]));
}

/** The dead letter: why, its failures, how it was resolved, and what can be done with it. */
function deadLetter(dl, letter, telemetry, rerender) {
  const open = dl.state === "open";
  const redrivable = open && telemetry?.processing_state === "publish_failed";
  const failures = (letter?.failures ?? dl.failures ?? []);
  const section = h("div", { id: "msg-dead-letter", "data-state": dl.state },
    facts([
      ["dead letter", String(dl.id)],
      ["state", state(dl.state)],
      ["reason", dl.reason_code],
      ["failing stage", dl.failed_stage ?? letter?.failures?.[0]?.stage ?? "—"],
      ["redrives", String(dl.redrive_count)],
      ["first seen", timeAt(dl.first_seen_at)],
      ["last seen", timeAt(dl.last_seen_at)],
      ...(open ? [] : [
        ["resolution", dl.resolution === "redriven" ? "redriven" : "resolved by an operator"],
        ["resolved", timeAt(dl.resolved_at)],
        ["by", h("span", { id: "msg-resolved-by" }, dl.resolved_by ?? "—")],
        ["note", h("span", { id: "msg-resolution-note" }, dl.resolution_note ?? "—")],
      ]),
    ]),
    failures.length ? table(["at", "pass", "stage", "code", "message"], failures.map((f) => h("tr", {},
      h("td", { "data-label": "at" }, timeAt(f.at)), h("td", { "data-label": "pass" }, f.attempt ?? "—"),
      h("td", { "data-label": "stage" }, f.stage ?? "—"), h("td", { "data-label": "code" }, f.code ?? "—"),
      h("td", { "data-label": "message" }, longText(f.message ?? "", 200)))), { class: "msg-table", id: "msg-failures" }) : null);
  if (!open) return section;

  const actions = h("div", { class: "actions msg-actions" });
  if (redrivable) {
    const redrive = h("button", { id: "msg-redrive", type: "button" }, "Redrive");
    redrive.addEventListener("click", () => attempt(redrive, async () => {
      const r = await api(`/v1/dead-letters/${dl.id}/redrive`, { method: "POST" });
      const one = r.results[0];
      await rerender();
      tell(`Redrive: ${one ? one.outcome : "nothing"}${one && one.detail ? ` (${one.detail})` : ""}.`);
    }));
    actions.append(redrive);
  } else {
    actions.append(h("p", { class: "muted", id: "msg-not-redrivable" },
      "Cannot be redriven: the envelope has no publishable telemetry (it never passed its stages). Resolve it once dealt with."));
  }
  const note = h("input", { type: "text", id: "msg-note", placeholder: "why resolved", size: 24, "aria-label": "why resolved" });
  const resolve = h("button", { id: "msg-resolve", type: "button" }, "Resolve");
  resolve.addEventListener("click", () => attempt(resolve, async () => {
    if (!note.value.trim()) throw new Error("say why the dead letter is resolved");
    const r = await api(`/v1/dead-letters/${dl.id}/resolve`, { method: "POST", body: { note: note.value.trim() } });
    await rerender();
    tell(r.resolved.length ? `Resolved dead letter ${dl.id}.` : `Dead letter ${dl.id} was no longer open.`);
  }));
  actions.append(h("span", { class: "msg-resolve" }, note, resolve));
  section.append(actions);
  return section;
}

async function render(id) {
  const data = await api(`/v1/messages/${encodeURIComponent(id)}`);
  const m = data.message;
  const dl = data.dead_letter;
  // The dead letter's own read holds the body the device sent (the explanation leaves it out).
  const letter = dl ? await api(`/v1/dead-letters/${dl.id}`).catch(() => null) : null;
  const guess = fromSubject(m.subject);
  const out = [
    h("h1", {}, "Envelope ", h("code", {}, String(m.id)), " ", state(m.status)),
    facts([
      ["status", state(m.status)],
      ["tenant", h("span", { id: "msg-tenant" }, named(m.tenant ?? dl?.tenant, guess.tenant))],
      ["device", h("span", { id: "msg-device" }, named(m.device, guess.device))],
      ["topic", named(data.telemetry?.topic, guess.topic)],
      ["subject", h("code", { class: "msg-subject" }, m.subject ?? "—")],
      ["received", timeAt(m.received_at)],
      ["measured", timeAt(m.measured_at)],
      ["sequence", m.seq ?? "—"],
      ["passes", String(m.attempts)],
      ...(m.error_code ? [["error", [h("strong", {}, m.error_code), " ", longText(m.error_message ?? "", 200)]]] : []),
      ...(m.duplicate_of ? [["duplicate of", h("a", { href: `#/messages/${m.duplicate_of}` }, String(m.duplicate_of))]] : []),
      ["size", m.payload_bytes == null ? "—" : `${m.payload_bytes.toLocaleString()} bytes`],
      ["stream seq", m.stream_seq ?? "—"],
      ["dedupe key digest", m.source_deduplication_key ? h("code", {}, m.source_deduplication_key) : "—"],
    ]),
  ];
  if (data.archive) out.push(h("p", { class: "muted" }, "Read from the retention archives: ", Object.keys(data.archive).join(", "), "."));

  out.push(h("h2", {}, "What the device sent"));
  if (letter) out.push(bodyOf(letter));
  else {
    out.push(h("p", { class: "muted", id: "msg-body" },
      dl ? "The dead letter's body could not be read." :
        "Tideway keeps the body only of dead-lettered envelopes; this one went through, and the values it recorded are below."));
  }

  out.push(h("h2", {}, "Stages"), data.stages.length ? h("div", { id: "msg-stages" }, stagesTable(data.stages))
    : h("p", { class: "muted" }, "No stage ran (malformed envelopes stop at the parser)."));
  if (dl) out.push(h("h2", {}, "Dead letter"), deadLetter(dl, letter, data.telemetry, () => rerender()));
  if (data.telemetry) {
    const t = data.telemetry;
    out.push(h("h2", {}, "Values recorded"),
      h("p", { class: "muted" }, `Topic ${t.topic}, `, state(t.processing_state), ", measured ", timeAt(t.measured_at), "."),
      h("div", { id: "msg-values" }, valuesTable(t.parameter_values)));
    if (t.validation_issues) out.push(h("h3", {}, "Validation issues"), json(t.validation_issues));
  }
  if (data.published) {
    const p = data.published;
    out.push(h("h2", {}, "Published"), facts([
      ["hot state key", h("code", {}, p.hot_state_key)],
      ["field", p.hot_state_field],
      ["holds this envelope", String(p.hot_state_current)],
      ["hot state seq", p.hot_state_seq ?? "—"],
      ["analytics table", h("code", {}, p.analytics_table)],
      ["analytics rows", String(p.analytics_rows)],
    ]));
  }
  if (data.duplicates.length) {
    out.push(h("h2", {}, "Duplicates absorbed"), table(["envelope", "stream seq", "received"],
      data.duplicates.map((d) => h("tr", {}, h("td", {}, h("a", { href: `#/messages/${d.id}` }, String(d.id))),
        h("td", {}, d.stream_seq ?? "—"), h("td", {}, timeAt(d.received_at)))), { class: "msg-table" }));
  }
  return out;

  async function rerender() {
    const view = document.getElementById("msg");
    if (view) view.replaceChildren(...await render(id));
  }
}

export async function explain(view, id) {
  view.append(h("div", { id: "msg", class: "msg" }, ...await render(id)));
}
