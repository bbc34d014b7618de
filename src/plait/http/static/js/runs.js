// The runs list: filters kept in the address, paging, child runs folded under their
// parents, what each live run waits on, how many runs match in each status, bulk actions
// on the filtered set, starting a run, and the approvals waiting for the signed-in user.

import { ROOT, api } from "./api.js";
import { approvalsPanel } from "./approvals.js";
import { bulkActions } from "./bulk.js";
import { pausedBanner } from "./paused.js";
import { waitingCell } from "./waiting.js";
import { h, $, badge, notice, copyButton } from "./dom.js";
import { enc, duration, ago, when, runDuration, shortId } from "./format.js";

const RELATIVE = { "1h": 3600e3, "24h": 86400e3, "7d": 7 * 86400e3 };

// "2026-05-01T09:30:00.000Z" as the value of a datetime-local input (local time)
function localInput(iso) {
  const d = new Date(iso);
  if (isNaN(d.getTime())) return "";
  const pad = (n) => String(n).padStart(2, "0");
  return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + "T" + pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
}

export function runsPage() {
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
  // the tags the list is filtered by ("key:value"): a run's chip adds one, an active
  // one's × takes it off
  const tagFilters = new Set(given.getAll("tag"));
  const tagBar = h("div", { id: "f-tags", class: "chips" });
  filters.after(tagBar);

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
    for (const tag of tagFilters) params.append("tag", tag);
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
    for (const tag of tagFilters) params.append("tag", tag);
    if (offset) params.set("offset", String(offset));
    params.set("limit", String(PAGE));
    params.set("counts", "true");
    return params;
  }

  // the list's filters as POST /api/runs/bulk takes them, and said in words
  function bulkFilter() {
    const filter = {};
    const said = [];
    if (workflowSelect.value) {
      filter.workflow = workflowSelect.value;
      said.push("workflow " + workflowSelect.value);
    }
    if (statusSelect.value) {
      filter.status = statusSelect.value;
      said.push("status " + statusSelect.value);
    }
    const asked = apiQuery();
    if (asked.get("since")) {
      filter.since = asked.get("since");
      said.push("started since " + when(filter.since));
    }
    if (asked.get("until")) {
      filter.until = asked.get("until");
      said.push("started before " + when(filter.until));
    }
    if (tagFilters.size) {
      filter.tags = {};
      for (const tag of tagFilters) {
        const cut = tag.indexOf(":");
        filter.tags[tag.slice(0, cut)] = tag.slice(cut + 1);
      }
      said.push("tags " + [...tagFilters].join(", "));
    }
    let text = said.length ? said.join(", ") : "any run";
    if (folding()) text += " (child runs included)";
    const blocked = idField.value.trim() ? "Bulk actions take no run id search: clear it to act on the list." : null;
    return { filter: filter, text: text, blocked: blocked };
  }

  function folding() {
    return foldBox.checked && !idField.value.trim() && !tagFilters.size;
  }

  function filterByTag(tag, on) {
    if (on) tagFilters.add(tag);
    else tagFilters.delete(tag);
    offset = 0;
    showTags();
    remember();
    load();
  }

  function showTags() {
    tagBar.replaceChildren(
      ...[...tagFilters].map((tag) =>
        h("span", { class: "chip active", "data-tag": tag }, tag, h("button", { type: "button", class: "chip-off", title: "Stop filtering by " + tag, "aria-label": "Stop filtering by " + tag, text: "×", onclick: () => filterByTag(tag, false) }))
      )
    );
  }
  showTags();

  function chips(run) {
    const tags = Object.entries(run.tags || {}).sort();
    if (!tags.length) return null;
    return h(
      "span",
      { class: "chips" },
      ...tags.map(([k, v]) => h("button", { type: "button", class: "chip", "data-tag": k + ":" + v, title: "Show only runs with this tag", text: k + ":" + v, onclick: () => filterByTag(k + ":" + v, true) }))
    );
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
      h("td", { "data-label": "Workflow" }, h("a", { href: href, text: run.workflow }), run.kind === "graph" ? h("span", { class: "tag", text: "graph" }) : null, chips(run)),
      h("td", { "data-label": "Status" }, badge(run.status)),
      waitingCell(run),
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
          rows.push(h("tr", { class: "empty" }, h("td", { colspan: "7", text: err.message })));
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
        body.append(h("tr", { class: "empty" }, h("td", { colspan: "7", text: "No runs match." })));
      }
      showCounts(data.counts || {});
      shown = data.runs;
      banner();
      refreshBulk();
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
        $("runs-body").replaceChildren(h("tr", { class: "empty" }, h("td", { colspan: "7", text: "Fix the filters above to see runs." })));
        $("page-info").textContent = "";
      }
    } finally {
      inFlight = false;
    }
  }

  // how many runs match in each status (the status filter aside): one button each, which
  // filters by it
  function showCounts(counts) {
    const all = Object.values(counts).reduce((a, b) => a + b, 0);
    const chip = (status, n, label) =>
      h(
        "button",
        { type: "button", class: "count" + (statusSelect.value === status ? " active" : ""), "data-status": status, "aria-pressed": statusSelect.value === status ? "true" : "false", title: status ? "Show only " + status + " runs" : "Show runs of any status", onclick: () => {
          statusSelect.value = status;
          changed();
        } },
        h("span", { class: "count-label", text: label }),
        h("span", { class: "num", text: String(n) })
      );
    $("status-counts").replaceChildren(
      chip("", all, "all"),
      ...[...statusSelect.options].filter((o) => o.value && counts[o.value]).map((o) => chip(o.value, counts[o.value], o.value))
    );
  }

  // the runs on the page (what the paused banner looks at)
  let shown = [];
  const banner = pausedBanner(() => ({
    workflow: workflowSelect.value,
    workflows: new Set(shown.map((r) => r.workflow)),
    queues: new Set(shown.map((r) => r.queue || "default")), // no queue: the default one
  }));
  const refreshBulk = bulkActions(bulkFilter, () => load());

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
