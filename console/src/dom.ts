// A few DOM helpers: elements from a tag, attributes and children.

type Child = Node | string | number | null | undefined | false;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, any> = {},
  ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

export function mount(root: HTMLElement, ...children: (Node | string)[]) {
  root.replaceChildren(...children);
}

export function when(ms: number): string {
  return ms ? new Date(ms).toLocaleString() : "";
}

export function duration(fromMs: number, toMs: number): string {
  if (!fromMs) return "";
  const s = Math.max(0, ((toMs || Date.now()) - fromMs) / 1000);
  return s < 90 ? `${s.toFixed(1)} s` : s < 5400 ? `${(s / 60).toFixed(1)} min` : `${(s / 3600).toFixed(1)} h`;
}

export function errorBox(e: unknown): HTMLElement {
  return h("p", { class: "error", role: "alert" }, e instanceof Error ? e.message : String(e));
}
