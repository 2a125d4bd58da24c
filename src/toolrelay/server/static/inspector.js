// toolrelay inspector: a thread's turns and the two machines, lit, from AG-UI events.
//
// Two sources feed the same view: a toolrelay server (live mode: the thread's catch-up
// stream GET threads/{id}/events?after=N, read with fetch so the bearer token goes in
// a header, never in a URL), or `toolrelay inspect CAPTURE.sse` (capture mode: the
// recorded events and the violations `toolrelay replay` finds, from capture.json).
//
// The view is a pure fold of the events received (fold(events[0..k])), so a reload
// folds the catch-up from the start, and stepping through a turn is folding a prefix.
// Which state an event leads to is read from the diagrams: each SVG edge is titled
// "from->to" and labelled with the machine event's name, as toolrelay.diagrams draws
// them from the machine classes. An event with no edge from the current state is shown
// as a warning, never forced.
"use strict";

const TOKEN_KEY = "toolrelay.inspector.token";
const BASE = new URL("..", window.location.href); // the server's root (its mount point)
const MAX_LINE = 8 * 1024 * 1024; // an SSE line longer than this ends the stream
const POLL_MS = 1000;

const $ = (selector) => document.querySelector(selector);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else node.setAttribute(name, String(value));
  }
  for (const child of children) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function showError(message) {
  const box = $("#error");
  box.textContent = message || "";
  box.hidden = !message;
}

function setConnection(state, text) {
  const node = $("#connection");
  node.dataset.state = state;
  node.textContent = text;
}

// -- diagrams ---------------------------------------------------------------------------

class Diagram {
  constructor(container, svgText) {
    const doc = new DOMParser().parseFromString(svgText, "image/svg+xml");
    const svg = document.importNode(doc.documentElement, true);
    svg.removeAttribute("width");
    svg.removeAttribute("height");
    container.replaceChildren(svg);
    this.nodes = new Map();
    this.edges = new Map(); // "from\0event" -> {to, g}
    this.initial = null;
    for (const g of svg.querySelectorAll("g.node")) {
      const title = g.querySelector("title");
      if (title) this.nodes.set(title.textContent.trim(), g);
    }
    for (const g of svg.querySelectorAll("g.edge")) {
      const title = (g.querySelector("title") || {}).textContent || "";
      const [from, to] = title.trim().split("->");
      const label = g.querySelector("text");
      if (from === "__initial__") this.initial = to;
      if (label) this.edges.set(from + "\0" + label.textContent.trim(), { to, g });
    }
  }

  target(from, event) {
    const edge = this.edges.get(from + "\0" + event);
    return edge ? edge.to : undefined;
  }

  light(states, failed, taken) {
    for (const [name, g] of this.nodes) {
      g.classList.toggle("lit", states.has(name));
      g.classList.toggle("lit-failed", failed.has(name));
    }
    for (const [key, edge] of this.edges) {
      edge.g.classList.toggle("taken", taken.has(key));
    }
  }
}

// -- the fold: events -> turns, rounds, calls, machine states ---------------------------

// `outcomes`: call id -> {outcome, error} from GET threads/{id}/calls (live mode), or
// null where no such route exists (a capture: a result is a success).
function newModel(diagrams, outcomes) {
  return { turns: [], byRun: new Map(), calls: new Map(), current: null, diagrams, outcomes,
    warnings: [] };
}

// Move `thing` (a turn or a call) along `diagram` by machine event `event`.
function step(model, diagram, thing, event, at) {
  const to = diagram.target(thing.state, event);
  if (to === undefined) {
    const warning = `no transition '${event}' from '${thing.state}' (${thing.label})`;
    model.warnings.push({ at, warning });
    return false;
  }
  thing.taken = thing.state + "\0" + event;
  thing.state = to;
  return true;
}

const FINAL_CALL = new Set(["completed", "failed"]);

