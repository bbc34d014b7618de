// What a live run waits on (the API's ``waiting_on``), said short for a cell of the runs
// list: an event, an approval, a sleep until a time, its queue's admission, a pause, a
// spent budget, or no live worker for its workflow. The API's sentence is the cell's title.

import { h } from "./dom.js";
import { when, shortId } from "./format.js";

const SAID = {
  event: (w) => "event " + w.name + (w.until ? " (until " + when(w.until) + ")" : ""),
  approval: (w) => "approval " + w.name,
  sleep: (w) => "sleep until " + when(w.until),
  child: (w) => "child run " + shortId(w.name),
  resume: () => "a resume",
  admission: (w) => "queue " + w.name + " (admission)",
  start: (w) => "start at " + when(w.until),
  paused_workflow: () => "workflow paused",
  paused_queue: (w) => "queue " + w.name + " paused",
  no_worker: () => "no live worker for this workflow",
  budget: (w) => "queue " + w.name + " budget spent",
};

export function waitingText(waiting) {
  if (!waiting) return "";
  const say = SAID[waiting.kind];
  return say ? say(waiting) : waiting.message;
}

export function waitingCell(run) {
  const waiting = run.waiting_on;
  return h(
    "td",
    { class: "waiting", "data-label": "Waiting on", "data-waiting": waiting ? waiting.kind : null, title: waiting ? waiting.message : null },
    waiting ? h("span", { class: "wait wait-" + waiting.kind, text: waitingText(waiting) }) : null
  );
}
