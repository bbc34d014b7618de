// One run: its state, values, decisions, children and steps, followed live while it
// runs; cancel, resume, retry, rerun from a step and sending it an event.

import { ROOT, api } from "./api.js";
import { approvalsPanel } from "./approvals.js";
import { h, $, badge, notice, copyButton } from "./dom.js";
import { SETTLED, ms, enc, duration, when, runDuration, pretty, shortId } from "./format.js";
import { stream } from "./live.js";
import { renderSteps } from "./steps.js";
import { streamsPanel } from "./streams.js";
import { waitingText } from "./waiting.js";

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

// The run's queue and how long it waited there: from its start (or its start time, if
// later) to its admission, or so far while it is queued. Two entries of the run's facts.
function queueFacts(data) {
  if (!data.queue && !data.admitted_at && data.status !== "queued") return [];
  const facts = [["Queue", h("span", { class: "mono", text: data.queue || "default" })]];
  const from = Math.max(ms(data.created_at), ms(data.start_at) || 0);
  if (data.admitted_at) {
    facts.push(["Queue wait", h("span", { title: "admitted " + when(data.admitted_at), text: duration(Math.max(0, ms(data.admitted_at) - from)) })]);
  } else if (data.status === "queued") {
    const later = data.start_at && ms(data.start_at) > Date.now();
    facts.push(["Queue wait", later ? "starts at " + when(data.start_at) : duration(Date.now() - from) + " so far"]);
  }
  return facts;
}

export function runPage() {
  const runId = $("run").dataset.runId;
  const path = "/runs/" + enc(runId);
  let run = null;
  let attempts = [];
  let following = null; // AbortController of the open stream
  let extrasTimer = null;
  const openSteps = new Set();
  const approvals = approvalsPanel(runId);
  const streams = streamsPanel(path);
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
    const open = ["running", "suspended", "queued", "needs_attention"].includes(data.status);
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
    $("btn-cancel").disabled = !["running", "suspended", "needs_attention"].includes(data.status);
    $("btn-resume").disabled = data.status !== "suspended";
    $("btn-retry").disabled = !["failed", "needs_attention"].includes(data.status);

    const meta = [
      ["Run id", h("span", { class: "id-line" }, h("span", { class: "mono", title: data.id, text: data.id }), copyId)],
      ["Kind", data.kind === "graph" ? "graph workflow" : "code workflow"],
      ["Owner", data.owner || "—"],
      ["Started", h("span", { title: data.created_at, text: when(data.created_at) })],
      ["Duration", duration(runDuration(data)) + (SETTLED.includes(data.status) ? "" : " so far")],
      ["Version", h("span", { class: "mono", text: data.version || "—" })],
    ];
    meta.push(...queueFacts(data));
    // what the live run waits on, said as in the runs list (the API's sentence as title)
    if (data.waiting_on) meta.push(["Waiting on", h("span", { class: "wait wait-" + data.waiting_on.kind, id: "run-waiting", "data-waiting": data.waiting_on.kind, title: data.waiting_on.message, text: waitingText(data.waiting_on) })]);
    if (data.deadline_at) {
      // a live run: the time it has left before it fails RUN_TIMEOUT
      const left = Date.parse(data.deadline_at) - Date.now();
      const ended = ["completed", "failed", "cancelled"].includes(data.status);
      const note = ended ? "" : left > 0 ? " (" + duration(left) + " left)" : " (passed)";
      meta.push(["Deadline", h("span", { title: data.deadline_at, text: when(data.deadline_at) + note })]);
    }
    if (data.parent_run_id) {
      meta.push(["Parent", shortLink(data.parent_run_id)]);
      const crumb = $("crumb-parent");
      if (crumb.hidden) {
        crumb.hidden = false;
        crumb.replaceChildren(shortLink(data.parent_run_id), h("span", { "aria-hidden": "true", text: " / " }));
      }
    }
    // a chain of runs continued as new (wf.continue_as_new): the run before and after
    if (data.continued_from) meta.push(["Continued from", shortLink(data.continued_from)]);
    if (data.continued_to) meta.push(["Continued as new in", shortLink(data.continued_to)]);
    // each tag links to the runs list filtered by it
    const tags = Object.entries(data.tags || {}).sort();
    if (tags.length) meta.push(["Tags", h("span", { class: "chips" }, ...tags.map(([k, v]) => h("a", { class: "chip", href: ROOT + "/?tag=" + encodeURIComponent(k + ":" + v), title: "Runs with this tag", text: k + ":" + v })))]);
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
    streams(data.streams);
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
    renderSteps(run, attempts, openSteps, rerunFrom);
  }

  async function loadExtras() {
    try {
      const [history, graph] = await Promise.all([api(path + "/history"), api(path + "/graph")]);
      attempts = history.attempts;
      $("graph").innerHTML = graph.svg; // built and escaped by the server
      $("graph").dataset.kind = graph.kind;
      renderSteps(run, attempts, openSteps, rerunFrom);
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

  // A partial "run" event carries only what changed: merge it into the run shown.
  function withChanges(current, change) {
    if (!current) return change;
    const next = Object.assign({}, current, change);
    delete next.partial;
    delete next.removed_steps;
    if (change.steps || change.removed_steps) {
      const byKey = new Map((current.steps || []).map((s) => [s.key, s]));
      for (const s of change.steps || []) byKey.set(s.key, s);
      for (const key of change.removed_steps || []) byKey.delete(key);
      next.steps = Array.from(byKey.values());
    }
    return next;
  }

  function follow() {
    if (following || !run || SETTLED.includes(run.status)) return;
    following = new AbortController();
    stream(
      path + "/stream",
      (name, data) => {
        if (name === "run") {
          renderRun(data.partial ? withChanges(run, data) : data);
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