function roundFor(model, turn, kind, at) {
  let round = turn.rounds[turn.rounds.length - 1];
  if (!round || (kind !== "call" && round.calls.length > 0)
      || (kind === "call" && round.closed)) {
    if (round && turn.state === "executing_tools") {
      step(model, model.diagrams.run, turn, "continue_run", at);
    }
    round = { n: turn.rounds.length + 1, items: [], calls: [], closed: false, startedAt: at };
    turn.rounds.push(round);
  } else if (kind === "call" && turn.state === "executing_tools") {
    step(model, model.diagrams.run, turn, "continue_run", at);
  }
  return round;
}

function turnFor(model, meta) {
  if (model.current) return model.current;
  // Events before any RUN_STARTED (a capture cut at its start): an unnamed turn.
  return startTurn(model, "(no RUN_STARTED)", meta);
}

function startTurn(model, runId, meta) {
  const turn = { runId, label: `run ${runId}`, state: "idle", taken: null, rounds: [],
    startedAt: meta.at, endedAt: null, stopReason: null, stopMessage: null, error: null,
    first: meta.index, last: meta.index };
  step(model, model.diagrams.run, turn, "start", meta.index);
  model.turns.push(turn);
  model.byRun.set(runId, turn);
  model.current = turn;
  return turn;
}

function item(round, kind, id) {
  let found = round.items.find((it) => it.kind === kind && it.id === id);
  if (!found) {
    found = { kind, id, text: "" };
    round.items.push(found);
  }
  return found;
}

function startExecution(model, turn, meta) {
  const round = turn.rounds[turn.rounds.length - 1];
  if (!round || round.closed) return;
  const pending = round.calls.filter((call) => call.state === "pending");
  if (pending.length === 0 || turn.state !== "running") return;
  round.closed = true;
  step(model, model.diagrams.run, turn, "execute_tools", meta.index);
  for (const call of pending) {
    if (step(model, model.diagrams.call, call, "execute", meta.index)) call.startedAt = meta.at;
  }
}

function endTurn(model, turn, event, meta) {
  step(model, model.diagrams.run, turn, event, meta.index);
  turn.endedAt = meta.at;
  if (turn.state === "failed" || turn.state === "cancelled" || turn.state === "superseded") {
    for (const round of turn.rounds) {
      for (const call of round.calls) {
        if (!FINAL_CALL.has(call.state)) step(model, model.diagrams.call, call, "abandon", meta.index);
      }
    }
  }
  model.current = null;
}

