// Approval forms, built from each gate's JSON Schema, and the panel that lists the gates
// the signed-in user may decide.

import { ROOT, api } from "./api.js";
import { h, $, notice } from "./dom.js";
import { enc, shortId, when } from "./format.js";

function resolveRef(schema, node) {
  let current = node || {};
  for (let hops = 0; current && current.$ref && hops < 10; hops++) {
    const name = current.$ref.split("/").pop();
    current = ((schema && schema.$defs) || {})[name] || {};
  }
  if (current && current.anyOf) {
    const real = current.anyOf.filter((part) => part.type !== "null");
    if (real.length === 1) return Object.assign({}, resolveRef(schema, real[0]), { title: current.title, default: current.default });
  }
  return current || {};
}

function field(schema, name, spec, required) {
  const prop = resolveRef(schema, spec);
  const label = (prop.title || spec.title || name) + (required ? " *" : "");
  const id = "f-" + Math.random().toString(36).slice(2);
  if (prop.type === "boolean") {
    const input = h("input", { type: "checkbox", id: id, name: name, "data-kind": "boolean", checked: prop.default === true });
    return h("label", { class: "check", for: id }, input, label);
  }
  let input;
  if (Array.isArray(prop.enum)) {
    input = h("select", { id: id, name: name, "data-kind": "enum" }, required ? null : h("option", { value: "", text: "" }), prop.enum.map((v) => h("option", { value: JSON.stringify(v), text: String(v), selected: prop.default === v })));
  } else if (prop.type === "integer" || prop.type === "number") {
    input = h("input", { type: "number", id: id, name: name, "data-kind": "number", step: prop.type === "integer" ? "1" : "any", value: prop.default !== undefined ? String(prop.default) : null });
  } else if (prop.type === "string") {
    input = h("input", { type: "text", id: id, name: name, "data-kind": "string", value: prop.default !== undefined ? String(prop.default) : null });
  } else {
    input = h("textarea", { id: id, name: name, rows: "2", spellcheck: "false", "data-kind": "json" }, prop.default !== undefined ? JSON.stringify(prop.default) : "");
  }
  if (required) input.required = true;
  return h("label", { for: id }, label, input);
}

function formData(form, schema) {
  if (!schema || !schema.properties) {
    const text = form.querySelector("textarea[name='__data']").value.trim();
    return text ? JSON.parse(text) : null;
  }
  const data = {};
  const required = schema.required || [];
  for (const el of form.querySelectorAll("[data-kind]")) {
    const name = el.name;
    const kind = el.dataset.kind;
    if (kind === "boolean") data[name] = el.checked;
    else if (el.value === "" && !required.includes(name)) continue;
    else if (kind === "number") data[name] = Number(el.value);
    else if (kind === "string") data[name] = el.value;
    else if (kind === "enum") data[name] = JSON.parse(el.value);
    else data[name] = JSON.parse(el.value);
  }
  return data;
}

function approvalForm(gate, onDone) {
  const schema = gate.schema;
  const fields = schema && schema.properties
    ? Object.entries(schema.properties).map(([name, spec]) => field(schema, name, spec, (schema.required || []).includes(name)))
    : [h("label", {}, "Decision (JSON)", h("textarea", { name: "__data", rows: "3", spellcheck: "false" }, "null"))];
  const error = h("span", { class: "form-error" });
  const submit = h("button", { type: "submit", class: "primary", text: "Decide" });
  const who = Array.isArray(gate.approvers) ? gate.approvers.join(", ") : gate.approvers.replace("_", " ");
  const form = h(
    "form",
    { class: "approval", "data-run-id": gate.run_id, "data-gate": gate.name },
    h("div", { class: "approval-head" }, h("strong", { text: gate.name }), h("a", { class: "mono", href: ROOT + "/runs/" + enc(gate.run_id), title: gate.run_id, text: gate.workflow + " " + shortId(gate.run_id) }), h("span", { class: "muted", text: "approvers: " + who + (gate.expires_at ? " · expires " + when(gate.expires_at) : "") })),
    fields,
    h("div", { class: "form-actions" }, submit, error)
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "";
    let data;
    try {
      data = formData(form, schema);
    } catch (err) {
      error.textContent = "Not JSON: " + err.message;
      return;
    }
    submit.disabled = true;
    try {
      await api("/runs/" + enc(gate.run_id) + "/approvals/" + enc(gate.name), { method: "POST", body: data });
      notice("Decision recorded for " + gate.name + ".", "ok");
      onDone();
    } catch (err) {
      const problems = (err.body && err.body.error && err.body.error.problems) || [];
      error.textContent = err.message + problems.map((p) => " · " + (p.field || "data") + ": " + p.message).join("");
      submit.disabled = false;
    }
  });
  return form;
}

// Lists the open gates the signed-in user may decide (of one run, or of every run) and
// keeps their forms; forms are rebuilt only when the set of gates changes, so nothing
// typed is lost on a refresh.
export function approvalsPanel(runId) {
  let shown = null;
  async function refresh() {
    let gates;
    try {
      gates = (await api("/approvals")).approvals;
    } catch (_) {
      return;
    }
    if (runId) gates = gates.filter((g) => g.run_id === runId);
    const keys = gates.map((g) => g.run_id + "/" + g.key).join(",");
    if (keys === shown) return;
    shown = keys;
    $("approvals-card").hidden = !gates.length;
    $("approvals").replaceChildren(...gates.map((g) => approvalForm(g, refresh)));
  }
  return refresh;
}
