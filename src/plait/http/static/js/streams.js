// A run's streams (wf.stream, ctx.stream), followed live: text values run on as they
// arrive, as a chat reply does; any other value gets a line of its own. A reset drops
// the entries of the attempt it names (it failed, and its retry writes them again).

import { h, $ } from "./dom.js";
import { enc } from "./format.js";
import { stream } from "./live.js";

export function streamsPanel(path) {
  const shown = new Map(); // stream name -> what is followed of it

  function follow(name, state) {
    state.controller = new AbortController();
    stream(
      path + "/streams/" + enc(name) + "?after=" + state.last,
      (kind, entry) => {
        state.last = entry.offset;
        const who = entry.step + "#" + entry.attempt;
        if (kind === "data") {
          const text = typeof entry.value === "string";
          const node = text
            ? h("span", { class: "chunk", text: entry.value })
            : h("div", { class: "line mono", text: JSON.stringify(entry.value) });
          (state.items.get(who) || state.items.set(who, []).get(who)).push(node);
          state.body.append(node);
          state.body.scrollTop = state.body.scrollHeight;
        } else if (kind === "reset") {
          for (const node of state.items.get(who) || []) node.remove();
          state.items.delete(who);
        } else if (kind === "end") {
          state.ended = true;
          state.status.textContent = "ended";
        }
      },
      state.controller.signal
    )
      .catch(() => null)
      .finally(() => {
        state.controller = null;
        // a dropped connection goes on after the last entry it got
        if (!state.ended) setTimeout(() => follow(name, state), 1000);
      });
  }

  return function update(names) {
    const list = names || [];
    $("streams-card").hidden = !list.length;
    for (const name of list) {
      if (shown.has(name)) continue;
      const state = {
        last: -1,
        ended: false,
        items: new Map(),
        controller: null,
        body: h("div", { class: "stream-body", "data-stream": name }),
        status: h("span", { class: "muted", text: "live" }),
      };
      shown.set(name, state);
      $("streams").append(h("div", { class: "stream" }, h("div", { class: "card-head" }, h("h3", { text: name }), state.status), state.body));
      follow(name, state);
    }
  };
}