function apply(model, event, meta) {
  const type = event.type;
  if (type === "RUN_STARTED") {
    const runId = String(event.runId);
    const known = model.byRun.get(runId);
    if (known) { // a resumed stream opens with its run's RUN_STARTED again
      model.current = known;
      return;
    }
    const handover = /^(.*)\.(\d+)$/.exec(runId); // <turn id>.<n>: after client tools
    const turn = handover && model.byRun.get(handover[1]);
    if (turn) {
      model.byRun.set(runId, turn);
      model.current = turn;
      return;
    }
    startTurn(model, runId, meta);
    return;
  }
  const turn = turnFor(model, meta);
  turn.last = meta.index;
  switch (type) {
    case "TEXT_MESSAGE_START":
    case "TEXT_MESSAGE_CONTENT":
    case "TEXT_MESSAGE_CHUNK":
    case "TEXT_MESSAGE_END": {
      const round = findItemRound(turn, "text", event.messageId) || roundFor(model, turn, "text", meta.index);
      const it = item(round, "text", event.messageId);
      if (type === "TEXT_MESSAGE_START") it.text = ""; // a message that comes again, whole
      if (event.delta) it.text += event.delta;
      break;
    }
    case "REASONING_MESSAGE_START":
    case "REASONING_MESSAGE_CONTENT":
    case "REASONING_MESSAGE_CHUNK":
    case "THINKING_TEXT_MESSAGE_CONTENT": {
      const id = event.messageId || "reasoning";
      const round = findItemRound(turn, "reasoning", id) || roundFor(model, turn, "reasoning", meta.index);
      const it = item(round, "reasoning", id);
      if (type === "REASONING_MESSAGE_START") it.text = "";
      if (event.delta) it.text += event.delta;
      break;
    }
    case "TOOL_CALL_START": {
      const known = model.calls.get(event.toolCallId);
      if (known && known.state !== known.initial) break; // came again: it is further on
      if (known) { known.args = ""; break; }
      const round = roundFor(model, turn, "call", meta.index);
      const call = { id: event.toolCallId, name: event.toolCallName, label: `call ${event.toolCallId}`,
        args: "", result: null, error: null, state: model.diagrams.call.initial,
        initial: model.diagrams.call.initial, taken: null, startedAt: null, endedAt: null };
      round.calls.push(call);
      model.calls.set(call.id, call);
      break;
    }
    case "TOOL_CALL_ARGS": {
      const call = model.calls.get(event.toolCallId);
      if (call && call.state === call.initial) call.args += event.delta || "";
      break;
    }
    case "TOOL_CALL_END": {
      const call = model.calls.get(event.toolCallId);
      if (call && call.state === call.initial) {
        step(model, model.diagrams.call, call, "finish_args", meta.index);
      }
      break;
    }
    case "TOOL_CALL_RESULT": {
      const call = model.calls.get(event.toolCallId);
      if (!call || FINAL_CALL.has(call.state)) break;
      const content = typeof event.content === "string" ? event.content : JSON.stringify(event.content);
      call.result = content;
      call.endedAt = meta.at;
      if (call.state === "executing") {
        // AG-UI's TOOL_CALL_RESULT does not say whether the tool failed: the server's
        // log does. Until the page has asked, the call stays executing, its result shown.
        const known = model.outcomes ? model.outcomes.calls[call.id] : null;
        const seq = meta.id ? Number(meta.id.split(":")[0]) : 0;
        if (model.outcomes && !known && seq > model.outcomes.scannedFrom) {
          call.awaitingOutcome = true;
          break;
        }
        const failed = known ? known.outcome === "error" : false;
        if (known && known.error) call.error = known.error;
        step(model, model.diagrams.call, call, failed ? "fail" : "succeed", meta.index);
      } else {
        step(model, model.diagrams.call, call, "receive_result", meta.index);
      }
      break;
    }
    case "CUSTOM":
      if (event.name === "toolrelay.stop" && event.value) {
        turn.stopMessage = event.value.message || null;
      }
      break;
    case "RUN_FINISHED": {
      const outcome = event.outcome || {};
      const result = event.result || {};
      turn.stopReason = result.stopReason || null;
      if (outcome.type === "interrupt") { endTurn(model, turn, "interrupt", meta); break; }
      if (outcome.type === "cancelled") { endTurn(model, turn, "cancel", meta); break; }
      const round = turn.rounds[turn.rounds.length - 1];
      const open = round ? round.calls.filter((call) => !FINAL_CALL.has(call.state)) : [];
      if (open.length > 0 || (outcome.pendingToolCallIds || []).length > 0) {
        // The run handed calls over (to toolrelay's executor, or to the client).
        if (turn.state === "running") step(model, model.diagrams.run, turn, "execute_tools", meta.index);
        if (round) round.closed = true;
        turn.endedAt = null;
        model.current = null;
        break;
      }
      endTurn(model, turn, "complete", meta);
      break;
    }
    case "RUN_ERROR": {
      turn.error = `${event.code ? event.code + ": " : ""}${event.message || ""}`;
      const code = event.code || "";
      const machineEvent = code === "cancelled" || code === "agent_cancelled" || code === "closed"
        ? "cancel" : code === "superseded" ? "supersede" : "fail";
      endTurn(model, turn, machineEvent, meta);
      break;
    }
    default:
      break;
  }
  // The last event of a record carries its plain sequence number: a tool batch record
  // (ToolsStarted) is complete, and the server executes its calls from there on.
  if (meta.id && /^\d+$/.test(meta.id)) startExecution(model, turn, meta);
}

function findItemRound(turn, kind, id) {
  for (const round of turn.rounds) {
    if (round.items.some((it) => it.kind === kind && it.id === id)) return round;
  }
  return null;
}

