// The schedules page: every schedule with its next tick and last run (pause, resume,
// trigger), and the depth of every queue. Uses the helpers dashboard.js exposes.
(function () {
  "use strict";
  const d = window.plaitDashboard;
  if (!d || document.body.dataset.page !== "schedules") return;
  const { api, h, badge, when, notice, $ } = d;
  const ROOT = document.body.dataset.root || "";
  const enc = encodeURIComponent;

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

  function queueRow(q) {
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

  async function load() {
    try {
      const [schedules, queues] = await Promise.all([api("/schedules"), api("/queues")]);
      const body = $("schedules-body");
      body.replaceChildren(...(schedules.schedules.length
        ? schedules.schedules.map(row)
        : [h("tr", { class: "empty" }, h("td", { colspan: "7", text: "No schedules." }))]));
      const qbody = $("queues-body");
      qbody.replaceChildren(...(queues.queues.length
        ? queues.queues.map(queueRow)
        : [h("tr", { class: "empty" }, h("td", { colspan: "4", text: "No queued work." }))]));
    } catch (err) {
      if (err.status !== 401) notice(err.message, "error");
    }
  }

  d.signedIn.then((me) => {
    if (!me) return;
    load();
    setInterval(() => { if (!document.hidden) load(); }, 2000);
  });
})();
