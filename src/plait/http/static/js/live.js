// A run followed as it changes: the API's server-sent events.

import { ROOT, ApiError } from "./api.js";

// Server-sent events over fetch, so a stream can be aborted like any request.
export async function stream(path, onEvent, signal) {
  const response = await fetch(ROOT + "/api" + path, {
    headers: { Accept: "text/event-stream" },
    cache: "no-store",
    signal: signal,
  });
  if (!response.ok || !response.body) throw new ApiError(response.status, null);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const chunk = await reader.read();
    if (chunk.done) return;
    buffer += decoder.decode(chunk.value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const message = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let name = "message";
      const data = [];
      for (const line of message.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) onEvent(name, JSON.parse(data.join("\n")));
    }
  }
}