function fold(view, upto) {
  const model = newModel(view.diagrams, view.outcomes);
  const count = Math.min(upto, view.events.length);
  for (let i = 0; i < count; i++) {
    const entry = view.events[i];
    if (entry.event) apply(model, entry.event, { index: i + 1, id: entry.id, at: entry.at });
  }
  return model;
}

// -- rendering --------------------------------------------------------------------------

function seconds(from, to) {
  if (from === null || from === undefined) return "";
  const end = to === null || to === undefined ? Date.now() : to;
  return `${((end - from) / 1000).toFixed(2)} s`;
}

function renderTurn(turn, live) {
  const header = el("h3", {},
    el("span", { class: "badge", "data-state": turn.state }, turn.state),
    el("span", { class: "run-id" }, turn.runId),
    turn.stopReason ? el("span", { class: "stop" }, `stop reason: ${turn.stopReason}`) : null,
    turn.error ? el("span", { class: "stop" }, turn.error) : null,
    live ? el("span", { class: "stop" }, seconds(turn.startedAt, turn.endedAt)) : null);
  const card = el("article", { class: "turn", "data-run-id": turn.runId, "data-state": turn.state,
    "data-stop-reason": turn.stopReason || "" }, header);
  if (turn.stopMessage) card.append(el("p", { class: "stop" }, turn.stopMessage));
  for (const round of turn.rounds) {
    const box = el("section", { class: "round", "data-round": round.n }, el("h4", {}, `round ${round.n}`));
    for (const it of round.items) {
      box.append(el("div", { class: it.kind, "data-message-id": it.id }, it.text));
    }
    if (round.calls.length > 0) {
      const table = el("table", { class: "calls" },
        el("tr", {}, el("th", {}, "tool"), el("th", {}, "arguments"), el("th", {}, "status"),
          el("th", {}, "time"), el("th", {}, "result")));
      for (const call of round.calls) {
        table.append(el("tr", { class: "call", "data-call-id": call.id, "data-state": call.state },
          el("td", {}, el("code", {}, call.name)),
          el("td", {}, el("code", {}, call.args)),
          el("td", {}, el("span", { class: "badge", "data-state": call.state }, call.state)),
          el("td", { class: "timing" }, live ? seconds(call.startedAt, call.endedAt) : ""),
          el("td", { class: "result" }, call.error || call.result || "")));
      }
      box.append(table);
    }
    card.append(box);
  }
  return card;
}

function lightDiagrams(view, model) {
  const turn = model.turns[model.turns.length - 1];
  const runStates = new Set();
  const runTaken = new Set();
  if (turn) {
    runStates.add(turn.state);
    if (turn.taken) runTaken.add(turn.taken);
  } else {
    runStates.add("idle");
  }
  view.diagrams.run.light(runStates, new Set(turn && turn.state === "failed" ? ["failed"] : []), runTaken);
  $("#run-state").textContent = turn ? turn.state : "idle";
  const callStates = new Set();
  const callTaken = new Set();
  const names = [];
  const rounds = turn ? turn.rounds.filter((round) => round.calls.length > 0) : [];
  const round = rounds[rounds.length - 1];
  for (const call of round ? round.calls : []) {
    callStates.add(call.state);
    if (call.taken) callTaken.add(call.taken);
    names.push(`${call.name}: ${call.state}`);
  }
  view.diagrams.call.light(callStates, new Set(callStates.has("failed") ? ["failed"] : []), callTaken);
  $("#call-states").textContent = names.length ? names.join(", ") : "-";
}

let activeView = null; // the view the page shows (a thread switch replaces it)

