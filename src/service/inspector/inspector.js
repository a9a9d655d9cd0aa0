// cairn inspector: plain JS, no dependencies. Every text from the server (model answers,
// tool results, script values, names) is rendered through textContent, never as HTML.
"use strict";

(function () {
  const TOKEN_KEY = "cairn.token";
  const PAGE_RUNS = 50;
  const PAGE_ENTRIES = 2000;
  const MAX_STREAMS = 24;
  const SETTLED = ["ok", "error", "cancelled", "exhausted"];
  const STATUSES = ["", "queued", "running", "suspended", "ok", "error", "cancelled", "exhausted"];

  let current = null; // what the page shows now: { stop() }

  // ---- small DOM helpers (text only) ----
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = String(v);
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, String(v));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }
  function svg(tag, attrs) {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "text") node.textContent = String(v);
      else node.setAttribute(k, String(v));
    }
    return node;
  }
  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }
  function showError(message) {
    const box = document.getElementById("error");
    box.textContent = message || "";
    box.hidden = !message;
  }
  function usd(nano) {
    if (nano === undefined || nano === null) return "";
    const v = Number(nano) / 1e9;
    return "$" + (v === 0 ? "0" : v < 0.01 ? v.toFixed(6) : v.toFixed(4));
  }
  function when(ms) {
    return ms ? new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "";
  }
  function duration(ms) {
    if (ms === undefined || ms === null || ms < 0) return "";
    if (ms < 1000) return ms + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
    return Math.floor(ms / 60000) + " min " + Math.round((ms % 60000) / 1000) + " s";
  }
  function text(value) {
    if (value === undefined || value === null) return "";
    return typeof value === "string" ? value : JSON.stringify(value, null, 2);
  }
  function statusBadge(status) {
    return el("span", { class: "status status-" + status, text: status });
  }

  // ---- the API, with the token from sessionStorage ----
  function token() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  }
  function headers(extra) {
    const h = Object.assign({}, extra || {});
    if (token()) h["Authorization"] = "Bearer " + token();
    return h;
  }
  async function api(path, options) {
    const opts = Object.assign({ method: "GET" }, options || {});
    const init = { method: opts.method, headers: headers(), credentials: "omit", cache: "no-store" };
    if (opts.body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(opts.body);
    }
    const response = await fetch(path, init);
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      body = null;
    }
    if (!response.ok) {
      const why = body && body.message ? body.code + ": " + body.message : "HTTP " + response.status;
      if (response.status === 401) throw new Error("the server wants a token: enter it above (" + why + ")");
      throw new Error(why);
    }
    return body;
  }

  // The run's events over fetch streaming (the token goes in a header, never the URL).
  // `onEnd(error)` is called once when the stream ends by itself (closed or failed), not when
  // it is stopped.
  function stream(path, lastEventId, onEvent, onEnd) {
    const controller = new AbortController();
    const h = headers({ Accept: "text/event-stream" });
    if (lastEventId) h["Last-Event-ID"] = String(lastEventId);
    (async () => {
      const response = await fetch(path, { headers: h, signal: controller.signal, cache: "no-store" });
      if (!response.ok || !response.body) throw new Error("event stream: HTTP " + response.status);
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.search(/\r?\n\r?\n/)) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
          let event = "message";
          let id = null;
          const data = [];
          for (const line of block.split(/\r?\n/)) {
            if (line.startsWith(":")) continue;
            const colon = line.indexOf(":");
            const field = colon < 0 ? line : line.slice(0, colon);
            const val = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
            if (field === "event") event = val;
            else if (field === "id") id = val;
            else if (field === "data") data.push(val);
          }
          if (!data.length) continue;
          let parsed = null;
          try {
            parsed = JSON.parse(data.join("\n"));
          } catch (_) {
            continue;
          }
          onEvent(event, id, parsed);
        }
      }
    })().then(
      () => {
        if (!controller.signal.aborted && onEnd) onEnd(null);
      },
      (e) => {
        if (e.name === "AbortError" || controller.signal.aborted) return;
        if (onEnd) onEnd(e);
        else showError(e.message);
      }
    );
    return () => controller.abort();
  }

  // ---- runs list ----
  function listPage(params) {
    const status = params.get("status") || "";
    const main = document.getElementById("main");
    clear(main);
    const filter = el("select", { id: "status-filter", "aria-label": "status" });
    for (const s of STATUSES) {
      const option = el("option", { value: s, text: s || "any status" });
      if (s === status) option.selected = true;
      filter.append(option);
    }
    filter.addEventListener("change", () => {
      location.hash = "#/" + (filter.value ? "?status=" + encodeURIComponent(filter.value) : "");
    });
    const body = el("tbody", { id: "runs" });
    const more = el("button", { id: "more-runs", type: "button", text: "More runs", hidden: true });
    const table = el(
      "table",
      {},
      el(
        "thead",
        {},
        el("tr", {}, ...["Status", "Name", "Run", "Cost", "Started", "Duration"].map((h) => el("th", { text: h })))
      ),
      body
    );
    main.append(
      el("div", { class: "toolbar" }, el("h1", { text: "Runs" }), filter, el("button", { id: "refresh", type: "button", text: "Refresh", onclick: () => route() })),
      table,
      el("div", { class: "toolbar" }, more)
    );
    let cursor = null;
    async function load() {
      const q = new URLSearchParams({ limit: String(PAGE_RUNS), cost: "true" });
      if (status) q.set("status", status);
      if (cursor) q.set("after", cursor);
      try {
        const page = await api("/v1/runs?" + q.toString());
        showError("");
        for (const run of page.runs) body.append(runRow(run));
        if (!page.runs.length && !cursor) body.append(el("tr", {}, el("td", { colspan: 6, class: "muted", text: "No runs." })));
        cursor = page.next || null;
        more.hidden = !cursor;
      } catch (e) {
        showError(e.message);
      }
    }
    more.addEventListener("click", load);
    load();
    return { stop() {} };
  }

  function runRow(run) {
    const settled = SETTLED.includes(run.status) || run.status === "suspended";
    const took = settled ? run.updated_at_ms - run.created_at_ms : Date.now() - run.created_at_ms;
    const row = el(
      "tr",
      { class: "run", "data-run": run.run_id, "data-status": run.status },
      el("td", {}, statusBadge(run.status)),
      el("td", { class: "name", text: run.name || "" }),
      el("td", {}, el("a", { href: "#/runs/" + encodeURIComponent(run.run_id), text: run.run_id })),
      el("td", { text: usd(run.cost_nano_usd) }),
      el("td", { text: when(run.created_at_ms) }),
      el("td", { text: duration(took) })
    );
    row.addEventListener("click", (e) => {
      if (e.target.tagName !== "A") location.hash = "#/runs/" + encodeURIComponent(run.run_id);
    });
    return row;
  }

  // ---- the journal as a tree of scopes ----
  // A scope segment as tree levels: a fan-out's branches (and a pipeline stage's items) sit
  // under one node for the fan-out, so a 500-branch run shows one collapsed row.
  function segmentLevels(segment) {
    const [kind, a, b] = segment.split(":");
    switch (kind) {
      case "par":
        return [
          { key: "par:" + a, kind: "parallel", label: "parallel #" + a },
          { key: segment, kind: "branch", label: "branch " + b },
        ];
      case "pipe":
        return [
          { key: "pipe:" + a, kind: "pipeline", label: "pipeline stage " + a },
          { key: segment, kind: "stage", label: "item " + b },
        ];
      case "wf":
        return [{ key: segment, kind: "child", label: "child workflow " + a + " #" + b }];
      case "step":
        return [{ key: segment, kind: "step", label: "step " + (a || "").slice(0, 8) + " #" + b }];
      case "at":
        return [{ key: segment, kind: "site", label: a + " #" + b }];
      default:
        return [{ key: segment, kind: "scope", label: segment }];
    }
  }

  class Node {
    constructor(key, kind, label, parent) {
      this.key = key;
      this.kind = kind;
      this.label = label;
      this.parent = parent;
      this.children = new Map();
      this.items = [];
      this.entries = 0;
      this.cost = 0;
      this.running = 0;
      this.failed = 0;
      this.expanded = false;
      this.dom = null;
    }
    child(key, kind, label) {
      let node = this.children.get(key);
      if (!node) {
        node = new Node(key, kind, label, this);
        this.children.set(key, node);
      }
      return node;
    }
  }

  class Tree {
    constructor(container, runPath) {
      this.container = container;
      this.runPath = runPath;
      this.root = new Node("", "run", "run", null);
      this.root.expanded = true;
      this.calls = new Map(); // running seq -> item
      this.dirty = new Set();
      this.scheduled = false;
    }
    nodeFor(entry) {
      let node = this.root;
      const phase = entry.phase || null;
      if (phase) node = node.child("phase:" + phase, "phase", "phase " + phase);
      if (entry.scope) {
        let path = node.key;
        for (const segment of entry.scope.split("/")) {
          for (const level of segmentLevels(segment)) {
            const key = path + "/" + level.key;
            node = node.child(key, level.kind, level.label);
          }
          path += "/" + segment;
        }
      }
      return node;
    }
    add(entry) {
      const target = entry.ref;
      if (target !== undefined && this.calls.has(target)) {
        const item = this.calls.get(target);
        item.end = entry;
        this.touch(item.node, entry, item);
        return;
      }
      const node = this.nodeFor(entry);
      const item = { start: entry, end: null, node, dom: null };
      if (entry.status === "running") this.calls.set(entry.seq, item);
      else item.end = entry;
      node.items.push(item);
      this.touch(node, entry, item);
    }
    touch(node, entry, item) {
      for (let n = node; n; n = n.parent) {
        if (!item.counted) n.entries += 1;
        if (entry.cost_nano_usd) n.cost += entry.cost_nano_usd;
        this.dirty.add(n);
      }
      item.counted = true;
      item.dirtyItem = true;
      this.schedule();
    }
    schedule() {
      if (this.scheduled) return;
      this.scheduled = true;
      requestAnimationFrame(() => this.flush());
    }
    flush() {
      this.scheduled = false;
      const dirty = Array.from(this.dirty);
      this.dirty.clear();
      if (!this.root.dom) {
        this.root.dom = this.renderNode(this.root);
        this.container.append(this.root.dom.wrap);
      }
      for (const node of dirty) {
        if (node.dom) this.refresh(node);
      }
    }
    renderNode(node) {
      const twisty = el("span", { class: "twisty" });
      const summary = el("span", { class: "summary" });
      const row = el("div", { class: "row" }, twisty, el("span", { class: "kind", text: node.label }), " ", summary);
      const body = el("div", { class: "body" });
      const wrap = el("div", { class: "node node-" + node.kind, "data-scope": node.key, "data-kind": node.kind }, row, body);
      const dom = { wrap, twisty, summary, body, shown: new Set(), shownItems: 0 };
      node.dom = dom;
      row.addEventListener("click", () => {
        node.expanded = !node.expanded;
        this.refresh(node);
      });
      this.refresh(node);
      return dom;
    }
    refresh(node) {
      const dom = node.dom;
      const parts = [node.entries + " entr" + (node.entries === 1 ? "y" : "ies")];
      if (node.cost) parts.push(usd(node.cost));
      if (node.children.size) parts.push(node.children.size + " scope" + (node.children.size === 1 ? "" : "s"));
      dom.summary.textContent = "(" + parts.join(", ") + ")";
      dom.summary.className = "summary muted";
      dom.twisty.textContent = node.expanded ? "▾" : "▸";
      dom.wrap.setAttribute("data-expanded", node.expanded ? "true" : "false");
      if (!node.expanded) {
        if (dom.body.firstChild) {
          clear(dom.body);
          dom.shown.clear();
          dom.shownItems = 0;
        }
        return;
      }
      // Expanded: render what is not rendered yet (children lazily, collapsed).
      for (; dom.shownItems < node.items.length; dom.shownItems++) {
        const item = node.items[dom.shownItems];
        item.dom = this.renderItem(item);
        dom.body.append(item.dom.wrap);
      }
      for (const item of node.items) {
        if (item.dom && item.dirtyItem) this.refreshItem(item);
      }
      for (const child of node.children.values()) {
        if (!dom.shown.has(child.key)) {
          dom.shown.add(child.key);
          dom.body.append(this.renderNode(child).wrap);
        }
      }
    }
    renderItem(item) {
      const row = el("div", { class: "row" });
      const detail = el("div", { class: "detail", hidden: true });
      const wrap = el("div", { class: "item item-" + item.start.kind, "data-seq": item.start.seq }, row, detail);
      const dom = { wrap, row, detail, open: false };
      row.addEventListener("click", () => {
        dom.open = !dom.open;
        detail.hidden = !dom.open;
        this.refreshItem(item);
      });
      item.dom = dom;
      this.refreshItem(item);
      return dom;
    }
    refreshItem(item) {
      item.dirtyItem = false;
      const dom = item.dom;
      const e = item.end || item.start;
      const s = item.start;
      clear(dom.row);
      const name = s.label || s.name || s.agent_type || (s.ident && s.ident.prompt_head) || "";
      dom.row.append(
        el("span", { class: "twisty", text: dom.open ? "▾" : "▸" }),
        el("span", { class: "kind", text: s.kind }),
        " #" + s.seq + " ",
        el("span", { class: "name", text: name }),
        " ",
        statusBadge(e.status)
      );
      const bits = [];
      if (s.model) bits.push(s.model);
      if (e.usage) bits.push((e.usage.input_tokens || 0) + " in / " + (e.usage.output_tokens || 0) + " out tokens");
      if (e.cost_nano_usd !== undefined) bits.push(usd(e.cost_nano_usd));
      if (item.end && s.ts && item.end.ts) bits.push(duration(item.end.ts - s.ts));
      if (bits.length) dom.row.append(" ", el("span", { class: "muted", text: bits.join(" · ") }));
      if (!dom.open) return;
      clear(dom.detail);
      const field = (label, value) => {
        if (value === undefined || value === null || value === "") return;
        dom.detail.append(el("div", { class: "muted", text: label }), el("pre", { class: "field-" + label.replace(/\W+/g, "-"), text: text(value) }));
      };
      if (s.kind === "agent") {
        field("prompt (head)", s.ident && s.ident.prompt_head);
        field("answer", e.value);
        field("served by", e.served_by);
        field("finish reason", e.finish_reason);
        field("usage", e.usage);
        field("transcript", e.transcript_ref);
        field("attempts", e.attempts && e.attempts.length ? e.attempts : null);
        dom.detail.append(this.turnsBox(item));
      } else {
        field("name", s.name);
        field("value", e.value);
      }
      field("error", e.error);
      field("scope", s.scope || "(root)");
    }
  }

  // A turn record's cost in nano-USD: the one place the page reads it.
  function turnCostNano(record) {
    return record.cost_nano_usd;
  }

  // Each turn of a call: its model, status, tokens, cost and time, as a table (text only).
  function turnTable(records, callSeq) {
    const body = el("tbody");
    for (const r of records) {
      const usage = r.usage || {};
      const earlier = r.call_seq !== undefined && r.call_seq !== callSeq;
      body.append(
        el(
          "tr",
          { class: "turn-record turn-record-" + r.status, "data-turn": r.turn },
          el("td", { text: "#" + r.turn + (earlier ? " (earlier attempt)" : "") }),
          el("td", { text: r.served_by }),
          el("td", {}, statusBadge(r.status)),
          el("td", { class: "tokens", text: (usage.input_tokens || 0) + " in / " + (usage.output_tokens || 0) + " out" }),
          el("td", { class: "cost", text: turnCostNano(r) === undefined ? "unpriced" : usd(turnCostNano(r)) }),
          el("td", { class: "time", text: duration(r.ended_ms - r.started_ms) })
        )
      );
    }
    return el(
      "table",
      { class: "turn-log" },
      el("thead", {}, el("tr", {}, ...["Turn", "Model", "Status", "Tokens", "Cost", "Time"].map((h) => el("th", { text: h })))),
      body
    );
  }

  // An agent call's turns, read on demand from the server (bounded there), as text only.
  Tree.prototype.turnsBox = function (item) {
    const box = el("div", { class: "turns" });
    const seq = (item.end || item.start).seq;
    const show = (answer) => {
      clear(box);
      const head = [answer.messages.length + " messages"];
      const log = answer.turn_log || [];
      const turns = log.length ? new Set(log.map((r) => r.turn)).size : answer.turns;
      if (turns !== null && turns !== undefined) head.push(turns + " turns");
      if (answer.tool_calls) head.push(answer.tool_calls + " tool calls");
      if (answer.cost_nano_usd !== undefined && answer.cost_nano_usd !== null) head.push(usd(answer.cost_nano_usd));
      if (answer.omitted) head.push(answer.omitted + " earlier messages not shown");
      box.append(el("div", { class: "muted", text: head.join(" · ") }));
      if (log.length) box.append(turnTable(log, item.start.seq));
      for (const message of answer.messages) {
        const role = message.role + (message.turn ? " · turn " + message.turn : "");
        const turn = el("div", { class: "turn turn-" + message.role }, el("span", { class: "kind", text: role }));
        for (const part of message.parts) {
          let label = part.type;
          if (part.name) label += " " + part.name;
          if (part.is_error) label += " (error)";
          if (part.truncated) label += " (cut)";
          turn.append(el("div", { class: "muted", text: label }), el("pre", { class: "part part-" + part.type, text: part.text }));
        }
        box.append(turn);
      }
    };
    if (item.turns) {
      show(item.turns);
      return box;
    }
    const button = el("button", { type: "button", class: "load-turns", text: "Show turns" });
    button.addEventListener("click", async (event) => {
      event.stopPropagation();
      button.disabled = true;
      try {
        item.turns = await api(this.runPath + "/calls/" + encodeURIComponent(seq) + "/turns");
        show(item.turns);
      } catch (e) {
        showError(e.message);
        button.disabled = false;
      }
    });
    box.append(button);
    return box;
  };

  // ---- cost chart (own SVG) ----
  function costChart(title, lines) {
    const rows = Object.entries(lines || {}).map(([k, v]) => [k, v.cost_nano_usd || 0, v.usage || {}]);
    rows.sort((a, b) => b[1] - a[1]);
    // Room for the longest bar and its label after it ("$0.000046 · 38 tok").
    const width = 370;
    const barH = 18;
    const height = Math.max(1, rows.length) * (barH + 6) + 22;
    const chart = svg("svg", { class: "chart", width, height, viewBox: "0 0 " + width + " " + height, role: "img", "aria-label": "cost by " + title });
    chart.append(svg("text", { x: 0, y: 12, text: "by " + title }));
    const max = Math.max(1, ...rows.map((r) => r[1]));
    rows.forEach(([name, cost, usage], i) => {
      const y = 20 + i * (barH + 6);
      const w = Math.max(2, Math.round((cost / max) * 90));
      chart.append(svg("text", { x: 0, y: y + 13, text: name.length > 22 ? name.slice(0, 21) + "…" : name }));
      chart.append(svg("rect", { x: 140, y, width: w, height: barH, rx: 2 }));
      const tokens = (usage.input_tokens || 0) + (usage.output_tokens || 0);
      chart.append(svg("text", { x: 146 + w, y: y + 13, text: usd(cost) + " · " + tokens + " tok" }));
    });
    return chart;
  }

  // ---- a run's page ----
  function runPage(id) {
    const main = document.getElementById("main");
    clear(main);
    const title = el("h1", { text: "Run " + id });
    const status = el("span", { id: "run-status" });
    const cancel = el("button", { id: "cancel", type: "button", text: "Cancel" });
    const resume = el("button", { id: "resume", type: "button", text: "Resume" });
    const facts = el("div", { class: "muted", id: "run-facts" });
    const waits = el("section", { id: "waits", hidden: true }, el("h2", { text: "Waiting for" }));
    const waitList = el("div");
    waits.append(waitList);
    const costs = el("section", { id: "costs" }, el("h2", { text: "Cost" }));
    const charts = el("div", { class: "charts" });
    costs.append(charts);
    const live = el("section", { id: "live", hidden: true }, el("h2", { text: "Streaming" }));
    const streams = el("div");
    live.append(streams);
    const journal = el("section", { id: "journal" }, el("h2", { text: "Journal" }));
    const treeBox = el("div", { id: "tree" });
    const more = el("button", { id: "more-entries", type: "button", text: "Load more entries", hidden: true });
    const loaded = el("span", { class: "muted", id: "loaded" });
    journal.append(treeBox, el("div", { class: "toolbar" }, more, loaded));
    main.append(el("div", { class: "toolbar" }, title, status, cancel, resume), facts, waits, live, costs, journal);

    const path = "/v1/runs/" + encodeURIComponent(id);
    const tree = new Tree(treeBox, path);
    const state = { after: 0, next: null, count: 0, status: null, stopStream: null, stopped: false, streams: new Map(), waitKeys: null, watchdog: null };

    function setStatus(s) {
      state.status = s;
      clear(status);
      status.append(statusBadge(s));
      status.setAttribute("data-status", s);
      cancel.disabled = SETTLED.includes(s);
      resume.disabled = !["suspended", "error", "exhausted"].includes(s);
    }

    async function loadShow() {
      const shown = await api(path);
      setStatus(shown.status);
      const meta = shown.meta || {};
      facts.textContent =
        (meta.name || "") + " · started " + when(meta.created_at_ms) + " · " + shown.entries + " entries · spent " + usd(shown.cost && shown.cost.total && shown.cost.total.cost_nano_usd);
      clear(charts);
      if (shown.cost) {
        charts.append(costChart("phase", shown.cost.by_phase), costChart("model", shown.cost.by_model), costChart("role", shown.cost.by_role));
      }
      // The wait forms are rebuilt only when the set of open waits changes: a status event
      // while someone types into a form must not replace it under them.
      const pending = shown.pending || [];
      const waitKeys = pending.map((w) => w.seq + ":" + w.key).sort().join("\n");
      if (waitKeys !== state.waitKeys) {
        state.waitKeys = waitKeys;
        clear(waitList);
        for (const wait of pending) waitList.append(waitForm(wait));
      }
      waits.hidden = !pending.length;
      if (shown.error) facts.append(el("pre", { class: "run-error", text: text(shown.error) }));
      return shown;
    }

    function waitForm(wait) {
      const value = el("textarea", { name: "value", placeholder: "a JSON value, or text", "aria-label": "value for " + wait.key });
      const button = el("button", { type: "submit", text: "Resolve" });
      const form = el("form", { class: "wait", "data-key": wait.key }, el("span", { class: "kind", text: wait.key }), wait.prompt ? el("span", { class: "muted", text: wait.prompt }) : null, value, button);
      form.addEventListener("submit", async (e) => {
        e.preventDefault();
        let body = value.value;
        try {
          body = JSON.parse(value.value);
        } catch (_) {
          body = value.value;
        }
        button.disabled = true;
        try {
          await api(path + "/resolve/" + encodeURIComponent(wait.key), { method: "POST", body });
          showError("");
          form.replaceChildren(el("span", { class: "muted resolved", text: "resolved " + wait.key }));
          follow();
        } catch (err) {
          showError(err.message);
          button.disabled = false;
        }
      });
      return form;
    }

    async function loadEntries() {
      const q = new URLSearchParams({ limit: String(PAGE_ENTRIES) });
      if (state.after) q.set("after", String(state.after));
      const page = await api(path + "/journal?" + q.toString());
      for (const entry of page.entries) addEntry(entry);
      state.next = page.next_after || null;
      more.hidden = !state.next;
      loaded.textContent = state.count + " entries loaded" + (state.next ? " (more on the server)" : "");
    }
    function addEntry(entry) {
      if (entry.seq <= state.after) return;
      state.after = entry.seq;
      state.count += 1;
      tree.add(entry);
      if (entry.ref !== undefined) endStream(entry);
    }
    more.addEventListener("click", () => loadEntries().catch((e) => showError(e.message)));

    // Token streams: one box per agent call in flight, the newest MAX_STREAMS of them; a
    // call's box goes when its answer is journaled (the tree shows it), and every box when
    // the run stops running. A call that began before the page followed it has no scope
    // in its deltas.
    function streamBox(data) {
      const key = (data.scope || "") + "|" + (data.label || "") + "|" + (data.call || "");
      let box = state.streams.get(key);
      if (!box) {
        const pre = el("pre", { class: "tokens" });
        const known = data.scope || data.label || data.model;
        const name = known ? "agent " + (data.label || data.model || "") + " @ " + (data.scope || "(root)") : "agent call (began before this page followed the run)";
        const wrap = el("div", { class: "stream", "data-scope": data.scope || "", "data-call": data.call || "" }, el("div", { class: "muted", text: name }), pre);
        box = { pre, wrap, scope: data.scope || "" };
        state.streams.set(key, box);
        streams.append(wrap);
        live.hidden = false;
        for (const [old, oldBox] of state.streams) {
          if (state.streams.size <= MAX_STREAMS) break;
          oldBox.wrap.remove();
          state.streams.delete(old);
        }
      }
      return box;
    }
    function endStream(entry) {
      if (entry.kind !== "agent" || entry.status === "running") return;
      for (const [key, box] of state.streams) {
        if (box.scope === (entry.scope || "")) {
          box.wrap.remove();
          state.streams.delete(key);
          break;
        }
      }
      live.hidden = !state.streams.size;
    }
    function endStreams() {
      clear(streams);
      state.streams.clear();
      live.hidden = true;
    }

    // Follows the run over SSE from the last entry shown. A stream that ends before the run's
    // outcome (a dropped connection, a server restart) is opened again from there; and while
    // the run is unsettled a slow poll of the run keeps its status true even if no stream
    // gets through.
    function follow() {
      if (state.stopped || state.stopStream || state.next) return;
      let ended = false;
      state.stopStream = stream(
        path + "/events?tokens=1",
        state.after,
        (event, _id, data) => {
          if (event === "entry") addEntry(data);
          else if (event === "status") {
            setStatus(data.status);
            if (data.status !== "running") endStreams();
            loadShow().catch((e) => showError(e.message));
          } else if (event === "token") {
            const box = streamBox(data);
            box.pre.textContent += data.text || "";
          } else if (event === "outcome") {
            ended = true;
            endStreams();
            setStatus(data.status);
            state.stopStream = null;
            loadShow().catch((e) => showError(e.message));
          }
        },
        (error) => {
          if (ended || state.stopped) return;
          state.stopStream = null;
          if (error) showError(error.message + " (reconnecting)");
          setTimeout(() => {
            if (!state.stopped && !SETTLED.includes(state.status)) follow();
          }, 1000);
        }
      );
      watch();
    }
    function watch() {
      if (state.watchdog || state.stopped) return;
      state.watchdog = setInterval(() => {
        if (state.stopped || SETTLED.includes(state.status)) {
          clearInterval(state.watchdog);
          state.watchdog = null;
          return;
        }
        loadShow().catch((e) => showError(e.message));
      }, 3000);
    }

    cancel.addEventListener("click", async () => {
      try {
        await api(path + "/cancel", { method: "POST" });
        showError("");
        await loadShow();
      } catch (e) {
        showError(e.message);
      }
    });
    resume.addEventListener("click", async () => {
      try {
        await api(path + "/resume", { method: "POST" });
        showError("");
        setStatus("queued");
        follow();
      } catch (e) {
        showError(e.message);
      }
    });

    (async () => {
      try {
        const shown = await loadShow();
        await loadEntries();
        showError("");
        if (!SETTLED.includes(shown.status)) follow();
      } catch (e) {
        showError(e.message);
      }
    })();
    return {
      stop() {
        state.stopped = true;
        if (state.stopStream) state.stopStream();
        if (state.watchdog) clearInterval(state.watchdog);
      },
    };
  }

  // ---- routing by the URL fragment (never carries the token) ----
  function route() {
    if (current) current.stop();
    showError("");
    const hash = location.hash.replace(/^#/, "") || "/";
    const [pathPart, queryPart] = hash.split("?");
    const params = new URLSearchParams(queryPart || "");
    const m = pathPart.match(/^\/runs\/([^/]+)$/);
    current = m ? runPage(decodeURIComponent(m[1])) : listPage(params);
  }

  document.addEventListener("DOMContentLoaded", () => {
    const form = document.getElementById("token-form");
    const input = document.getElementById("token");
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      if (input.value) sessionStorage.setItem(TOKEN_KEY, input.value);
      input.value = "";
      input.placeholder = "token set for this tab";
      route();
    });
    document.getElementById("forget").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      input.placeholder = "API token (kept in this tab only)";
      route();
    });
    if (token()) input.placeholder = "token set for this tab";
    window.addEventListener("hashchange", route);
    route();
  });
})();
