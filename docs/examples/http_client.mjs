// @ts-check
// A chat backend in JavaScript on Node 20+ (fetch is built in; no dependency), typed
// with JSDoc so TypeScript checks it as it is (`tsc --allowJs --checkJs --noEmit`).
// Run: TULIP_HTTP_URL=... TULIP_API_KEY=... TULIP_TENANT=... node http_client.mjs

/** @typedef {{role: "system" | "user" | "assistant" | "tool", content: string}} Message */
/** @typedef {{type: string, title: string, status: number, detail: string}} Problem */

const base = process.env.TULIP_HTTP_URL;
const key = process.env.TULIP_API_KEY;
const tenant = process.env.TULIP_TENANT;

/**
 * One call of the API; a refusal (application/problem+json) is thrown with its type.
 * @param {string} method
 * @param {string} path
 * @param {unknown} [body]
 * @returns {Promise<any>}
 */
async function call(method, path, body) {
  const response = await fetch(base + path, {
    method,
    headers: {
      Authorization: `Bearer ${key}`,
      ...(body === undefined ? {} : { "Content-Type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) {
    /** @type {Problem} */
    const problem = await response.json();
    throw new Error(`${problem.status} ${problem.type}: ${problem.detail}`);
  }
  return response.json();
}

async function main() {
  const namespace = [tenant, "users", "u-42"];
  /** @type {Message[]} */
  const messages = [
    { role: "user", content: "My favourite colour is teal." },
    { role: "assistant", content: "Noted!" },
  ];
  // A session ended: 202, applied by the workers in order per namespace.
  const { event_id } = await call("POST", "/v1/sessions", {
    namespace, thread_id: "chat-1", messages,
  });
  let state = "pending";
  for (let i = 0; i < 600 && (state === "pending" || state === "unknown"); i++) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    ({ state } = await call("GET", `/v1/events/${event_id}`));
  }
  const params = new URLSearchParams({ q: "colour", limit: "5" });
  for (const part of namespace) params.append("namespace", part);
  /** @type {{memories: {key: string, content: string}[]}} */
  const { memories } = await call("GET", `/v1/memories?${params}`);
  // A checkpoint, then the thread as a UI shows it (read your writes: at once).
  const thread = "ticket-8912-refund";
  const saved = await call("POST", `/v1/threads/${encodeURIComponent(thread)}/checkpoints`, {
    state: { messages, iterations: 1, metadata: {} },
  });
  const loaded = await call("GET", `/v1/threads/${encodeURIComponent(thread)}`);
  console.log(JSON.stringify({
    state,
    memories: memories.map((m) => m.content),
    checkpoint: saved.checkpoint_id,
    messages: loaded.messages.length,
    iterations: loaded.iterations,
  }));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