function render(view) {
  view.scheduled = false;
  if (view !== activeView) return;
  const total = view.events.length;
  const position = view.following ? total : Math.min(view.position, total);
  view.position = position;
  const model = fold(view, position);
  const turns = $("#turns");
  turns.replaceChildren(...model.turns.map((turn) => renderTurn(turn, view.live)));
  for (const { warning } of model.warnings) turns.append(el("p", { class: "warning" }, warning));
  lightDiagrams(view, model);
  const range = $("#step");
  range.max = String(total);
  range.value = String(position);
  $("#position").textContent = `event ${position} of ${total}`;
  $("#live").setAttribute("aria-pressed", view.following ? "true" : "false");
  // The event list: rows are appended once; the current one is marked.
  const list = $("#events");
  while (list.children.length < total) list.append(eventRow(view, list.children.length));
  for (const row of list.querySelectorAll("li.current")) row.classList.remove("current");
  const rows = list.children;
  for (let i = 0; i < rows.length; i++) rows[i].classList.toggle("after", i >= position);
  const current = position > 0 ? rows[position - 1] : null;
  const detail = $("#current-event");
  detail.replaceChildren();
  if (current) {
    current.classList.add("current");
    if (!view.following) current.scrollIntoView({ block: "nearest" });
    const entry = view.events[position - 1];
    detail.append(`#${position}${entry.id ? " id " + entry.id : ""}  ${entry.raw}`);
    for (const finding of view.findings.get(position) || []) {
      detail.append(el("div", { class: "violation" }, `${finding.code}: ${finding.message}`));
    }
  }
}

function eventRow(view, i) {
  const entry = view.events[i];
  const type = entry.event ? entry.event.type : "(undecodable)";
  const row = el("li", { "data-index": i + 1, "data-type": type },
    entry.id ? el("span", { class: "id" }, entry.id) : null, type);
  const findings = view.findings.get(i + 1) || [];
  if (findings.length) {
    row.classList.add("violation");
    for (const finding of findings) {
      row.append(el("span", { class: "finding" }, `${finding.code}: ${finding.message}`));
    }
  }
  row.addEventListener("click", () => { view.following = false; view.position = i + 1; schedule(view); });
  return row;
}

function schedule(view) {
  if (view.scheduled) return;
  view.scheduled = true;
  window.requestAnimationFrame(() => render(view));
}

function newView(diagrams, live) {
  activeView = { diagrams, live, events: [], outcomes: live ? { calls: {}, scannedFrom: -1 } : null,
    findings: new Map(), following: true,
    position: 0, scheduled: false };
  return activeView;
}

function bindStepper(view) {
  const to = (position) => {
    view.following = false;
    view.position = Math.max(0, Math.min(position, view.events.length));
    schedule(view);
  };
  $("#first").onclick = () => to(0);
  $("#prev").onclick = () => to(view.position - 1);
  $("#next").onclick = () => to(view.position + 1);
  $("#step").oninput = (e) => to(Number(e.target.value));
  $("#live").onclick = () => { view.following = true; schedule(view); };
  document.onkeydown = (e) => {
    if (e.target instanceof HTMLInputElement) return; // the slider moves by itself
    if (e.key === "ArrowLeft") { to(view.position - 1); e.preventDefault(); }
    if (e.key === "ArrowRight") { to(view.position + 1); e.preventDefault(); }
  };
}

function push(view, id, data) {
  let event = null;
  try { event = JSON.parse(data); } catch (error) { event = null; }
  if (event !== null && (typeof event !== "object" || typeof event.type !== "string")) event = null;
  view.events.push({ id: id || null, raw: data, event, at: Date.now() });
  if (view.following) view.position = view.events.length;
  schedule(view);
}

// -- live mode: a toolrelay server --------------------------------------------------------

function token() { return window.sessionStorage.getItem(TOKEN_KEY); }

async function api(path, options) {
  const headers = new Headers((options && options.headers) || {});
  const secret = token();
  if (secret) headers.set("Authorization", `Bearer ${secret}`);
  const response = await fetch(new URL(path, BASE), { ...options, headers, credentials: "omit",
    cache: "no-store", referrerPolicy: "no-referrer" });
  if (response.status === 401) {
    window.sessionStorage.removeItem(TOKEN_KEY);
    askToken(secret ? "The server refused this token." : "");
    throw new Error("unauthorized");
  }
  return response;
}

