// One envelope explained: its stage logs, the values at each stage, duplicates, where it was
// published, and its dead letter with a redrive button.
import { api, h, table, state, facts, notice, act, json } from "../lib.js";

/** A table of dict rows with the union of their keys as columns. */
function rows(items, columns) {
  const cols = columns || [...new Set(items.flatMap((r) => Object.keys(r)))];
  const cell = (v) => (v !== null && typeof v === "object" ? h("code", {}, JSON.stringify(v)) : v ?? "—");
  return table(cols, items.map((r) => h("tr", {}, cols.map((c) => h("td", {}, c === "status" ? state(r[c]) : cell(r[c]))))));
}

export async function explain(view, id) {
  const data = await api(`/v1/messages/${encodeURIComponent(id)}`);
  const m = data.message;
  view.append(h("h1", {}, "Envelope ", h("code", {}, m.id)),
    facts(Object.entries(m).map(([k, v]) => [k, k === "status" ? state(v)
      : v !== null && typeof v === "object" ? h("code", {}, JSON.stringify(v)) : v])));
  view.append(h("h2", {}, "Stages"), data.stages.length ? h("div", { id: "msg-stages" }, rows(data.stages))
    : h("p", { class: "muted" }, "No stage ran (malformed envelopes stop at the parser)."));
  if (data.telemetry) view.append(h("h2", {}, "Values recorded"), json(data.telemetry));
  if (data.published) view.append(h("h2", {}, "Published"), json(data.published));
  if (data.duplicates.length) view.append(h("h2", {}, "Duplicates"), rows(data.duplicates));
  if (data.dead_letter) {
    const dl = data.dead_letter;
    const redrive = h("button", { id: "msg-redrive", type: "button", disabled: dl.state !== "open" }, "Redrive");
    redrive.addEventListener("click", () => act(redrive, async () => {
      const r = await api(`/v1/dead-letters/${dl.id}/redrive`, { method: "POST" });
      const one = r.results[0];
      notice(`Redrive: ${one ? one.outcome : "nothing"}${one && one.detail ? ` (${one.detail})` : ""}.`);
    }));
    view.append(h("h2", {}, "Dead letter"), h("div", { id: "msg-dead-letter" },
      facts(Object.entries(dl).map(([k, v]) => [k, v !== null && typeof v === "object" ? h("code", {}, JSON.stringify(v)) : v])),
      h("div", { class: "actions" }, redrive)));
  }
}
