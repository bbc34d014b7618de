// The schedules page: every schedule with its next tick and last run (pause, resume,
// trigger), and the depth of every queue.

import { ROOT, api } from "./api.js";
import { h, $, badge, notice } from "./dom.js";
import { enc, when } from "./format.js";
import { keyRows, queueRow } from "./queues.js";

function whenText(s) {
  const base = s.cron ? s.cron : "every " + s.every + " s";
  return s.timezone && s.timezone !== "UTC" ? base + " (" + s.timezone + ")" : base;
}

async function act(name, action) {
  try {
    const answer = await api("/schedules/" + enc(name) + "/" + action, { method: "POST", body: {} });
    if (action === "trigger") notice("started run " + answer.run_id, "ok");
    await load();
  } catch (err) {
    notice(err.message, "error");
  }
}

function row(s) {
  const last = s.last_run_id
    ? h("span", {}, h("a", { href: ROOT + "/runs/" + enc(s.last_run_id), text: s.last_run_id }), " ",
        s.last_run_status ? badge(s.last_run_status) : "")
    : "–";
  const toggle = s.status === "paused"
    ? h("button", { type: "button", onclick: () => act(s.name, "resume"), text: "Resume" })
    : h("button", { type: "button", onclick: () => act(s.name, "pause"), text: "Pause" });
  return h("tr", { "data-schedule": s.name },
    h("td", { text: s.name }),
    h("td", { text: s.workflow }),
    h("td", { text: whenText(s) }),
    h("td", {}, badge(s.status)),
    h("td", { text: s.next_tick ? when(s.next_tick) : "–" }),
    h("td", {}, last),
    h("td", {}, toggle, " ",
      h("button", { type: "button", onclick: () => act(s.name, "trigger"), text: "Trigger" })));
}

async function load() {
  try {
    const [schedules, queues] = await Promise.all([api("/schedules"), api("/queues")]);
    const body = $("schedules-body");
    body.replaceChildren(...(schedules.schedules.length
      ? schedules.schedules.map(row)
      : [h("tr", { class: "empty" }, h("td", { colspan: "7", text: "No schedules." }))]));
    const qbody = $("queues-body");
    qbody.replaceChildren(...(queues.queues.length
      ? queues.queues.flatMap((q) => [queueRow(q), ...keyRows(q)])
      : [h("tr", { class: "empty" }, h("td", { colspan: "6", text: "No queued work." }))]));
  } catch (err) {
    if (err.status !== 401) notice(err.message, "error");
  }
}

export function schedulesPage() {
  load();
  setInterval(() => { if (!document.hidden) load(); }, 2000);
}
