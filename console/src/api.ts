// The studio's REST API under /api/v1, with the signed-in token.

export type Scope = "read" | "write" | "admin";

const TOKEN_KEY = "kiln-studio-token";

export class ApiError extends Error {
  constructor(public status: number, message: string) {
    super(message);
  }
}

export function token(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value: string | null): void {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export async function call<T = any>(method: string, path: string, body?: unknown, type = "application/json"): Promise<T> {
  const headers: Record<string, string> = { Authorization: `Bearer ${token() ?? ""}` };
  let payload: BodyInit | undefined;
  if (body instanceof Blob || body instanceof ArrayBuffer) {
    payload = body;
    headers["Content-Type"] = type;
  } else if (body !== undefined) {
    payload = JSON.stringify(body);
    headers["Content-Type"] = "application/json";
  }
  const r = await fetch(`/api/v1${path}`, { method, headers, body: payload });
  const text = await r.text();
  let data: any = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = text;
  }
  if (!r.ok) throw new ApiError(r.status, (data && data.error) || `${method} ${path}: ${r.status}`);
  return data as T;
}

export const get = <T = any>(path: string) => call<T>("GET", path);

// Server-sent events read with fetch (EventSource cannot send the token):
// calls onEvent for each event until the stream ends or `signal` aborts.
export async function follow(path: string, onEvent: (event: string, data: string) => void, signal: AbortSignal) {
  const r = await fetch(`/api/v1${path}`, {
    headers: { Authorization: `Bearer ${token() ?? ""}`, Accept: "text/event-stream" },
    signal,
  });
  if (!r.ok || !r.body) throw new ApiError(r.status, `following ${path}: ${r.status}`);
  const reader = r.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      const data: string[] = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) event = line.slice(7);
        else if (line.startsWith("data: ")) data.push(line.slice(6));
      }
      if (data.length) onEvent(event, data.join("\n"));
    }
  }
}
