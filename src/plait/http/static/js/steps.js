// A run's steps: one row each with its status, tries and time, the attempts drawn on a
// timeline from the run's start, and its details (input, output, errors, the worker of
// each attempt) folded below.

import { h, $, badge } from "./dom.js";
import { SETTLED, ms, enc, duration, when, pretty } from "./format.js";

// steps that wait rather than work: drawn hatched on the timeline
const WAITING_KINDS = ["sleep", "suspend", "event"];

function attemptsOf(attempts, key) {
  return attempts.filter((a) => a.key === key);
}

function stepSpan(attempts, step) {
  const mine = attemptsOf(attempts, step.key);
  const done = step.status === "succeeded" || step.status === "failed";
  if (mine.length) {
    const start = Math.min(...mine.map((a) => ms(a.started_at)));
    const ends = mine.map((a) => ms(a.finished_at));
    const end = done && ends.every((e) => e !== null) ? Math.max(...ends) : null;
    return [start, end];
  }
  return [ms(step.created_at), done ? ms(step.updated_at) : null];
}

// ``run`` as the API gave it, ``attempts`` from its history; ``openSteps`` (keys) keeps
// which details stay unfolded across redraws; ``rerunFrom(key)`` is a step's rerun button.
export function renderSteps(run, attempts, openSteps, rerunFrom) {
  if (!run) return;
  // patch markers (``wf.patched``) are no work: a badge each beside the count, not a row
  const all = run.steps || [];
  const steps = all.filter((s) => s.kind !== "patch");
  const patches = all.filter((s) => s.kind === "patch").map((s) => s.key.replace(/^__patch:/, ""));
  $("steps-count").replaceChildren(
    steps.length + (steps.length === 1 ? " step" : " steps"),
    ...patches.map((p) => h("span", { class: "badge patch", title: "patch marker: this run took the patched path", text: "patch: " + p }))
  );
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
    const [start, end] = stepSpan(attempts, step);
    const now = Date.now();
    const mine = attemptsOf(attempts, step.key);
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
    // the server names the step (plait.records.step_label), as `plait runs show` does
    const label = step.label;
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
    if (step.kind === "send_event" && step.input && typeof step.input.run_id === "string") {
      body.append(h("p", {}, "Event " + JSON.stringify(step.input.event) + " to run ", h("a", { class: "mono", href: "./" + enc(step.input.run_id), text: step.input.run_id })));
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
              // the worker that ran it (its lease name: host, process and worker)
              a.worker ? h("span", { class: "attempt-worker", title: "the worker that ran this attempt" }, " · worker ", h("span", { class: "mono", text: a.worker })) : null,
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
