// The depth of each queue: how many runs wait in it and run from it, and its limits.

import { h } from "./dom.js";

export function queueRow(q) {
  const limits = q.limits
    ? ["concurrency", "per_key", "rate"].filter((k) => q.limits[k] !== null)
        .map((k) => k + " " + q.limits[k]).join(", ") || "none"
    : "none declared here";
  return h("tr", { "data-queue": q.queue === null ? "" : q.queue },
    h("td", { text: q.queue === null ? "(delayed, no queue)" : q.queue }),
    h("td", { text: String(q.queued) }),
    h("td", { text: String(q.active) }),
    h("td", { text: limits }));
}
