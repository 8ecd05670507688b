// Fleet: ingest by status, end-to-end latency and the consumer's backlog, open dead letters, and every device's data-quality figures over the
// last hour - sortable (by the server, so a 10,000-device fleet sorts as fast as ten) and
// searchable, so the sick devices are found at once.
import { api, h, when, every, documented } from "../lib.js";

/** Seconds for a person: 0.42 s, 3.5 min, 2.0 h, 20,781 d. */
function secs(v) {
  if (v == null) return "—";
  const a = Math.abs(v);
  if (a >= 86400) return `${(v / 86400).toLocaleString(undefined, { maximumFractionDigits: 1 })} d`;
  if (a >= 3600) return `${(v / 3600).toFixed(1)} h`;
  if (a >= 60) return `${(v / 60).toFixed(1)} min`;
  return `${v.toFixed(2)} s`;
}

const COLUMNS = [
  ["device", "device", (d) => h("a", { href: `#/devices/${encodeURIComponent(d.device)}` }, d.device)],
  ["last_seen_at", "last seen", (d) => when(d.last_seen_at)],
  ["envelopes", "envelopes/min", (d, r) => (d.envelopes / (r.window_s / 60)).toFixed(2)],
  ["invalid_share", "invalid", (d) => `${(d.invalid_share * 100).toFixed(1)} %`],
  ["duplicates", "duplicates", (d) => d.duplicates],
  ["out_of_order", "out of order", (d) => d.out_of_order],
  ["seq_gaps", "seq gaps", (d) => d.seq_gaps],
  ["latency_p50_s", "latency p50", (d) => secs(d.latency_p50_s)],
  ["clock_skew_s", "clock skew", (d) => secs(d.clock_skew_s)],
];

export async function showFleet(view) {
  let sort = "seq_gaps", order = "desc";
  const search = h("input", { id: "fleet-search", type: "search", placeholder: "device id" });
  const summary = h("div", { id: "fleet-summary" });
  const live = h("p", { id: "fleet-live" });
  const hasLive = await documented("/v1/fleet/live");
  const head = h("tr", {});
  const body = h("tbody", { id: "fleet-rows" });

  async function loadLive() {
    if (!hasLive) return;
    const r = await api("/v1/fleet/live");
    const c = r.consumer;
    live.replaceChildren(
      h("span", { id: "fleet-e2e" }, `end-to-end latency p50 ${secs(r.end_to_end_p50_s)}, p95 ${secs(r.end_to_end_p95_s)}`),
      ` over ${r.envelopes} envelopes in the last ${r.window_s / 60} min · `,
      h("span", { id: "fleet-pending" }, c ? `consumer pending ${c.pending}, unacknowledged ${c.ack_pending}`
        : "consumer pending unknown"));
  }
  async function load() {
    await loadLive();
    const q = new URLSearchParams({ sort, order, limit: "200" });
    if (search.value.trim()) q.set("search", search.value.trim());
    const r = await api(`/v1/fleet?${q}`);
    const statuses = Object.entries(r.statuses).sort();
    summary.replaceChildren(
      h("p", {}, h("strong", {}, `${r.rate_per_min.toFixed(2)} envelopes/min`), ` over the last ${r.window_s / 60} min: `,
        statuses.length ? statuses.map(([s, n]) => `${s} ${n}`).join(" · ") : "nothing received"),
      h("p", {}, h("a", { href: "#/dead-letters", id: "fleet-dead-letters" }, `${r.open_dead_letters} open dead letters`),
        ` · ${r.matched} devices seen${r.matched > r.devices.length ? `, first ${r.devices.length} shown` : ""}`));
    head.replaceChildren(...COLUMNS.map(([key, label]) => {
      const th = h("th", { class: "sortable", "data-sort": key },
        label, key === sort ? (order === "desc" ? " ▼" : " ▲") : "");
      th.addEventListener("click", () => {
        order = key === sort && order === "desc" ? "asc" : "desc";
        sort = key;
        load();
      });
      return th;
    }));
    body.replaceChildren(...r.devices.map((d) =>
      h("tr", { "data-device": d.device }, COLUMNS.map(([key, , cell]) => h("td", { "data-col": key }, cell(d, r))))));
  }
  let typing;
  search.addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(load, 250); });
  await load();
  every(10000, load);
  view.append(h("h1", {}, "Fleet"), summary, live, h("div", { class: "filters" }, search),
    h("table", { id: "fleet" }, h("thead", {}, head), body));
}
