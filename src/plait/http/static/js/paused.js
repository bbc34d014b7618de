// The banner over the runs list while a workflow or a queue in view is paused: nothing of
// it starts or goes on until it is resumed, and a list that only says "queued" or
// "paused" row by row hides that one switch holds them all.

import { api } from "./api.js";
import { h, $ } from "./dom.js";
import { when } from "./format.js";

// ``inView()`` says what the list shows: { workflow } (the filter, "" for any) and the
// workflows and queues of the runs on the page
export function pausedBanner(inView) {
  const banner = $("paused-banner");
  return async function refresh() {
    let paused;
    try {
      paused = (await api("/paused")).paused;
    } catch (_) {
      return; // the list shows what is wrong
    }
    const view = inView();
    const shown = paused.filter((b) => {
      if (b.kind === "workflow") return !view.workflow || b.name === view.workflow || view.workflows.has(b.name);
      return !view.workflow || view.queues.has(b.name);
    });
    banner.hidden = !shown.length;
    banner.replaceChildren(
      ...(shown.length
        ? [
            h("strong", { text: "Paused: " }),
            ...shown.map((b, i) =>
              h("span", { class: "paused-item", "data-kind": b.kind, "data-name": b.name }, (i ? " · " : "") + b.kind + " ", h("b", { text: b.name }), " since " + when(b.paused_at))
            ),
            h("span", { class: "muted", text: " — its runs wait until it is resumed (plait unpause " + shown[0].kind + " " + shown[0].name + ")." }),
          ]
        : [])
    );
  };
}