function askToken(message) {
  $("#app").hidden = true;
  $("#sign-out").hidden = true;
  $("#login").hidden = false;
  showError(message);
  $("#token").focus();
}

async function readSse(body, onEvent, signal) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let id = "";
  let data = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done || signal.aborted) break;
      buffer += decoder.decode(value, { stream: true });
      const lines = buffer.split(/\r\n|\r|\n/);
      buffer = lines.pop();
      if (buffer.length > MAX_LINE) throw new Error("an SSE line is too long");
      for (const line of lines) {
        if (line === "") {
          if (data.length) onEvent(id, data.join("\n"));
          data = [];
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "id") id = value;
        else if (field === "data") data.push(value);
      }
    }
  } finally {
    reader.releaseLock();
  }
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const timer = setTimeout(resolve, ms);
  signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
});

async function followThread(view, threadId, signal) {
  const path = `threads/${encodeURIComponent(threadId)}`;
  let after = "";
  let asking = false;
  const refreshOutcomes = async () => {
    const response = await api(`${path}/calls`, { signal });
    if (response.ok) {
      const body = await response.json();
      view.outcomes = { calls: body.calls || {}, scannedFrom: body.scannedFrom || 0 };
      schedule(view);
    }
  };
  let again = false;
  const askOutcomes = async () => { // once per burst of results, and again after it
    if (asking) { again = true; return; }
    asking = true;
    try {
      do {
        again = false;
        await sleep(50, signal);
        await refreshOutcomes();
      } while (again && !signal.aborted);
    } catch (error) {
      /* unauthorized (the form is up) or aborted */
    } finally {
      asking = false;
    }
  };
  while (!signal.aborted) {
    try {
      const query = after ? `?after=${encodeURIComponent(after)}` : "";
      const response = await api(`${path}/events${query}`,
        { signal, headers: { Accept: "text/event-stream" } });
      if (response.status === 404) {
        showError(`No thread ${threadId} (or not yours).`);
        setConnection("error", "not found");
        return;
      }
      if (response.status === 200) {
        setConnection("live", "live");
        await readSse(response.body, (id, data) => {
          if (id) after = id;
          push(view, id, data);
          if (data.includes('"TOOL_CALL_RESULT"')) askOutcomes();
        }, signal);
      } else if (response.status !== 204) {
        const text = await response.text();
        showError(`${response.status}: ${text}`);
      }
      setConnection("waiting", "waiting for the next turn");
    } catch (error) {
      if (signal.aborted || error.message === "unauthorized") return;
      setConnection("error", "reconnecting");
    }
    await sleep(POLL_MS, signal);
  }
}

async function listThreads(state) {
  const response = await api("threads");
  if (!response.ok) throw new Error(`GET threads: ${response.status}`);
  const body = await response.json();
  const list = $("#threads");
  list.replaceChildren(...body.threads.map((info) => el("li", {},
    el("a", { href: `#thread=${encodeURIComponent(info.threadId)}`, "data-thread": info.threadId,
      "aria-current": info.threadId === state.thread ? "true" : "false" },
    info.threadId, info.live ? el("span", { class: "live" }, "live") : null))));
  if (body.threads.length === 0) list.append(el("li", {}, "No thread yet."));
  return body;
}

function selectedThread() {
  const match = /^#thread=(.+)$/.exec(window.location.hash);
  return match ? decodeURIComponent(match[1]) : null;
}

