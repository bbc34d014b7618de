// plait dashboard: plain JavaScript over the JSON API (no libraries, works offline).
// Signing in posts the token once to /api/session; from then on an HttpOnly cookie that
// this script cannot read identifies the browser, and requests that change something
// carry the session's CSRF token. The token itself is never stored by the browser.
"use strict";

(function () {
  const ROOT = document.body.dataset.root || "";
  const SETTLED = ["completed", "failed", "cancelled", "suspended"];
  // steps that wait rather than work: drawn hatched on the timeline
  const WAITING_KINDS = ["sleep", "suspend", "event"];
  // the session's CSRF token, from GET /api/session (kept in memory only)
  let csrfToken = null;

  // Earlier versions kept a token here: it must not outlive this version.
  try {
    localStorage.removeItem("plait.token");
  } catch (_) {
    /* storage may be off */
  }

  function headersFor(method, extra) {
    const headers = Object.assign({ Accept: "application/json" }, extra || {});
    if (method !== "GET") {
      headers["Content-Type"] = "application/json";
      if (csrfToken) headers["X-CSRF-Token"] = csrfToken;
    }
    return headers;
  }

  function askForToken() {
    const box = document.getElementById("signin");
    if (!box || !box.hidden) return;
    box.hidden = false;
    document.getElementById("signin-token").focus();
  }

  async function signIn(event) {
    event.preventDefault();
    const field = document.getElementById("signin-token");
    const error = document.getElementById("signin-error");
    error.textContent = "";
    const token = field.value.trim();
    if (!token) return;
    const response = await fetch(ROOT + "/api/session", {
      method: "POST",
      headers: headersFor("POST"),
      body: JSON.stringify({ token: token }),
      cache: "no-store",
    });
    field.value = "";
    if (response.ok) {
      location.reload();
      return;
    }
    error.textContent = response.status === 401 ? "Unknown token." : "Sign-in failed (HTTP " + response.status + ").";
  }

  async function signOut() {
    await fetch(ROOT + "/api/session", { method: "DELETE", headers: headersFor("DELETE"), cache: "no-store" });
    location.reload();
  }

  // Who this browser is: null (and the sign-in form) when nobody is signed in.
  async function whoAmI() {
    const response = await fetch(ROOT + "/api/session", { headers: headersFor("GET"), cache: "no-store" });
    if (response.status === 401) {
      askForToken();
      return null;
    }
    if (!response.ok) return null;
    const me = await response.json();
    csrfToken = me.csrf_token || null;
    document.getElementById("whoami").textContent = me.auth ? me.user : "no auth";
    document.getElementById("signout").hidden = !me.session;
    return me;
  }

  class ApiError extends Error {
    constructor(status, body) {
      super((body && body.error && body.error.message) || "HTTP " + status);
      this.status = status;
      this.body = body;
    }
  }

  async function api(path, options) {
    const opts = options || {};
    const method = opts.method || "GET";
    const response = await fetch(ROOT + "/api" + path, {
      method: method,
      headers: headersFor(method),
      body: opts.body !== undefined ? JSON.stringify(opts.body) : undefined,
      cache: "no-store",
    });
    let data = null;
    try {
      data = await response.json();
    } catch (_) {
      data = null;
    }
    if (!response.ok) {
      if (response.status === 401) askForToken();
      throw new ApiError(response.status, data);
    }
    return data;
  }

  // Server-sent events over fetch, so a stream can be aborted like any request.
  async function stream(path, onEvent, signal) {
    const response = await fetch(ROOT + "/api" + path, {
      headers: { Accept: "text/event-stream" },
      cache: "no-store",
      signal: signal,
    });
    if (!response.ok || !response.body) throw new ApiError(response.status, null);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) return;
      buffer += decoder.decode(chunk.value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const message = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        let name = "message";
        const data = [];
        for (const line of message.split("\n")) {
          if (line.startsWith("event:")) name = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
        if (data.length) onEvent(name, JSON.parse(data.join("\n")));
      }
    }
  }

  // -- small helpers ----------------------------------------------------------------------
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") el.className = value;
      else if (key === "text") el.textContent = value;
      else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
      // through the CSSOM: the Content-Security-Policy allows no inline style attributes
      else if (key === "style") Object.assign(el.style, value);
      else el.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return el;
  }

  const $ = (id) => document.getElementById(id);
  const ms = (iso) => (iso ? new Date(iso).getTime() : null);
  const enc = encodeURIComponent;

  function duration(millis) {
    if (millis === null || millis === undefined || isNaN(millis)) return "";
    const s = millis / 1000;
    if (s < 1) return Math.max(0, Math.round(millis)) + " ms";
    if (s < 60) return s.toFixed(1) + " s";
    if (s < 3600) return Math.floor(s / 60) + " m " + Math.floor(s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " m";
  }

  function ago(iso) {
    const s = (Date.now() - ms(iso)) / 1000;
    if (s < 5) return "just now";
    if (s < 60) return Math.floor(s) + " s ago";
    if (s < 3600) return Math.floor(s / 60) + " min ago";
    if (s < 86400) return Math.floor(s / 3600) + " h ago";
    return new Date(iso).toLocaleDateString();
  }

  function when(iso) {
    return iso ? new Date(iso).toLocaleString() : "";
  }

  function runDuration(run) {
    const end = SETTLED.includes(run.status) ? ms(run.updated_at) : Date.now();
    return end - ms(run.created_at);
  }

  function badge(status) {
    return h("span", { class: "badge", "data-status": status, text: status });
  }

  function pretty(value) {
    return value === undefined ? "" : JSON.stringify(value, null, 2);
  }

  function notice(message, kind) {
    const el = $("notice");
    if (!el) return;
    el.textContent = message || "";
    el.className = "notice" + (kind ? " " + kind : "");
    el.hidden = !message;
    notice.kind = message ? kind : null;
    clearTimeout(notice.timer);
    if (message && kind === "ok") notice.timer = setTimeout(() => notice(""), 4000);
  }

  // What a page shows of a run id: a UUIDv7 starts with its time, which changes only every
  // minute or so, so its random end; any other id whole, or its start and end when long.
  // Keep in step with short_id in dashboard.py.
  const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
  function shortId(id) {
    if (UUID.test(id)) return id.slice(-8);
    if (id.length <= 16) return id;
    return id.slice(0, 6) + "…" + id.slice(-6);
  }

  async function copyText(text) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch (_) {
      // no clipboard API (a page over plain HTTP on another host): the old way
      const area = h("textarea", { class: "offscreen", readonly: true }, text);
      document.body.append(area);
      area.select();
      let done = false;
      try {
        done = document.execCommand("copy");
      } catch (_) {
        done = false;
      }
      area.remove();
      return done;
    }
  }

  // A small button that copies ``value()`` (or a fixed text) and says so.
  function copyButton(value, what) {
    const button = h("button", { type: "button", class: "copy", title: "Copy " + what, "aria-label": "Copy " + what, text: "Copy" });
    button.addEventListener("click", async (event) => {
      event.preventDefault();
      event.stopPropagation();
      const text = typeof value === "function" ? value() : value;
      const done = await copyText(text);
      button.textContent = done ? "Copied" : "Copy failed";
      button.classList.toggle("copied", done);
      clearTimeout(button.timer);
      button.timer = setTimeout(() => {
        button.textContent = "Copy";
        button.classList.remove("copied");
      }, 1500);
    });
    return button;
  }

  // -- approval forms, built from each gate's JSON Schema -------------------------------------
  function resolveRef(schema, node) {
    let current = node || {};
    for (let hops = 0; current && current.$ref && hops < 10; hops++) {
      const name = current.$ref.split("/").pop();
      current = ((schema && schema.$defs) || {})[name] || {};
    }
    if (current && current.anyOf) {
      const real = current.anyOf.filter((part) => part.type !== "null");
      if (real.length === 1) return Object.assign({}, resolveRef(schema, real[0]), { title: current.title, default: current.default });
    }
    return current || {};
  }

  function field(schema, name, spec, required) {
    const prop = resolveRef(schema, spec);
    const label = (prop.title || spec.title || name) + (required ? " *" : "");
    const id = "f-" + Math.random().toString(36).slice(2);
    if (prop.type === "boolean") {
      const input = h("input", { type: "checkbox", id: id, name: name, "data-kind": "boolean", checked: prop.default === true });
      return h("label", { class: "check", for: id }, input, label);
    }
    let input;
    if (Array.isArray(prop.enum)) {
      input = h("select", { id: id, name: name, "data-kind": "enum" }, required ? null : h("option", { value: "", text: "" }), prop.enum.map((v) => h("option", { value: JSON.stringify(v), text: String(v), selected: prop.default === v })));
    } else if (prop.type === "integer" || prop.type === "number") {
      input = h("input", { type: "number", id: id, name: name, "data-kind": "number", step: prop.type === "integer" ? "1" : "any", value: prop.default !== undefined ? String(prop.default) : null });
    } else if (prop.type === "string") {
      input = h("input", { type: "text", id: id, name: name, "data-kind": "string", value: prop.default !== undefined ? String(prop.default) : null });
    } else {
      input = h("textarea", { id: id, name: name, rows: "2", spellcheck: "false", "data-kind": "json" }, prop.default !== undefined ? JSON.stringify(prop.default) : "");
    }
    if (required) input.required = true;
    return h("label", { for: id }, label, input);
  }

  function formData(form, schema) {
    if (!schema || !schema.properties) {
      const text = form.querySelector("textarea[name='__data']").value.trim();
      return text ? JSON.parse(text) : null;
    }
    const data = {};
    const required = schema.required || [];
    for (const el of form.querySelectorAll("[data-kind]")) {
      const name = el.name;
      const kind = el.dataset.kind;
      if (kind === "boolean") data[name] = el.checked;
      else if (el.value === "" && !required.includes(name)) continue;
      else if (kind === "number") data[name] = Number(el.value);
      else if (kind === "string") data[name] = el.value;
      else if (kind === "enum") data[name] = JSON.parse(el.value);
      else data[name] = JSON.parse(el.value);
    }
    return data;
  }

  function approvalForm(gate, onDone) {
    const schema = gate.schema;
    const fields = schema && schema.properties
      ? Object.entries(schema.properties).map(([name, spec]) => field(schema, name, spec, (schema.required || []).includes(name)))
      : [h("label", {}, "Decision (JSON)", h("textarea", { name: "__data", rows: "3", spellcheck: "false" }, "null"))];
    const error = h("span", { class: "form-error" });
    const submit = h("button", { type: "submit", class: "primary", text: "Decide" });
    const who = Array.isArray(gate.approvers) ? gate.approvers.join(", ") : gate.approvers.replace("_", " ");
    const form = h(
      "form",
      { class: "approval", "data-run-id": gate.run_id, "data-gate": gate.name },
      h("div", { class: "approval-head" }, h("strong", { text: gate.name }), h("a", { class: "mono", href: ROOT + "/runs/" + enc(gate.run_id), title: gate.run_id, text: gate.workflow + " " + shortId(gate.run_id) }), h("span", { class: "muted", text: "approvers: " + who + (gate.expires_at ? " · expires " + when(gate.expires_at) : "") })),
      fields,
      h("div", { class: "form-actions" }, submit, error)
    );
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      error.textContent = "";
      let data;
      try {
        data = formData(form, schema);
      } catch (err) {
        error.textContent = "Not JSON: " + err.message;
        return;
      }
      submit.disabled = true;
      try {
        await api("/runs/" + enc(gate.run_id) + "/approvals/" + enc(gate.name), { method: "POST", body: data });
        notice("Decision recorded for " + gate.name + ".", "ok");
        onDone();
      } catch (err) {
        const problems = (err.body && err.body.error && err.body.error.problems) || [];
        error.textContent = err.message + problems.map((p) => " · " + (p.field || "data") + ": " + p.message).join("");
        submit.disabled = false;
      }
    });
    return form;
  }

  // Lists the open gates the signed-in user may decide (of one run, or of every run) and
  // keeps their forms; forms are rebuilt only when the set of gates changes, so nothing
  // typed is lost on a refresh.
  function approvalsPanel(runId) {
    let shown = null;
    async function refresh() {
      let gates;
      try {
        gates = (await api("/approvals")).approvals;
      } catch (_) {
        return;
      }
      if (runId) gates = gates.filter((g) => g.run_id === runId);
      const keys = gates.map((g) => g.run_id + "/" + g.key).join(",");
      if (keys === shown) return;
      shown = keys;
      $("approvals-card").hidden = !gates.length;
      $("approvals").replaceChildren(...gates.map((g) => approvalForm(g, refresh)));
    }
    return refresh;
  }

  function renderValues(values) {
    const entries = Object.entries(values || {});
    $("values-card").hidden = !entries.length;
    let progress = values ? values.progress : undefined;
    if (progress && typeof progress === "object" && progress.total) progress = progress.done / progress.total;
    const showBar = typeof progress === "number" && progress >= 0 && progress <= 1;
    $("progress-row").hidden = !showBar;
    if (showBar) {
      $("run-progress").value = progress;
      $("progress-text").textContent = Math.round(progress * 100) + "%";
    }
    $("values").replaceChildren(...entries.map(([k, v]) => h("div", {}, h("dt", { text: k }), h("dd", { class: "mono", text: JSON.stringify(v) }))));
  }

  function renderDecisions(decisions) {
    const list = decisions || [];
    $("decisions-card").hidden = !list.length;
    $("decisions").replaceChildren(
      ...list.map((d) =>
        h(
          "li",
          { "data-outcome": d.outcome },
          when(d.decided_at) + " · " + d.name + " · " + (d.decided_by || "anonymous") + " · ",
          badge(d.outcome),
          " ",
          h("span", { class: "mono", text: JSON.stringify(d.data) }),
          d.reason ? h("span", { class: "reason", text: " — " + (d.reason.message || "") }) : null
        )
      )
    );
  }

  // -- runs list --------------------------------------------------------------------------
  const RELATIVE = { "1h": 3600e3, "24h": 86400e3, "7d": 7 * 86400e3 };

  // "2026-05-01T09:30:00.000Z" as the value of a datetime-local input (local time)
  function localInput(iso) {
    const d = new Date(iso);
    if (isNaN(d.getTime())) return "";
    const pad = (n) => String(n).padStart(2, "0");
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + "T" + pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }

  function runsPage() {
    const PAGE = 25;
    const filters = $("filters");
    const workflowSelect = $("f-workflow");
    const statusSelect = $("f-status");
    const idField = $("f-id");
    const whenSelect = $("f-when");
    const sinceField = $("f-since");
    const untilField = $("f-until");
    const foldBox = $("f-fold");
    let offset = parseInt($("page-offset").value, 10) || 0;
    let total = 0;
    let inFlight = false;
    // the parents whose children are shown under them, kept across refreshes
    const unfolded = new Set();
    // a time range taken from the address as it was written (shown as the server reads it)
    const given = new URLSearchParams(location.search);
    let rawSince = given.get("since") || "";
    let rawUntil = given.get("until") || "";

    if (given.get("fold") === "0") foldBox.checked = false;
    if (RELATIVE[given.get("when")]) whenSelect.value = given.get("when");
    else if (rawSince || rawUntil) whenSelect.value = "range";
    sinceField.value = rawSince ? localInput(rawSince) : "";
    untilField.value = rawUntil ? localInput(rawUntil) : "";
    showRange();

    function showRange() {
      const range = whenSelect.value === "range";
      $("f-range").hidden = !range;
      $("f-range-to").hidden = !range;
    }

    function fromInput(field) {
      // a datetime-local value is local time; the API is given it with its zone
      if (!field.value) return "";
      const d = new Date(field.value);
      return isNaN(d.getTime()) ? field.value : d.toISOString();
    }

    // what the address keeps (so a link or a reload shows the same list)
    function query() {
      const params = new URLSearchParams();
      if (workflowSelect.value) params.set("workflow", workflowSelect.value);
      if (statusSelect.value) params.set("status", statusSelect.value);
      const id = idField.value.trim();
      if (id) params.set("id", id);
      if (RELATIVE[whenSelect.value]) params.set("when", whenSelect.value);
      if (whenSelect.value === "range") {
        if (rawSince) params.set("since", rawSince);
        if (rawUntil) params.set("until", rawUntil);
      }
      if (!foldBox.checked) params.set("fold", "0");
      if (offset) params.set("offset", String(offset));
      return params;
    }

    // what the API is asked
    function apiQuery() {
      const params = new URLSearchParams();
      if (workflowSelect.value) params.set("workflow", workflowSelect.value);
      if (statusSelect.value) params.set("status", statusSelect.value);
      const id = idField.value.trim();
      if (id) params.set("id", id);
      if (RELATIVE[whenSelect.value]) params.set("since", new Date(Date.now() - RELATIVE[whenSelect.value]).toISOString());
      if (whenSelect.value === "range") {
        if (rawSince) params.set("since", rawSince);
        if (rawUntil) params.set("until", rawUntil);
      }
      // a search by id finds a child run too
      if (folding()) params.set("top_level", "true");
      if (offset) params.set("offset", String(offset));
      params.set("limit", String(PAGE));
      return params;
    }

    function folding() {
      return foldBox.checked && !idField.value.trim();
    }

    function remember() {
      const q = query().toString();
      history.replaceState(null, "", location.pathname + (q ? "?" + q : ""));
    }

    async function loadWorkflows() {
      try {
        const data = await api("/workflows");
        const wanted = workflowSelect.dataset.selected;
        const start = $("start-workflow");
        for (const wf of data.workflows) {
          workflowSelect.append(h("option", { value: wf.name, text: wf.name }));
          start.append(h("option", { value: wf.name, text: wf.name + (wf.kind === "graph" ? " (graph)" : "") }));
        }
        if (wanted) {
          if (![...workflowSelect.options].some((o) => o.value === wanted)) {
            workflowSelect.append(h("option", { value: wanted, text: wanted }));
          }
          workflowSelect.value = wanted;
        }
      } catch (_) {
        /* the list below shows the error */
      }
    }

    function row(run, depth) {
      const href = ROOT + "/runs/" + enc(run.id);
      const open = unfolded.has(run.id);
      const toggle =
        folding() && run.children
          ? h("button", {
              type: "button",
              class: "fold",
              "aria-expanded": open ? "true" : "false",
              title: (open ? "Hide " : "Show ") + run.children + (run.children === 1 ? " child run" : " child runs"),
              text: (open ? "▾ " : "▸ ") + run.children,
              onclick: () => {
                if (unfolded.has(run.id)) unfolded.delete(run.id);
                else unfolded.add(run.id);
                load();
              },
            })
          : null;
      const parent =
        !folding() && run.parent_run_id
          ? h("span", { class: "parent-link" }, "child of ", h("a", { class: "mono", href: ROOT + "/runs/" + enc(run.parent_run_id), title: run.parent_run_id, text: shortId(run.parent_run_id) }))
          : null;
      return h(
        "tr",
        { "data-run-id": run.id, "data-status": run.status, "data-depth": depth ? String(depth) : null, class: depth ? "child-run" : null },
        h(
          "td",
          { class: "mono run-cell", "data-label": "Run" },
          h("span", { class: "run-id", style: depth ? { paddingLeft: Math.min(depth, 6) * 14 + "px" } : null }, depth ? h("span", { class: "branch", "aria-hidden": "true", text: "↳ " }) : null, h("a", { href: href, title: run.id, text: shortId(run.id) }), copyButton(run.id, "run id"), toggle),
          parent
        ),
        h("td", { "data-label": "Workflow" }, h("a", { href: href, text: run.workflow }), run.kind === "graph" ? h("span", { class: "tag", text: "graph" }) : null),
        h("td", { "data-label": "Status" }, badge(run.status)),
        h("td", { "data-label": "Started", title: when(run.created_at), text: ago(run.created_at) }),
        h("td", { class: "opt num", "data-label": "Duration", text: duration(runDuration(run)) }),
        h("td", { class: "opt", "data-label": "Owner", text: run.owner || "—" })
      );
    }

    // the rows of runs and, under each unfolded parent, its children (depth first)
    async function rowsOf(runs, depth) {
      const rows = [];
      for (const run of runs) {
        rows.push(row(run, depth));
        if (folding() && run.children && unfolded.has(run.id) && depth < 8) {
          try {
            const kids = await api("/runs?parent=" + enc(run.id) + "&limit=100");
            rows.push(...(await rowsOf(kids.runs, depth + 1)));
          } catch (err) {
            rows.push(h("tr", { class: "empty" }, h("td", { colspan: "6", text: err.message })));
          }
        }
      }
      return rows;
    }

    async function load() {
      if (inFlight) return;
      inFlight = true;
      try {
        const data = await api("/runs?" + apiQuery().toString());
        total = data.total;
        const rows = await rowsOf(data.runs, 0);
        const body = $("runs-body");
        body.replaceChildren(...rows);
        if (!data.runs.length) {
          body.append(h("tr", { class: "empty" }, h("td", { colspan: "6", text: "No runs match." })));
        }
        const first = data.runs.length ? offset + 1 : 0;
        $("page-info").textContent = first + "–" + (offset + data.runs.length) + " of " + total;
        $("page-prev").disabled = offset === 0;
        $("page-next").disabled = offset + PAGE >= total;
        if (notice.kind !== "ok") notice("");
        $("live").classList.remove("stale");
      } catch (err) {
        const problems = (err.body && err.body.error && err.body.error.problems) || [];
        notice(err.message + problems.map((p) => " · " + (p.field || "query") + ": " + p.message).join(""), "error");
        $("live").classList.add("stale");
        if (err.status === 422) {
          $("runs-body").replaceChildren(h("tr", { class: "empty" }, h("td", { colspan: "6", text: "Fix the filters above to see runs." })));
          $("page-info").textContent = "";
        }
      } finally {
        inFlight = false;
      }
    }

    function changed() {
      offset = 0;
      showRange();
      if (whenSelect.value === "range") {
        rawSince = fromInput(sinceField);
        rawUntil = fromInput(untilField);
        if (rawSince && rawUntil && rawSince > rawUntil) {
          notice("The start of the time range is after its end.", "error");
          return;
        }
      }
      remember();
      load();
    }

    filters.addEventListener("change", changed);
    filters.addEventListener("submit", (event) => {
      event.preventDefault();
      changed();
    });
    // searching as one types, once typing pauses
    let typing = null;
    idField.addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(changed, 300);
    });
    $("page-prev").addEventListener("click", () => {
      offset = Math.max(0, offset - PAGE);
      remember();
      load();
    });
    $("page-next").addEventListener("click", () => {
      offset += PAGE;
      remember();
      load();
    });
    $("start-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      $("start-error").textContent = "";
      let input;
      try {
        const text = $("start-input").value.trim();
        input = text ? JSON.parse(text) : null;
      } catch (err) {
        $("start-error").textContent = "Input is not JSON: " + err.message;
        return;
      }
      try {
        const name = $("start-workflow").value;
        const data = await api("/workflows/" + enc(name) + "/runs", { method: "POST", body: { input: input } });
        location.href = ROOT + "/runs/" + enc(data.run_id);
      } catch (err) {
        $("start-error").textContent = err.message;
      }
    });

    const approvals = approvalsPanel(null);
    loadWorkflows().then(load);
    approvals();
    setInterval(() => {
      if (!document.hidden) {
        load();
        approvals();
      }
    }, 2000);
  }

  // -- one run ----------------------------------------------------------------------------
  function runPage() {
    const runId = $("run").dataset.runId;
    const path = "/runs/" + enc(runId);
    let run = null;
    let attempts = [];
    let following = null; // AbortController of the open stream
    let extrasTimer = null;
    const openSteps = new Set();
    const approvals = approvalsPanel(runId);
    // made once, so a refresh of the page's data keeps what they show ("Copied")
    const copyId = copyButton(runId, "run id");
    const copyOutput = copyButton(() => pretty(run && run.output), "output");
    $("output-tools").append(copyOutput);
    let childrenSeen = null;

    function shortLink(id) {
      return h("a", { class: "mono", href: "./" + enc(id), title: id, text: shortId(id) });
    }

    // The run's children, and theirs, as a tree (each level as the runs list gives it:
    // only runs the signed-in user may see).
    async function childTree(parentId, depth) {
      const data = await api("/runs?parent=" + enc(parentId) + "&limit=100");
      const items = [];
      for (const c of data.runs.slice().reverse()) {
        const below = c.children && depth < 5 ? await childTree(c.id, depth + 1) : null;
        items.push(
          h(
            "li",
            { "data-run-id": c.id },
            h("span", { class: "tree-row" }, shortLink(c.id), h("span", { text: c.workflow }), badge(c.status)),
            below && below.length ? h("ul", { class: "tree" }, below) : null
          )
        );
      }
      if (data.total > data.runs.length) items.push(h("li", { class: "muted", text: "… and " + (data.total - data.runs.length) + " more" }));
      return items;
    }

    async function renderChildren(data) {
      const children = data.children || [];
      const seen = children.map((c) => c.id + ":" + c.status).join(",");
      if (seen === childrenSeen) return;
      childrenSeen = seen;
      $("children-card").hidden = !children.length;
      if (!children.length) return;
      try {
        $("children").replaceChildren(...(await childTree(runId, 0)));
      } catch (err) {
        childrenSeen = null;
        $("children").replaceChildren(h("li", { class: "form-error", text: err.message }));
      }
    }

    function renderEventForm(data) {
      const open = ["running", "suspended", "queued"].includes(data.status);
      $("event-send").disabled = !open;
      $("event-send").title = open ? "" : "A " + data.status + " run takes no events";
      const waits = [];
      for (const st of data.steps || []) {
        if (st.kind === "event" && st.status === "scheduled" && st.input && typeof st.input.event === "string") waits.push(st.input.event);
      }
      const list = $("event-names");
      if (list.dataset.seen !== waits.join("\n")) {
        list.dataset.seen = waits.join("\n");
        list.replaceChildren(...waits.map((name) => h("option", { value: name })));
        if (waits.length && !$("event-name").value) $("event-name").value = waits[0];
      }
      $("event-waits").textContent = waits.length ? "The run waits for: " + waits.join(", ") : "";
    }

    function renderRun(data) {
      run = data;
      document.title = data.workflow + " " + shortId(data.id) + " · plait";
      $("run-workflow").textContent = data.workflow;
      const status = $("run-status");
      status.textContent = data.status;
      status.dataset.status = data.status;
      $("btn-cancel").disabled = !["running", "suspended"].includes(data.status);
      $("btn-resume").disabled = data.status !== "suspended";
      $("btn-retry").disabled = data.status !== "failed";

      const meta = [
        ["Run id", h("span", { class: "id-line" }, h("span", { class: "mono", title: data.id, text: data.id }), copyId)],
        ["Kind", data.kind === "graph" ? "graph workflow" : "code workflow"],
        ["Owner", data.owner || "—"],
        ["Started", h("span", { title: data.created_at, text: when(data.created_at) })],
        ["Duration", duration(runDuration(data)) + (SETTLED.includes(data.status) ? "" : " so far")],
        ["Version", h("span", { class: "mono", text: data.version || "—" })],
      ];
      if (data.parent_run_id) {
        meta.push(["Parent", shortLink(data.parent_run_id)]);
        const crumb = $("crumb-parent");
        if (crumb.hidden) {
          crumb.hidden = false;
          crumb.replaceChildren(shortLink(data.parent_run_id), h("span", { "aria-hidden": "true", text: " / " }));
        }
      }
      $("run-meta").replaceChildren(...meta.map(([k, v]) => h("div", {}, h("dt", { text: k }), h("dd", {}, v))));

      $("run-input").textContent = pretty(data.input);
      $("run-output").textContent = data.status === "completed" ? pretty(data.output) : "—";
      copyOutput.disabled = data.status !== "completed";
      const err = data.error;
      const showError = err && data.status !== "completed";
      $("error-card").hidden = !showError;
      if (showError) {
        $("error-card").dataset.kind = data.status;
        $("run-error-message").textContent = (err.type ? err.type + ": " : "") + (err.message || "");
        $("run-error").textContent = err.traceback || pretty(err);
      }
      renderValues(data.values);
      renderDecisions(data.decisions);
      if (data.forked_from) {
        meta.push(["Forked from", shortLink(data.forked_from)]);
        $("run-meta").replaceChildren(...meta.map(([k, v]) => h("div", {}, h("dt", { text: k }), h("dd", {}, v))));
      }
      // the gates may have changed only when the run did
      const seen = data.status + "|" + data.updated_at + "|" + (data.steps || []).map((st) => st.status).join("") + "|" + (data.decisions || []).length;
      if (seen !== renderRun.seen) {
        renderRun.seen = seen;
        approvals();
      }
      renderChildren(data);
      renderEventForm(data);
      renderSteps();
    }

    function attemptsOf(key) {
      return attempts.filter((a) => a.key === key);
    }

    function stepSpan(step) {
      const mine = attemptsOf(step.key);
      const done = step.status === "succeeded" || step.status === "failed";
      if (mine.length) {
        const start = Math.min(...mine.map((a) => ms(a.started_at)));
        const ends = mine.map((a) => ms(a.finished_at));
        const end = done && ends.every((e) => e !== null) ? Math.max(...ends) : null;
        return [start, end];
      }
      return [ms(step.created_at), done ? ms(step.updated_at) : null];
    }

    function renderSteps() {
      if (!run) return;
      const steps = run.steps || [];
      $("steps-count").textContent = steps.length + (steps.length === 1 ? " step" : " steps");
      const container = $("steps");
      for (const d of container.querySelectorAll("details[open]")) openSteps.add(d.dataset.key);
      for (const d of container.querySelectorAll("details:not([open])")) openSteps.delete(d.dataset.key);
      if (!steps.length) {
        container.replaceChildren(h("p", { class: "muted", text: "No steps recorded yet." }));
        return;
      }
      const t0 = ms(run.created_at);
      let t1 = SETTLED.includes(run.status) ? ms(run.updated_at) : Date.now();
      for (const a of attempts) t1 = Math.max(t1, ms(a.finished_at) || 0);
      const span = Math.max(1, t1 - t0);
      const pct = (t) => (Math.min(Math.max(t - t0, 0), span) / span) * 100;

      const rows = steps.map((step) => {
        const [start, end] = stepSpan(step);
        const now = Date.now();
        const mine = attemptsOf(step.key);
        const bars = mine.length
          ? mine.map((a) => {
              const s = ms(a.started_at);
              const e = ms(a.finished_at) || Math.min(now, t1);
              return h("span", {
                class: "seg s-" + a.status,
                style: { left: pct(s).toFixed(2) + "%", width: "max(3px," + (pct(e) - pct(s)).toFixed(2) + "%)" },
                title: "attempt " + a.attempt + ": " + a.status + " " + duration(e - s),
              });
            })
          : [
              h("span", {
                class: "seg " + (end && !WAITING_KINDS.includes(step.kind) ? "s-" + step.status : "s-wait"),
                style: { left: pct(start).toFixed(2) + "%", width: "max(3px," + (pct(end || Math.min(now, t1)) - pct(start)).toFixed(2) + "%)" },
                title: step.kind + ": " + step.status,
              }),
            ];
        const state = { pending: "waiting", scheduled: "waiting" }[step.status] || step.status;
        const label = step.name.startsWith("__") ? step.name.slice(2).replace(":", ": ") : step.name;
        const kindText = step.kind === "do" || step.kind === "node" ? step.function || step.kind : step.kind;
        const summary = h(
          "summary",
          {},
          h("span", { class: "step-name" }, h("span", { class: "dot s-" + state }), h("span", { class: "name", text: label }), h("span", { class: "kind", text: kindText })),
          h("span", { class: "step-status" }, badge(step.status)),
          h("span", { class: "step-attempts num", text: step.attempts ? step.attempts + "×" : "", title: "attempts" }),
          h("span", { class: "step-duration num", text: end ? duration(end - start) : "" }),
          h("span", { class: "track" }, bars)
        );
        const body = h("div", { class: "step-body" });
        const facts = [["Key", step.key], ["Invocation", step.invocation_id]];
        if (step.function) facts.push(["Function", step.function]);
        if (step.retries) facts.push(["Retries", String(step.retries)]);
        body.append(h("dl", { class: "facts" }, facts.map(([k, v]) => h("div", {}, h("dt", { text: k }), h("dd", { class: "mono", text: v })))));
        if (step.child_run_id) {
          body.append(h("p", {}, "Child run ", h("a", { class: "mono", href: "./" + enc(step.child_run_id), text: step.child_run_id })));
        }
        if (mine.length) {
          body.append(
            h(
              "ol",
              { class: "attempts" },
              mine.map((a) =>
                h(
                  "li",
                  {},
                  badge(a.status),
                  " attempt " + a.attempt + " · " + when(a.started_at) + (a.finished_at ? " · " + duration(ms(a.finished_at) - ms(a.started_at)) : ""),
                  a.error ? h("div", { class: "attempt-error", text: (a.error.type ? a.error.type + ": " : "") + (a.error.message || "") }) : null
                )
              )
            )
          );
        }
        body.append(h("div", { class: "io" }, h("div", {}, h("h3", { text: "Input" }), h("pre", { text: pretty(step.input) })), h("div", {}, h("h3", { text: step.error ? "Error" : "Output" }), h("pre", { text: step.error ? pretty(step.error.message || step.error) : pretty(step.output) }))));
        if (run.kind !== "graph") {
          body.append(h("div", { class: "step-tools" }, h("button", { type: "button", class: "rerun", "data-key": step.key, disabled: run.status === "running", title: "A new run that keeps the steps before this one and runs this one and the rest again", onclick: () => rerunFrom(step.key) }, "Rerun from this step")));
        }
        const details = h("details", { class: "step", id: "step-" + enc(step.key), "data-key": step.key, "data-status": step.status, open: openSteps.has(step.key) }, summary, body);
        return details;
      });
      container.replaceChildren(
        h("div", { class: "step-header" }, h("span", { text: "Step" }), h("span", { text: "Status" }), h("span", { class: "num", text: "Tries" }), h("span", { class: "num", text: "Time" }), h("span", { text: "Timeline" })),
        ...rows
      );
    }

    async function loadExtras() {
      try {
        const [history, graph] = await Promise.all([api(path + "/history"), api(path + "/graph")]);
        attempts = history.attempts;
        $("graph").innerHTML = graph.svg; // built and escaped by the server
        $("graph").dataset.kind = graph.kind;
        renderSteps();
      } catch (err) {
        notice(err.message, "error");
      }
    }

    // History and drawing are refetched after changes, at most once per interval that
    // grows with the run: a run of many steps changes often, and each fetch is larger.
    let extrasAt = 0;
    function scheduleExtras() {
      if (extrasTimer) return;
      const steps = run && run.steps ? run.steps.length : 0;
      const gap = Math.min(5000, 250 + 10 * steps);
      const wait = Math.max(120, extrasAt + gap - Date.now());
      extrasTimer = setTimeout(() => {
        extrasTimer = null;
        extrasAt = Date.now();
        loadExtras();
      }, wait);
    }

    async function load() {
      try {
        renderRun(await api(path));
        await loadExtras();
        return true;
      } catch (err) {
        notice(err.status === 403 ? "This run belongs to another user." : err.message, "error");
        $("run-status").textContent = err.status === 404 ? "not found" : "error";
        return false;
      }
    }

    function follow() {
      if (following || !run || SETTLED.includes(run.status)) return;
      following = new AbortController();
      stream(
        path + "/stream",
        (name, data) => {
          if (name === "run") {
            renderRun(data);
            scheduleExtras();
          }
        },
        following.signal
      )
        .catch(() => null)
        .finally(() => {
          // (a notice of what the user did stays its few seconds: the run may end
          // before they have read that their action was taken)
          following = null;
          load();
        });
    }

    async function rerunFrom(key) {
      try {
        const made = await api(path + "/fork", { method: "POST", body: { from_step: key } });
        location.href = ROOT + "/runs/" + enc(made.run_id);
      } catch (err) {
        notice(err.message, "error");
      }
    }

    async function act(action) {
      const button = $("btn-" + action);
      button.disabled = true;
      try {
        renderRun(Object.assign({}, run, await api(path + "/" + action, { method: "POST" }), { steps: run.steps, children: run.children }));
        notice({ cancel: "Run cancelled.", resume: "Run resumed.", retry: "Retrying from the failed step…" }[action], "ok");
        await load();
        follow();
      } catch (err) {
        notice(err.message, "error");
        button.disabled = false;
      }
    }

    for (const action of ["cancel", "resume", "retry"]) {
      $("btn-" + action).addEventListener("click", () => act(action));
    }

    // An event name as the API takes it: 1 to 200 characters, no "/" and no control ones.
    const EVENT_NAME = /^[^\u0000-\u001f\u007f/]{1,200}$/;
    $("event-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      const error = $("event-error");
      error.textContent = "";
      const name = $("event-name").value.trim();
      if (!EVENT_NAME.test(name)) {
        error.textContent = name ? "An event name has no \"/\" and no control characters (at most 200 characters)." : "Name the event.";
        return;
      }
      let payload;
      try {
        const text = $("event-payload").value.trim();
        payload = text ? JSON.parse(text) : null;
      } catch (err) {
        error.textContent = "The payload is not JSON: " + err.message;
        return;
      }
      const button = $("event-send");
      button.disabled = true;
      try {
        const sent = await api(path + "/events/" + enc(name), { method: "POST", body: payload });
        notice(sent.waiting ? "Event " + name + " sent: the run was waiting for it." : "Event " + name + " sent: it is held until the run waits for it.", "ok");
        await load();
        follow();
      } catch (err) {
        const problems = (err.body && err.body.error && err.body.error.problems) || [];
        error.textContent = (err.status === 403 ? "You may not send events to this run." : err.message) + problems.map((p) => " · " + (p.field || "body") + ": " + p.message).join("");
      } finally {
        if (run) renderEventForm(run);
      }
    });

    // A slow check catches changes that no open stream reports: another client resuming
    // or retrying this run, or a stream that broke.
    let lastSeen = null;
    setInterval(async () => {
      if (document.hidden || following || !run) return;
      try {
        const fresh = await api(path);
        if (fresh.updated_at !== lastSeen || fresh.status !== run.status) {
          lastSeen = fresh.updated_at;
          renderRun(fresh);
          scheduleExtras();
        }
        follow();
      } catch (_) {
        /* keep the last view */
      }
    }, 3000);
    // Durations of a live run keep ticking between events.
    setInterval(() => {
      if (run && !SETTLED.includes(run.status) && !document.hidden) renderRun(run);
    }, 1000);

    load().then((ok) => {
      if (ok) {
        lastSeen = run.updated_at;
        follow();
      }
    });
  }

  document.getElementById("signin-form").addEventListener("submit", signIn);
  document.getElementById("signout").addEventListener("click", signOut);
  const signedIn = whoAmI();
  // the helpers other page scripts (schedules.js) build on; they start once signedIn
  // resolves to who is signed in (null: nobody, and the page asks for a token)
  window.plaitDashboard = { api, h, badge, when, notice, $, signedIn };
  signedIn.then((me) => {
    if (!me) return;
    if (document.body.dataset.page === "runs") runsPage();
    if (document.body.dataset.page === "run") runPage();
  });
})();
