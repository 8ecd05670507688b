// What every console page uses: the API client, element builders, formatting, notices and the
// current page's lifecycle (events and timers that end with it). The shell (app.js) imports the
// pages and this module; the pages import only this one, so no module imports its importer.

export const KEY = "tideway.api-key";

/** An API answer that was not 2xx: its RFC 9457 problem. */
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || `HTTP ${status}`);
    this.status = status;
    this.code = problem.code;
  }
}

/** Call a /v1 route with the signed-in key; JSON in, JSON out. */
export async function api(path, { method = "GET", body } = {}) {
  const headers = { Authorization: `Bearer ${sessionStorage.getItem(KEY)}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await resp.json().catch(() => ({}));
  if (resp.status === 401) window.dispatchEvent(new CustomEvent("tideway:signed-out"));
  if (!resp.ok) throw new ApiError(resp.status, data);
  return data;
}

/** Fetch a /v1 file route with the signed-in key and save the answer as a download named as
 * its Content-Disposition says (a plain link cannot send the key). A refusal throws its
 * problem, as api() does. */
export async function download(path) {
  const resp = await fetch(path, { headers: { Authorization: `Bearer ${sessionStorage.getItem(KEY)}` } });
  if (resp.status === 401) window.dispatchEvent(new CustomEvent("tideway:signed-out"));
  if (!resp.ok) throw new ApiError(resp.status, await resp.json().catch(() => ({})));
  const named = /filename="([^"]+)"/.exec(resp.headers.get("Content-Disposition") || "");
  const url = URL.createObjectURL(await resp.blob());
  const a = h("a", { href: url, download: named ? named[1] : path.split("/").pop(), hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

let openapi = null;

/** Whether this API documents ``path`` (a route template): pages use newer routes only then. */
export async function documented(path) {
  openapi ||= fetch("/v1/openapi.json").then((r) => r.json());
  return path in (await openapi).paths;
}

/** Build an element: h("td", {class: "x"}, "text", child...). Text is never parsed as HTML. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

/** A table from column names and rows of cells. */
export function table(columns, rows, attrs = {}) {
  return h("table", attrs,
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", {}, c)))),
    h("tbody", {}, rows));
}

/** A table cell that names its column (``data-label``): on a phone a table of class "cards"
 * stacks each row as a card, each cell headed by its label (style.css, narrow screens). */
export const cell = (label, ...children) => h("td", { "data-label": label }, ...children);

export const state = (s) => h("span", { class: `state state-${s}` }, s ?? "—");

/** The browser's time zone (an IANA name such as America/New_York), to say what times are in. */
export const zoneName = () => Intl.DateTimeFormat().resolvedOptions().timeZone;

/** An instant in the browser's zone, the zone's short name after it ("14:03:07 EST"); with
 * ``date``, the day before it ("Nov 27, 14:03:07 EST"). A <time> element holding the instant. */
export function zoned(t, { date = false } = {}) {
  if (!t) return "—";
  const d = new Date(t);
  const fmt = new Intl.DateTimeFormat(undefined, {
    ...(date ? { month: "short", day: "numeric" } : {}),
    hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23", timeZoneName: "short",
  });
  return h("time", { datetime: d.toISOString(), title: d.toISOString() }, fmt.format(d));
}

/** A duration in seconds as a person says it: 350 ms, 4.2 s, 3 min 05 s, 2 h 05 min, 1 d 3 h. */
export function duration(seconds) {
  if (seconds == null || !Number.isFinite(seconds)) return "—";
  const s = Math.max(0, seconds);
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 10) return `${s.toFixed(1)} s`;
  if (s < 60) return `${Math.round(s)} s`;
  const two = (n) => String(n).padStart(2, "0");
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${two(Math.floor(s % 60))} s`;
  const hrs = Math.floor(m / 60);
  if (hrs < 24) return `${hrs} h ${two(m % 60)} min`;
  return `${Math.floor(hrs / 24)} d ${hrs % 24} h`;
}
export const short = (id) => String(id).slice(0, 8);
export const json = (v) => h("pre", {}, JSON.stringify(v, null, 2));

/** Definition list of label → value. */
export function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v ?? "—")]));
}

/** At most this many notices show at once; an older one goes when a new one would exceed it. */
export const MAX_NOTICES = 3;

/** A transient line at the top of the page saying what an action did (or why it failed). It has
 * a close button; the same text again replaces the old line (a repeated click does not stack),
 * and only the newest MAX_NOTICES stay. Returns the notice's element. */
export function notice(text, isError = false) {
  const main = document.getElementById("main");
  const shown = () => [...main.querySelectorAll(":scope > .notice")];
  for (const old of shown()) if (old.dataset.text === String(text)) old.remove();
  const close = h("button", { type: "button", class: "notice-close", "aria-label": "Dismiss" }, "×");
  const el = h("p", { class: isError ? "notice error" : "notice", role: "status", "data-text": text },
    h("span", { class: "notice-text" }, text), close);
  close.addEventListener("click", () => el.remove());
  main.prepend(el);
  shown().slice(MAX_NOTICES).forEach((old) => old.remove());
  return el;
}