async function startLive(diagrams) {
  const state = { thread: null, controller: null, view: null, ticker: null };
  $("#source").textContent = new URL(BASE).host;
  const open = () => {
    const thread = selectedThread();
    if (thread === state.thread) return;
    if (state.controller) state.controller.abort();
    state.thread = thread;
    showError("");
    $("#turns").replaceChildren();
    $("#events").replaceChildren();
    $("#placeholder").hidden = thread !== null;
    $("#view").dataset.thread = thread || "";
    for (const link of document.querySelectorAll("#threads a")) {
      link.setAttribute("aria-current", link.dataset.thread === thread ? "true" : "false");
    }
    if (thread === null) return;
    const view = newView(diagrams, true);
    bindStepper(view);
    schedule(view);
    state.ticker = state.ticker || setInterval(() => state.view && schedule(state.view), 1000);
    state.view = view;
    state.controller = new AbortController();
    followThread(view, thread, state.controller.signal);
  };
  const refresh = async () => {
    try { await listThreads(state); } catch (error) { /* shown by api() or next time */ }
  };
  try {
    await listThreads(state);
  } catch (error) {
    return; // 401: the token form is up
  }
  $("#login").hidden = true;
  $("#app").hidden = false;
  $("#sign-out").hidden = token() === null;
  showError("");
  if (started) return;
  started = true;
  window.addEventListener("hashchange", open);
  setInterval(refresh, 3000);
  open();
}

let started = false;

// -- capture mode: toolrelay inspect CAPTURE.sse ----------------------------------------

function startCapture(diagrams, capture) {
  $("#source").textContent = capture.name;
  $("#sidebar-title").textContent = "Capture";
  $("#threads").hidden = true;
  $("#placeholder").hidden = true;
  const summary = $("#summary");
  summary.hidden = false;
  const facts = [["file", capture.name], ["status", capture.status], ["reason", capture.reason || "-"],
    ["events", String(capture.events.length)], ["violations", String(capture.findings.length)]];
  const dl = el("dl", {});
  for (const [name, value] of facts) dl.append(el("dt", {}, name), el("dd", { "data-fact": name }, value));
  summary.append(dl);
  if (capture.truncated) summary.append(el("p", { class: "warning" }, "Only the first events are shown."));
  const list = el("ul", { id: "findings" });
  const view = newView(diagrams, false);
  for (const finding of capture.findings) {
    const where = finding.index ? `event #${finding.index}` : `line ${finding.line || "?"}`;
    const link = el("a", { href: "#", "data-index": finding.index || "" }, `${where}: ${finding.code}`);
    link.onclick = (e) => {
      e.preventDefault();
      if (finding.index) { view.following = false; view.position = finding.index; schedule(view); }
    };
    list.append(el("li", {}, link, el("div", {}, finding.message)));
    if (finding.index) {
      if (!view.findings.has(finding.index)) view.findings.set(finding.index, []);
      view.findings.get(finding.index).push(finding);
    }
  }
  summary.append(el("h2", {}, "Violations"), list);
  for (const entry of capture.events) {
    let event = null;
    try { event = JSON.parse(entry.data); } catch (error) { event = null; }
    if (event !== null && (typeof event !== "object" || typeof event.type !== "string")) event = null;
    view.events.push({ id: entry.id || null, raw: entry.data, event, at: null });
  }
  view.following = false;
  view.position = view.events.length;
  $("#live").textContent = "End";
  $("#live").title = "the last event";
  $("#login").hidden = true;
  $("#app").hidden = false;
  bindStepper(view);
  schedule(view);
  setConnection("idle", "offline capture");
}

// -- start ------------------------------------------------------------------------------

async function main() {
  const [runSvg, callSvg] = await Promise.all(["run_lifecycle.svg", "tool_call.svg"].map(
    async (name) => (await fetch(name, { cache: "no-store" })).text()));
  const diagrams = { run: new Diagram($("#run-diagram"), runSvg),
    call: new Diagram($("#call-diagram"), callSvg) };
  const captured = await fetch("capture.json", { cache: "no-store" });
  if (captured.ok) {
    startCapture(diagrams, await captured.json());
    return;
  }
  $("#login").addEventListener("submit", (e) => {
    e.preventDefault();
    const value = $("#token").value.trim();
    if (!value) return;
    window.sessionStorage.setItem(TOKEN_KEY, value);
    $("#token").value = "";
    startLive(diagrams);
  });
  $("#sign-out").addEventListener("click", () => {
    window.sessionStorage.removeItem(TOKEN_KEY);
    window.location.reload();
  });
  await startLive(diagrams);
}

main().catch((error) => showError(`The inspector could not start: ${error.message}`));
