// The JSON API as the pages call it. Signing in posts the token once to /api/session;
// from then on an HttpOnly cookie that no script can read identifies the browser, and
// requests that change something carry the session's CSRF token. The token itself is
// never stored by the browser.

// where the server is mounted, so links and requests keep working under a prefix
export const ROOT = document.body.dataset.root || "";

// the session's CSRF token, from GET /api/session (kept in memory only)
let csrfToken = null;

function headersFor(method, extra) {
  const headers = Object.assign({ Accept: "application/json" }, extra || {});
  if (method !== "GET") {
    headers["Content-Type"] = "application/json";
    if (csrfToken) headers["X-CSRF-Token"] = csrfToken;
  }
  return headers;
}

function askForToken() {
  const box = document.getElementById("signin");
  if (!box || !box.hidden) return;
  box.hidden = false;
  document.getElementById("signin-token").focus();
}

export async function signIn(event) {
  event.preventDefault();
  const field = document.getElementById("signin-token");
  const error = document.getElementById("signin-error");
  error.textContent = "";
  const token = field.value.trim();
  if (!token) return;
  const response = await fetch(ROOT + "/api/session", {
    method: "POST",
    headers: headersFor("POST"),
    body: JSON.stringify({ token: token }),
    cache: "no-store",
  });
  field.value = "";
  if (response.ok) {
    location.reload();
    return;
  }
  error.textContent = response.status === 401 ? "Unknown token." : "Sign-in failed (HTTP " + response.status + ").";
}

export async function signOut() {
  await fetch(ROOT + "/api/session", { method: "DELETE", headers: headersFor("DELETE"), cache: "no-store" });
  location.reload();
}

// Who this browser is: null (and the sign-in form) when nobody is signed in.
export async function whoAmI() {
  const response = await fetch(ROOT + "/api/session", { headers: headersFor("GET"), cache: "no-store" });
  if (response.status === 401) {
    askForToken();
    return null;
  }
  if (!response.ok) return null;
  const me = await response.json();
  csrfToken = me.csrf_token || null;
  document.getElementById("whoami").textContent = me.auth ? me.user : "no auth";
  document.getElementById("signout").hidden = !me.session;
  return me;
}

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || "HTTP " + status);
    this.status = status;
    this.body = body;
  }
}

export async function api(path, options) {
  const opts = options || {};
  const method = opts.method || "GET";
  const response = await fetch(ROOT + "/api" + path, {
    method: method,
    headers: headersFor(method),
    body: opts.body !== undefined ? JSON.stringify(opts.body) : undefined,
    cache: "no-store",
  });
  let data = null;
  try {
    data = await response.json();
  } catch (_) {
    data = null;
  }
  if (!response.ok) {
    if (response.status === 401) askForToken();
    throw new ApiError(response.status, data);
  }
  return data;
}