/** Run an action from a button: disable it meanwhile, report errors as a notice. */
export async function act(button, fn) {
  button.disabled = true;
  try {
    return await fn();
  } catch (err) {
    notice(`${err.message}${err.code ? ` (${err.code})` : ""}`, true);
    return undefined;
  } finally {
    button.disabled = false;
  }
}

// -- the current page's lifecycle ----------------------------------------------------------------

let pageCleanups = [];

/** End the current page: stop its event handlers and timers (the router calls it). */
export function endPage() {
  pageCleanups.forEach((f) => f());
  pageCleanups = [];
}

/** Call fn(event) for each domain event while the current page is shown. */
export function onEvent(fn) {
  const handler = (e) => fn(e.detail);
  window.addEventListener("tideway:event", handler);
  pageCleanups.push(() => window.removeEventListener("tideway:event", handler));
}

/** Call fn every ms milliseconds while the current page is shown. */
export function every(ms, fn) {
  const id = setInterval(fn, ms);
  pageCleanups.push(() => clearInterval(id));
}

/** A duration in seconds for a person, in the unit that shows it: 850 µs, 1.24 ms, 3.5 s,
 *  4.2 min, 2.0 h, 3.1 d (negative too: a clock ahead). Sub-second figures never floor to 0. */
export function formatDuration(seconds) {
  if (seconds == null || Number.isNaN(seconds)) return "—";
  const a = Math.abs(seconds);
  const fixed = (v) => v.toLocaleString(undefined, { maximumSignificantDigits: 3 });
  if (a === 0) return "0 s";
  if (a < 1e-3) return `${fixed(seconds * 1e6)} µs`;
  if (a < 1) return `${fixed(seconds * 1e3)} ms`;
  if (a < 60) return `${fixed(seconds)} s`;
  if (a < 3600) return `${(seconds / 60).toFixed(1)} min`;
  if (a < 86400) return `${(seconds / 3600).toFixed(1)} h`;
  return `${(seconds / 86400).toLocaleString(undefined, { maximumFractionDigits: 1 })} d`;
}

// -- times, long text and dismissable notices (the dead-letter and envelope pages first) --------

const TIME_FORMAT = {
  year: "numeric", month: "short", day: "numeric",
  hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short",
};

/** A time as the console shows it: the browser's local time with its zone's name
 *  ("Nov 28, 2026, 01:44:56 GMT+9"), the exact instant in UTC on hover. "—" for none. */
export function timeAt(t) {
  if (!t) return "—";
  const d = new Date(t);
  if (Number.isNaN(d.getTime())) return String(t);
  const iso = d.toISOString();
  return h("time", { datetime: iso, title: iso }, d.toLocaleString(undefined, TIME_FORMAT));
}

/** Text that may be huge (a device's body, say): the first ``limit`` characters, wrapped, with
 *  the rest behind a "show all" that opens a scrolling box. Never widens its container. */
export function longText(text, limit = 160) {
  const s = String(text ?? "");
  if (s.length <= limit && !s.includes("\n")) return h("code", { class: "long-text" }, s);
  const head = s.split("\n", 1)[0].slice(0, limit);
  return h("details", { class: "long-text" },
    h("summary", {}, h("code", {}, head), h("span", { class: "muted" }, ` … show all ${s.length.toLocaleString()} characters`)),
    h("pre", {}, s));
}

/** A notice the reader can dismiss (×); it replaces the notices before it, which described
 *  a state the page no longer shows. */
export function tell(text, isError = false) {
  for (const old of document.querySelectorAll("#main > .notice")) old.remove();
  return notice(text, isError); // dismissable: notice() gives every notice its ×
}

/** ``act``, with a failure told by a dismissable notice. */
export function attempt(button, fn) {
  return act(button, async () => {
    try {
      return await fn();
    } catch (err) {
      tell(`${err.message}${err.code ? ` (${err.code})` : ""}`, true);
      return undefined;
    }
  });
}

/** Call fn(width) with el's content width once it is laid out and whenever it changes, while
 * the current page is shown (a drawing that fits its box redraws itself). */
export function onResize(el, fn) {
  let last = -1;
  // The drawing changes the box's height, so the observer fires again: only a new width redraws,
  // and a frame later, so that no "ResizeObserver loop" error reaches the console.
  const observer = new ResizeObserver(([entry]) => {
    const width = Math.floor(entry.contentRect.width);
    if (width > 0 && width !== last) requestAnimationFrame(() => { last = width; fn(width); });
  });
  observer.observe(el);
  pageCleanups.push(() => observer.disconnect());
}

// -- the view's state in the URL (#/page?key=value&...): a link shows a colleague the same view --

/** The current view's state: the parameters after "?" in the location's hash. */
export function viewState() {
  const query = location.hash.split("?")[1] || "";
  return Object.fromEntries(new URLSearchParams(query));
}

/** Record ``changes`` (key → value; empty, null or undefined removes the key) in the URL,
 *  without re-rendering the page or adding a history entry per click. */
export function setViewState(changes) {
  const [path, query = ""] = location.hash.split("?");
  const params = new URLSearchParams(query);
  for (const [key, value] of Object.entries(changes)) {
    if (value === undefined || value === null || value === "") params.delete(key);
    else params.set(key, String(value));
  }
  const next = params.toString();
  history.replaceState(null, "", `${location.pathname}${location.search}${next ? `${path}?${next}` : path}`);
}
