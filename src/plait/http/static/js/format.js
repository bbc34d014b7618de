// How the pages show what the API returns: times, durations, run ids and JSON.

// a run in one of these statuses changes no more by itself
export const SETTLED = ["completed", "failed", "cancelled", "continued", "suspended", "needs_attention"];

export const ms = (iso) => (iso ? new Date(iso).getTime() : null);
export const enc = encodeURIComponent;

export function duration(millis) {
  if (millis === null || millis === undefined || isNaN(millis)) return "";
  const s = millis / 1000;
  if (s < 1) return Math.max(0, Math.round(millis)) + " ms";
  if (s < 60) return s.toFixed(1) + " s";
  if (s < 3600) return Math.floor(s / 60) + " m " + Math.floor(s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " m";
}

// within the last hour: how long ago; earlier, the time (with its date when not today)
export function ago(iso) {
  const s = (Date.now() - ms(iso)) / 1000;
  if (s < 5) return "just now";
  if (s < 60) return Math.floor(s) + " s ago";
  if (s < 3600) return Math.floor(s / 60) + " min ago";
  return when(iso);
}

// the browser's zone as a time is shown with it ("UTC", "CET", "GMT+2")
function zone(d) {
  try {
    const part = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" }).formatToParts(d).find((p) => p.type === "timeZoneName");
    return part ? part.value : "";
  } catch (_) {
    return "";
  }
}

// A time as the pages show it: 24-hour, its date when it is not today, and its zone,
// so a time read off a screen means the same to everyone who reads it.
export function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  if (isNaN(d.getTime())) return String(iso);
  const pad = (n) => String(n).padStart(2, "0");
  const time = pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  const today = d.toDateString() === new Date().toDateString();
  const date = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate());
  return ((today ? "" : date + " ") + time + " " + zone(d)).trim();
}

export function runDuration(run) {
  const end = SETTLED.includes(run.status) ? ms(run.updated_at) : Date.now();
  return end - ms(run.created_at);
}

export function pretty(value) {
  return value === undefined ? "" : JSON.stringify(value, null, 2);
}

// What a page shows of a run id: a UUIDv7 starts with its time, which changes only every
// minute or so, so its random end; any other id whole, or its start and end when long.
// Keep in step with short_id in dashboard.py.
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export function shortId(id) {
  if (UUID.test(id)) return id.slice(-8);
  if (id.length <= 16) return id;
  return id.slice(0, 6) + "…" + id.slice(-6);
}
