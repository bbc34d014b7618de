// The depth of each queue: how many runs wait in it and run from it, its limits (as
// stored in the database, and where they came from), what it spent in its budgets'
// windows and why its runs wait; then a row per key with live runs or spend.

import { h } from "./dom.js";

function spentText(spent) {
  return Object.keys(spent || {}).sort().map((unit) => unit + " " + spent[unit]).join(", ");
}

function limitsText(q) {
  if (!q.limits) return "none";
  const parts = ["concurrency", "per_key", "rate"].filter((k) => q.limits[k] !== null)
    .map((k) => k + " " + q.limits[k]);
  for (const [unit, amount] of Object.entries(q.limits.budget || {})) {
    parts.push("budget " + unit + " " + amount + (q.limits.budget_per_key ? " per key" : ""));
  }
  const from = q.source === "stored" ? " (stored by app " + q.stored_by + ")" : "";
  return (parts.join(", ") || "none") + from;
}

export function queueRow(q) {
  return h("tr", { "data-queue": q.queue === null ? "" : q.queue },
    h("td", { text: q.queue === null ? "(delayed, no queue)" : q.queue }),
    h("td", { text: String(q.queued) }),
    h("td", { text: String(q.active) }),
    h("td", { text: limitsText(q) }),
    h("td", { text: spentText(q.spent) }),
    h("td", { text: q.waiting || "" }));
}

export function keyRows(q) {
  return (q.keys || []).map((k) => h("tr", { "data-queue": q.queue, "data-key": k.key, class: "key" },
    h("td", { text: "  key " + k.key }),
    h("td", { text: String(k.queued) }),
    h("td", { text: String(k.active) }),
    h("td", { text: "" }),
    h("td", { text: spentText(k.spent) }),
    h("td", { text: k.waiting || "" })));
}
