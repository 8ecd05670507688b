// The Tideway console: sign-in, the API client, the live event stream and the page router.
// Plain ES modules, no build step: every page reads only the documented /v1 routes.
import * as runs from "./pages/runs.js";
import * as deadLetters from "./pages/dead_letters.js";
import * as message from "./pages/message.js";
import * as sessions from "./pages/sessions.js";
import * as devices from "./pages/devices.js";
import * as fleet from "./pages/fleet.js";

const KEY = "tideway.api-key";

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
  if (resp.status === 401) signOut();
  if (!resp.ok) throw new ApiError(resp.status, data);
  return data;
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

export const state = (s) => h("span", { class: `state state-${s}` }, s ?? "—");
export const when = (t) => (t ? new Date(t).toLocaleString() : "—");
export const short = (id) => String(id).slice(0, 8);
export const json = (v) => h("pre", {}, JSON.stringify(v, null, 2));

/** Definition list of label → value. */
export function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v ?? "—")]));
}

/** A transient line at the top of the page saying what an action did (or why it failed). */
export function notice(text, isError = false) {
  const el = h("p", { class: isError ? "notice error" : "notice", role: "status" }, text);
  document.getElementById("main").prepend(el);
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

// -- live events: fetch streaming of /v1/events (EventSource cannot send the key header) --------

let events = null;
let lastEventId = null; // the stream sequence of the last event heard: a reconnect resumes after it

function dispatch(block) {
  let type = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) type = line.slice(6).trim();
    else if (line.startsWith("id:")) lastEventId = line.slice(3).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
  }
  if (!data.length) return; // a keep-alive comment
  let body;
  try { body = JSON.parse(data.join("\n")); } catch { return; }
  window.dispatchEvent(new CustomEvent("tideway:event", { detail: { type, body } }));
}

async function streamEvents(signal) {
  const live = document.getElementById("live");
  while (!signal.aborted) {
    try {
      const headers = { Authorization: `Bearer ${sessionStorage.getItem(KEY)}`, Accept: "text/event-stream" };
      if (lastEventId) headers["Last-Event-ID"] = lastEventId; // what happened while away comes first
      const resp = await fetch("/v1/events", { headers, signal });
      if (!resp.ok) throw new Error(`events: HTTP ${resp.status}`);
      live.textContent = "live"; live.classList.add("on");
      // Pages re-read what they show on (re)connecting; the events missed meanwhile follow.
      window.dispatchEvent(new CustomEvent("tideway:event", { detail: { type: "reconnected", body: {} } }));
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value.replace(/\r\n?/g, "\n");
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          dispatch(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
        }
      }
    } catch (err) {
      if (signal.aborted) return;
    }
    live.textContent = "reconnecting"; live.classList.remove("on");
    await new Promise((r) => setTimeout(r, 2000));
  }
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

// -- routing ----------------------------------------------------------------------------------

const ROUTES = [
  [/^#\/runs\/([\w-]+)$/, runs.showRun],
  [/^#\/runs$/, runs.listRuns],
  [/^#\/dead-letters$/, deadLetters.listGroups],
  [/^#\/dead-letters\/(open|resolved)\/(.+)$/, deadLetters.showGroup],
  [/^#\/messages\/(.+)$/, message.explain],
  [/^#\/sessions\/([\w-]+)$/, sessions.showSession],
  [/^#\/sessions$/, sessions.listSessions],
  [/^#\/devices\/(.+)$/, devices.showDevice],
  [/^#\/devices$/, devices.listDevices],
  [/^#\/fleet$/, fleet.showFleet],
];

let pageCleanups = [];
let rendering = 0;

async function render() {
  pageCleanups.forEach((f) => f());
  pageCleanups = [];
  const main = document.getElementById("main");
  if (!sessionStorage.getItem(KEY)) return showSignIn();
  const hash = location.hash || "#/runs";
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("current", hash.startsWith(a.getAttribute("href")));
  }
  const match = ROUTES.find(([re]) => re.test(hash));
  const ticket = ++rendering;
  const view = h("div", { id: "view" });
  if (!match) {
    view.append(h("p", { class: "error" }, "No such page."));
  } else {
    const args = hash.match(match[0]).slice(1).map(decodeURIComponent);
    try {
      await match[1](view, ...args);
    } catch (err) {
      view.replaceChildren(h("p", { class: "error", role: "alert" }, err.message));
    }
  }
  if (ticket === rendering) main.replaceChildren(view); // a newer navigation wins
}

function showSignIn() {
  document.getElementById("nav").hidden = true;
  document.getElementById("sign-out").hidden = true;
  const main = document.getElementById("main");
  main.replaceChildren(signInForm);
  signInForm.hidden = false;
  document.getElementById("api-key").focus();
}

function signOut() {
  sessionStorage.removeItem(KEY);
  if (events) events.abort();
  events = null;
  lastEventId = null;
  showSignIn();
}

function signedIn() {
  document.getElementById("nav").hidden = false;
  document.getElementById("sign-out").hidden = false;
  if (!events) {
    events = new AbortController();
    streamEvents(events.signal);
  }
  render();
}

const signInForm = document.getElementById("sign-in");
signInForm.addEventListener("submit", async (e) => {
  e.preventDefault();
  const key = document.getElementById("api-key").value.trim();
  sessionStorage.setItem(KEY, key);
  try {
    await api("/v1/runs?limit=1"); // the key works
    document.getElementById("api-key").value = "";
    signedIn();
  } catch (err) {
    sessionStorage.removeItem(KEY);
    document.getElementById("sign-in-error").textContent = err.message;
  }
});
document.getElementById("sign-out").addEventListener("click", signOut);
window.addEventListener("hashchange", render);
if (sessionStorage.getItem(KEY)) signedIn(); else showSignIn();
