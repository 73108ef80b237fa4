// The bench page: renders each snapshot from GET /events (server-sent events). Text goes in
// through textContent only, never as HTML. Elapsed times and expiry countdowns tick locally,
// against the server's clock (the snapshot's `now`).
"use strict";

const csrf = document.querySelector('meta[name="csrf-token"]').content;
let skew = 0; // server clock minus ours, in ms
let last = null;
let es = null;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, String(v));
    else e[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function tag(text, cls) { return el("span", { class: "tag " + (cls || "") }, text); }

function hex4(n) { return typeof n === "number" ? n.toString(16).padStart(4, "0") : String(n || ""); }

function dur(ms) {
  if (ms < 0) ms = 0;
  const s = Math.floor(ms / 1000);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  if (h > 0) return `${h}h ${String(m).padStart(2, "0")}m`;
  if (m > 0) return `${m}m ${String(r).padStart(2, "0")}s`;
  return `${r}s`;
}

function serverNow() { return Date.now() + skew; }

function ago(iso) { return el("span", { "data-since": iso }, dur(serverNow() - Date.parse(iso))); }

function countdown(iso) { return el("span", { "data-expires": iso }, dur(Date.parse(iso) - serverNow())); }

function fill(id, rows, cols, emptyText) {
  const body = document.getElementById(id);
  if (rows.length === 0) {
    body.replaceChildren(el("tr", { class: "empty" }, el("td", { colSpan: cols }, emptyText)));
  } else {
    body.replaceChildren(...rows);
  }
}

function lockText(lock) {
  if (!lock || !lock.held) return tag("free", "off");
  const by = lock.held_by || "lease";
  return el("span", {}, tag(by, by), " ", lock.holder || "");
}

function consoleText(c) {
  if (!c) return "–";
  const state = c.state || (c.open === true ? "open" : c.open === false ? "closed" : c.configured ? "configured" : "");
  return tag(String(state || "configured"), String(state));
}

// A board's last boot: its outcome, the stages it reached with their times, its faults.
function bootText(boot) {
  if (!boot) return "–";
  const stages = boot.stages.map((x) => `${x.stage} ${(x.at_ms / 1000).toFixed(1)}s`).join(" → ");
  const faults = boot.faults.map((f) => f.kind).join(", ");
  return el("span", { "data-outcome": boot.outcome }, tag(boot.outcome, boot.outcome), ` #${boot.boot}`,
    el("div", { class: "hint mono" }, stages || "no stage yet"),
    faults ? el("div", { class: "hint" }, `faults: ${faults}`) : null);
}

function renderBoards(s) {
  const boots = new Map((s.boots || []).map((x) => [x.board, x]));
  const rows = s.boards.map((b) => {
    const dev = b.device;
    const devText = dev
      ? el("span", {}, tag("attached", "attached"), " ", `${hex4(dev.vid)}:${hex4(dev.pid)}`, b.mode ? " " : "", b.mode ? tag(b.mode, String(b.mode).toLowerCase()) : null)
      : tag("absent", "off");
    const power = b.power ? tag(`${b.power.state} (${b.power.backend})`, b.power.state) : "–";
    return el("tr", { "data-board": b.name, "data-holder": b.lock.holder || "", "data-attached": dev ? "yes" : "no" },
      el("td", {}, el("strong", {}, b.name), b.soc ? ` ${b.soc}` : "", el("div", { class: "hint mono" }, `usb ${b.usb}`)),
      el("td", {}, devText), el("td", {}, consoleText(b.console)), el("td", {}, power),
      el("td", { class: "boot" }, bootText(boots.get(b.name))), el("td", {}, lockText(b.lock)));
  });
  document.getElementById("boards-count").textContent = `(${s.boards.length})`;
  fill("boards", rows, 6, "No boards are configured (boards: in the server's configuration).");
}

function renderDevices(s) {
  const rows = s.devices.map((d) =>
    el("tr", { "data-device": d.id, "data-mode": d.mode || "", "data-family": d.family || "" },
      el("td", { class: "mono" }, d.id),
      el("td", { class: "mono" }, `${hex4(d.vid)}:${hex4(d.pid)}`),
      el("td", {}, d.family || "–"),
      el("td", {}, d.soc || "–"),
      el("td", {}, d.mode ? tag(d.mode, String(d.mode).toLowerCase()) : "–"),
      el("td", {}, d.class || "–"),
      el("td", {}, d.board || "–"),
      el("td", {}, lockText(d.lock))));
  document.getElementById("devices-count").textContent = `(${s.devices.length})`;
  fill("devices", rows, 8, "No USB device attached.");
}

function release(key, holder) {
  if (!window.confirm(`Release the lease on ${key} held by ${holder}? Their next command on it will be refused.`)) return;
  fetch("/release", {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded", "X-CSRF-Token": csrf },
    body: new URLSearchParams({ key }).toString(),
    credentials: "same-origin",
  }).then(async (r) => { if (!r.ok) window.alert(await r.text()); });
}

const notes = new Map(); // approval id -> note typed so far
const scrolledTo = new Set(); // #apr-N already brought into view once

function decide(id, decision, note) {
  fetch("/approval", {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded", "X-CSRF-Token": csrf },
    body: new URLSearchParams({ id, decision, note }).toString(),
    credentials: "same-origin",
  }).then(async (r) => { if (!r.ok) window.alert(await r.text()); });
}

// Exactly what will run, as the request shows it: the argv, each file's SHA-256 and size.
function renderApprovals(s) {
  const rows = (s.approvals || []).map((a) => {
    const files = a.files.map((f) => el("div", { class: "hint mono", "data-sha256": f.sha256 },
      `${f.path}: ${f.size} bytes, sha256 ${f.sha256}`));
    // A note being typed survives the re-render of the next snapshot.
    // A built-in tool's action: the command lines it runs.
    const runs = a.tool !== "execute_command" && a.argv ? a.argv.map((l) => el("div", { class: "hint mono" }, `runs ${l}`)) : [];
    const note = el("input", { type: "text", placeholder: "note", "aria-label": `note for ${a.id}`, maxLength: 1024,
      value: notes.get(a.id) || "", oninput: (e) => notes.set(a.id, e.target.value) });
    const buttons = a.may_decide
      ? el("span", { class: "nowrap" }, note, " ",
          el("button", { type: "button", class: "approve", onclick: () => decide(a.id, "approve", note.value) }, "Approve"), " ",
          el("button", { type: "button", class: "danger", onclick: () => decide(a.id, "deny", note.value) }, "Deny"))
      : el("span", { class: "hint" }, `for ${a.approvers.join(", ")}`);
    const forWhom = a.answers_for ? el("div", { class: "hint" }, `answering for ${a.answers_for}`) : null;
    // The link of a by: requester request (/approval/apr-N) lands here as #apr-N.
    const wanted = location.hash === `#${a.id}`;
    return el("tr", { "data-approval": a.id, "data-client": a.client, class: wanted ? "wanted" : "" },
      el("td", { class: "mono" }, a.id, el("div", { class: "hint" }, a.rule)),
      el("td", {}, a.client, a.note ? el("div", { class: "hint" }, `“${a.note}”`) : null),
      el("td", {}, el("div", { class: "mono argv" }, a.what), ...runs, ...files),
      el("td", {}, a.board || "–", a.holder ? el("div", { class: "hint" }, `held by ${a.holder}`) : null),
      el("td", {}, ago(a.since), el("div", { class: "hint" }, "expires in ", countdown(a.deadline))),
      el("td", {}, buttons, forWhom));
  });
  document.getElementById("approvals-count").textContent = `(${rows.length})`;
  fill("approvals", rows, 6, "Nothing waits for an approval.");
  const picked = document.querySelector("#approvals tr.wanted");
  if (picked && !scrolledTo.has(location.hash)) {
    scrolledTo.add(location.hash);
    picked.scrollIntoView({ block: "center" });
  }
}

function renderLocks(s) {
  const rows = s.locks.map((l) => {
    const btn = s.viewer.admin && l.held_by === "lease"
      ? el("button", { class: "danger", type: "button", onclick: () => release(l.key, l.holder) }, "Release")
      : null;
    const holder = l.holder ? el("span", {}, tag(l.held_by || "", l.held_by || ""), " ", l.holder) : "–";
    const running = l.running ? el("div", { class: "hint mono" }, l.running) : null;
    const shared = l.shared.length ? el("div", { class: "hint" }, "shared: " + l.shared.join(", ")) : null;
    return el("tr", { "data-key": l.key, "data-holder": l.holder || "", "data-held-by": l.held_by || "", "data-queue": l.queue.length },
      el("td", { class: "mono" }, l.key),
      el("td", {}, holder, running, shared),
      el("td", {}, l.note || "–"),
      el("td", {}, l.since ? ago(l.since) : "–"),
      el("td", {}, l.expires_at ? countdown(l.expires_at) : "–"),
      el("td", {}, ...(l.queue.length ? l.queue.map((c, i) => el("div", { class: "nowrap" }, `${i + 1}. ${c}`)) : ["–"])),
      el("td", {}, btn));
  });
  document.getElementById("locks-count").textContent = `(${s.locks.length})`;
  fill("locks", rows, 7, "Nothing is leased, running or waited for.");
  const extra = [];
  if (s.locks_omitted) extra.push(`${s.locks_omitted} more keys in use not listed (leases.max_listed).`);
  if (s.board_match_waiters) extra.push(`${s.board_match_waiters} lock_board request(s) waiting for any matching board.`);
  document.getElementById("locks-extra").textContent = extra.join(" ");
}

function renderRunning(s) {
  const rows = s.running.map((r) => {
    const p = typeof r.progress === "number" ? r.progress : null;
    // A run that moves bytes (flash_board) says which step, how much, how fast, how long.
    const t = r.transfer;
    const moving = t ? ` ${t.step} ${(t.bytes_done / 1048576).toFixed(1)} of ${(t.bytes_total / 1048576).toFixed(1)} MiB at ${(t.rate_bytes_per_s / 1e6).toFixed(1)} MB/s${typeof t.eta_secs === "number" ? `, ${Math.round(t.eta_secs)} s left` : ""}` : "";
    const bar = p === null ? "–" : el("span", { "data-transfer": t ? t.step : "" }, el("progress", { max: 100, value: p }), ` ${Math.round(p)}%${moving}`);
    // A job (background, detached, task) names its id under its holder.
    const job = r.job ? el("div", { class: "hint mono", "data-job": r.job }, `job ${r.job}`) : null;
    return el("tr", { "data-run": r.id, "data-command": r.command, "data-progress": p === null ? "" : Math.round(p) },
      el("td", {}, r.client, job),
      el("td", { class: "mono argv" }, r.argv.join(" ")),
      el("td", {}, r.board || r.device || "–"),
      el("td", {}, ago(r.started_at)),
      el("td", {}, bar));
  });
  document.getElementById("running-count").textContent = `(${s.running.length})`;
  fill("running", rows, 5, "No command is running.");
}

function renderDecisions(s) {
  const items = s.decisions.map((d) =>
    el("li", { class: d.kind, "data-decision": d.event },
      el("time", { dateTime: d.at }, new Date(d.at).toLocaleTimeString()),
      el("span", { class: "kind" }, d.reason ? `${d.event} (${d.reason})` : d.event),
      el("span", { class: "client" }, d.client || "–"),
      el("span", { class: "mono" }, d.what)));
  const list = document.getElementById("decisions");
  if (items.length === 0) list.replaceChildren(el("li", { class: "hint" }, "No decision yet."));
  else list.replaceChildren(...items);
}

function render(s) {
  last = s;
  skew = Date.parse(s.now) - Date.now();
  document.getElementById("version").textContent = s.version;
  document.getElementById("source").textContent = s.source;
  document.getElementById("uptime").textContent = dur(s.uptime_secs * 1000);
  renderApprovals(s);
  renderBoards(s);
  renderDevices(s);
  renderLocks(s);
  renderRunning(s);
  renderDecisions(s);
  renderConsole(s);
  document.body.dataset.snapshotAt = s.now;
}

function setStatus(text, cls) {
  const st = document.getElementById("status");
  st.textContent = text;
  st.className = "status " + cls;
}

// Tell "server away" (keep trying) from "signed out" (show the sign-in form).
function probe() {
  fetch("/state", { cache: "no-store", credentials: "same-origin" })
    .then((r) => {
      if (r.status === 401) window.location.reload();
      else if (r.ok) connect();
      else setTimeout(probe, 1000);
    })
    .catch(() => setTimeout(probe, 1000));
}

function connect() {
  if (es) es.close();
  es = new EventSource("/events");
  es.addEventListener("snapshot", (e) => {
    setStatus("live", "live");
    render(JSON.parse(e.data));
  });
  es.onerror = () => {
    setStatus("reconnecting…", "reconnecting");
    // CONNECTING: the browser retries by itself (`retry:`); CLOSED: it gave up (an HTTP
    // error such as 401), so find out why.
    if (es.readyState === EventSource.CLOSED) {
      es.close();
      setTimeout(probe, 1000);
    }
  };
}

// The console view: read-only text of one board's console (GET /console, ANSI removed by
// the server), fetched from its cursor whenever a snapshot shows the console grew.
const CONSOLE_KEEP = 65536; // characters kept on screen
let consoleBoard = null;
let consoleCursor = null;
let consoleFetching = false;

function renderConsole(s) {
  const sel = document.getElementById("console-board");
  const names = s.boards.filter((b) => b.console).map((b) => b.name);
  if (sel.options.length !== names.length || names.some((n, i) => sel.options[i].value !== n)) {
    sel.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
    if (consoleBoard && names.includes(consoleBoard)) sel.value = consoleBoard;
  }
  if (names.length === 0) {
    document.getElementById("console-state").textContent = "(no board has a console)";
    return;
  }
  if (sel.value !== consoleBoard) {
    consoleBoard = sel.value;
    consoleCursor = null;
    document.getElementById("console-text").textContent = "";
  }
  const b = s.boards.find((x) => x.name === consoleBoard);
  const c = b && b.console;
  document.getElementById("console-state").textContent = c && c.state ? `(${c.state})` : "";
  if (c && (consoleCursor === null || (typeof c.end_cursor === "number" && c.end_cursor !== consoleCursor))) fetchConsole();
}

function fetchConsole() {
  if (consoleFetching || !consoleBoard) return;
  consoleFetching = true;
  const board = consoleBoard;
  const q = `/console?board=${encodeURIComponent(board)}` + (consoleCursor === null ? "" : `&cursor=${consoleCursor}`);
  fetch(q, { cache: "no-store", credentials: "same-origin" })
    .then((r) => (r.ok ? r.json() : null))
    .then((j) => {
      consoleFetching = false;
      if (!j || board !== consoleBoard) return;
      const pre = document.getElementById("console-text");
      const follow = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      let t = (j.cursor !== consoleCursor && consoleCursor !== null ? "" : pre.textContent) + j.text;
      if (j.dropped_bytes > 0) t += `\n[${j.dropped_bytes} bytes no longer in the buffer]\n`;
      if (t.length > CONSOLE_KEEP) t = t.slice(t.length - CONSOLE_KEEP);
      pre.textContent = t;
      if (follow) pre.scrollTop = pre.scrollHeight;
      const more = j.next_cursor !== consoleCursor && j.next_cursor - j.cursor >= 65536;
      consoleCursor = j.next_cursor;
      if (more) fetchConsole();
    })
    .catch(() => { consoleFetching = false; });
}

document.getElementById("console-board").addEventListener("change", () => { if (last) renderConsole(last); });

setInterval(() => {
  const now = serverNow();
  for (const e of document.querySelectorAll("[data-since]")) e.textContent = dur(now - Date.parse(e.dataset.since));
  for (const e of document.querySelectorAll("[data-expires]")) {
    const left = Date.parse(e.dataset.expires) - now;
    e.textContent = dur(left);
    e.classList.toggle("soon", left < 60000);
  }
  if (last) document.getElementById("uptime").textContent = dur(last.uptime_secs * 1000 + (now - Date.parse(last.now)));
}, 1000);

connect();
