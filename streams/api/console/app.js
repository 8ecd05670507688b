// The Tideway console: sign-in, the API client, the live event stream and the page router.
// Plain ES modules, no build step: every page reads only the documented /v1 routes.
import * as runs from "./pages/runs.js";
import * as deadLetters from "./pages/dead_letters.js";
import * as message from "./pages/message.js";
import * as sessions from "./pages/sessions.js";
import * as devices from "./pages/devices.js";
import * as fleet from "./pages/fleet.js";
import { KEY, api, h, endPage } from "./lib.js";

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

let rendering = 0;

async function render() {
  endPage();
  const main = document.getElementById("main");
  if (!sessionStorage.getItem(KEY)) return showSignIn();
  const hash = location.hash || "#/runs";
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("current", hash.startsWith(a.getAttribute("href")));
  }
  const path = hash.split("?", 1)[0]; // after "?": the view's state (lib.js viewState)
  const match = ROUTES.find(([re]) => re.test(path));
  const ticket = ++rendering;
  const view = h("div", { id: "view" });
  if (!match) {
    view.append(h("p", { class: "error" }, "No such page."));
  } else {
    const args = path.match(match[0]).slice(1).map(decodeURIComponent);
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
window.addEventListener("tideway:signed-out", signOut); // the API refused the key (401)
window.addEventListener("hashchange", render);
// Leaving the page (or the browser keeping it in its back-forward cache) ends the live stream:
// each open stream holds one of the browser's six connections to this server.
window.addEventListener("pagehide", () => { if (events) events.abort(); events = null; });
window.addEventListener("pageshow", (e) => { if (e.persisted && sessionStorage.getItem(KEY)) signedIn(); });
if (sessionStorage.getItem(KEY)) signedIn(); else showSignIn();
