// The store: buckets, the keys under a prefix as folders and objects (paged
// by the API), object sizes, downloads and uploads.
import { call, get, token } from "./api";
import { errorBox, h, when } from "./dom";
import type { Session } from "./main";

function size(bytes: number): string {
  return bytes < 1024 ? `${bytes} B` : bytes < 1 << 20 ? `${(bytes / 1024).toFixed(1)} KB` : `${(bytes / (1 << 20)).toFixed(1)} MB`;
}

const enc = (key: string) => key.split("/").map(encodeURIComponent).join("/");

export async function storePage(page: HTMLElement, s: Session, bucket: string, prefix: string) {
  if (!bucket) {
    const { buckets } = await get("/buckets");
    page.append(h("h2", {}, "Store"), h("ul", { class: "buckets", id: "buckets" },
      buckets.map((b: string) => h("li", {}, h("a", { href: `#/store/${encodeURIComponent(b)}` }, b)))));
    return;
  }
  const under = prefix && !prefix.endsWith("/") ? `${prefix}/` : prefix;
  // Folders: the next part of each key below the prefix.
  const folders = new Set<string>();
  const objects: any[] = [];
  let after = "";
  let pages = 0;
  do {
    const page = await get(`/buckets/${encodeURIComponent(bucket)}/objects?prefix=${encodeURIComponent(under)}&start_after=${encodeURIComponent(after)}&max_keys=1000`);
    for (const o of page.objects) {
      const rest = o.key.slice(under.length);
      if (rest.includes("/")) folders.add(rest.slice(0, rest.indexOf("/") + 1));
      else objects.push(o);
    }
    after = page.next_start_after;
  } while (after && ++pages < 50);
  const crumbs = [h("a", { href: "#/store" }, "store"), " / ", h("a", { href: `#/store/${encodeURIComponent(bucket)}` }, bucket)];
  let path = "";
  for (const part of under.split("/").filter(Boolean)) {
    path += `${part}/`;
    crumbs.push(" / ", h("a", { href: `#/store/${encodeURIComponent(bucket)}/${enc(path)}` }, part));
  }
  const download = async (key: string) => {
    const r = await fetch(`/api/v1/buckets/${encodeURIComponent(bucket)}/objects/${enc(key)}`,
                          { headers: { Authorization: `Bearer ${token()}` } });
    const url = URL.createObjectURL(await r.blob());
    const a = h("a", { href: url, download: key.split("/").pop() });
    a.click();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  };
  page.append(h("h2", {}, ...crumbs), h("table", { class: "grid", id: "objects" },
    h("tr", {}, h("th", {}, "name"), h("th", {}, "size"), h("th", {}, "modified"), h("th", {}, "sha256")),
    [...folders].sort().map((f) => h("tr", {}, h("td", {}, h("a", { href: `#/store/${encodeURIComponent(bucket)}/${enc(under + f)}` }, f)),
      h("td", {}), h("td", {}), h("td", {}))),
    objects.map((o) => h("tr", {},
      h("td", {}, h("a", { href: "javascript:void 0", onclick: () => download(o.key) }, o.key.slice(under.length))),
      h("td", {}, size(o.size)), h("td", {}, when(o.modified_ms ?? o.modified_at ?? 0)), h("td", { class: "muted" }, o.sha256.slice(0, 12))))));
  if (pages >= 50) page.append(h("p", { class: "muted" }, "Showing the first 50,000 keys; narrow the prefix to see more."));
  if (!s.canWrite) return;
  const file = h("input", { type: "file", id: "upload-file" });
  const said = h("span", { role: "status", id: "upload-result" });
  const form = h("form", { class: "tools" }, h("label", {}, "Upload here "), file, h("button", { type: "submit" }, "Upload"), said);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const f = file.files?.[0];
    if (!f) return;
    try {
      await call("PUT", `/buckets/${encodeURIComponent(bucket)}/objects/${enc(under + f.name)}`, f, f.type || "application/octet-stream");
      said.textContent = `uploaded ${f.name}`;
    } catch (err) {
      said.replaceChildren(errorBox(err));
    }
  });
  page.append(form);
}
