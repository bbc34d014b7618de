// Building the page: elements (text always set as text, never parsed as HTML), status
// badges, the page's notice line and copy buttons.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    // through the CSSOM: the Content-Security-Policy allows no inline style attributes
    else if (key === "style") Object.assign(el.style, value);
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export const $ = (id) => document.getElementById(id);

export function badge(status) {
  return h("span", { class: "badge", "data-status": status, text: status });
}

export function notice(message, kind) {
  const el = $("notice");
  if (!el) return;
  el.textContent = message || "";
  el.className = "notice" + (kind ? " " + kind : "");
  el.hidden = !message;
  notice.kind = message ? kind : null;
  clearTimeout(notice.timer);
  if (message && kind === "ok") notice.timer = setTimeout(() => notice(""), 4000);
}

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch (_) {
    // no clipboard API (a page over plain HTTP on another host): the old way
    const area = h("textarea", { class: "offscreen", readonly: true }, text);
    document.body.append(area);
    area.select();
    let done = false;
    try {
      done = document.execCommand("copy");
    } catch (_) {
      done = false;
    }
    area.remove();
    return done;
  }
}

// A small button that copies ``value()`` (or a fixed text) and says so.
export function copyButton(value, what) {
  const button = h("button", { type: "button", class: "copy", title: "Copy " + what, "aria-label": "Copy " + what, text: "Copy" });
  button.addEventListener("click", async (event) => {
    event.preventDefault();
    event.stopPropagation();
    const text = typeof value === "function" ? value() : value;
    const done = await copyText(text);
    button.textContent = done ? "Copied" : "Copy failed";
    button.classList.toggle("copied", done);
    clearTimeout(button.timer);
    button.timer = setTimeout(() => {
      button.textContent = "Copy";
      button.classList.remove("copied");
    }, 1500);
  });
  return button;
}
