// Cancel, retry or resume every run the list's filters match (POST /api/runs/bulk). The
// server first counts what the action would act on (``dry_run``): the confirmation names
// that number, which is only the signed-in user's own runs unless they hold the admin
// scope, as the action itself.

import { api } from "./api.js";
import { $, notice } from "./dom.js";

const VERB = { cancel: "Cancel", retry: "Retry", resume: "Resume" };
const DONE = { cancel: "Cancelled", retry: "Retried", resume: "Resumed" };
const WHICH = { cancel: "live", retry: "failed", resume: "suspended" };

function plural(n) {
  return n + (n === 1 ? " run" : " runs");
}

// ``current()`` gives { filter, text, blocked }: the bulk filter of the list as shown, the
// same said in words, and why the list's filters cannot be acted on (else null);
// ``done()`` runs after an action
export function bulkActions(current, done) {
  const dialog = $("bulk-confirm");
  const buttons = ["cancel", "retry", "resume"].map((a) => $("bulk-" + a));

  function refresh() {
    const blocked = current().blocked;
    $("bulk-note").textContent = blocked || "";
    for (const b of buttons) {
      b.disabled = !!blocked;
      b.title = blocked || VERB[b.dataset.action] + " every " + WHICH[b.dataset.action] + " run the filters match";
    }
  }

  function ask(question, filterText, verb) {
    $("bulk-question").textContent = question;
    $("bulk-filter").textContent = filterText;
    $("bulk-go").textContent = verb;
    dialog.returnValue = "";
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => resolve(dialog.returnValue === "go"), { once: true });
      dialog.showModal();
      $("bulk-keep").focus();
    });
  }

  async function act(action) {
    const { filter, text, blocked } = current();
    if (blocked) return;
    const button = $("bulk-" + action);
    button.disabled = true;
    try {
      const counted = await api("/runs/bulk", { method: "POST", body: { action: action, filter: filter, dry_run: true } });
      if (!counted.matched) {
        notice("No " + WHICH[action] + " run you may " + action + " matches the filters.", "ok");
        return;
      }
      const verb = VERB[action] + " " + plural(counted.matched);
      if (!(await ask(verb + "?", "Every " + WHICH[action] + " run that matches: " + text + ".", verb))) return;
      const acted = await api("/runs/bulk", { method: "POST", body: { action: action, filter: filter } });
      notice(DONE[action] + " " + plural(acted.acted) + ".", "ok");
      done();
    } catch (err) {
      const problems = (err.body && err.body.error && err.body.error.problems) || [];
      notice(err.message + problems.map((p) => " · " + (p.field || "filter") + ": " + p.message).join(""), "error");
    } finally {
      refresh();
    }
  }

  for (const b of buttons) b.addEventListener("click", () => act(b.dataset.action));
  refresh();
  return refresh;
}
