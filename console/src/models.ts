// Models: the registry's models, a model's versions side by side (state,
// aliases, signature, lineage, metrics), and setting an alias.
import { call, get } from "./api";
import { errorBox, h, when } from "./dom";
import type { Session } from "./main";

export async function modelsPage(page: HTMLElement) {
  const { models } = await get("/models");
  page.append(h("h2", {}, "Models"),
    models.length ? h("table", { class: "grid", id: "models" },
      h("tr", {}, h("th", {}, "name"), h("th", {}, "versions"), h("th", {}, "latest"), h("th", {}, "description")),
      models.map((m: any) => h("tr", {},
        h("td", {}, h("a", { href: `#/models/${encodeURIComponent(m.name)}` }, m.name)),
        h("td", {}, m.versions), h("td", {}, m.latest_version ?? ""), h("td", {}, m.description))))
      : h("p", { class: "muted" }, "No models yet: kiln model register NAME --job ID"));
}

// A metric as a person reads it: whole numbers whole, others to 4 digits, text as it is.
function shown(value: unknown): string {
  if (value === undefined || value === null) return "";
  if (typeof value !== "number") return String(value);
  return Number.isInteger(value) ? String(value) : value.toPrecision(4);
}

function signatureText(sig: any): string {
  const one = (t: any) => `${t.name} ${t.dtype} [${(t.shape ?? []).map((d: any) => d ?? "?").join(", ")}]`;
  return [...(sig?.inputs ?? []).map((t: any) => `in  ${one(t)}`), ...(sig?.outputs ?? []).map((t: any) => `out ${one(t)}`)].join("\n");
}

// The metrics compared in columns; a version's others are listed under "more".
const COLUMNS = ["accuracy", "test_accuracy", "loss", "val_accuracy", "val_loss"];

export async function modelPage(page: HTMLElement, s: Session, name: string) {
  const model = await get(`/models/${encodeURIComponent(name)}`);
  const versions: any[] = model.versions;
  const metricKeys = new Set<string>();
  for (const v of versions) for (const k of Object.keys(v.lineage?.metrics ?? {})) if (COLUMNS.includes(k)) metricKeys.add(k);
  const others = (v: any) => Object.entries(v.lineage?.metrics ?? {}).filter(([k]) => !metricKeys.has(k));
  const table = h("table", { class: "grid", id: "versions" },
    h("tr", {}, h("th", {}, "version"), h("th", {}, "state"), h("th", {}, "aliases"), h("th", {}, "from"),
      [...metricKeys].map((k) => h("th", {}, k)), h("th", {}, "signature"), h("th", {}, "registered")),
    versions.map((v) => h("tr", { "data-version": v.version },
      h("td", {}, v.version),
      // A version that failed its check says why, here and not only in a tooltip.
      h("td", { class: `state-${v.state}` }, v.state, v.reason ? h("div", { class: "reason" }, v.reason) : null),
      h("td", { class: "aliases" }, (v.aliases ?? []).join(", ")),
      h("td", {}, v.job ? h("a", { href: `#/jobs/${v.job}` }, `job ${v.job}`) : v.source,
        v.lineage?.data ? h("div", { class: "muted" }, Object.values(v.lineage.data).join(", ")) : null,
        others(v).length ? h("details", {}, h("summary", {}, "more metrics"),
          h("dl", { class: "facts" }, others(v).flatMap(([k, m]) => [h("dt", {}, k), h("dd", {}, shown(m))]))) : null),
      [...metricKeys].map((k) => h("td", {}, shown(v.lineage?.metrics?.[k]))),
      h("td", {}, h("pre", {}, signatureText(v.signature))),
      h("td", {}, `${when(v.created_ms)} by ${v.created_by}`))));
  page.append(h("h2", {}, `Model ${name}`), model.description ? h("p", {}, model.description) : "",
    h("div", { class: "scroll" }, table));
  if (!s.canWrite) return;
  const alias = h("input", { id: "alias-name", placeholder: "production", size: 14 });
  const version = h("select", { id: "alias-version" }, versions.map((v) => h("option", { value: v.version }, `version ${v.version}`)));
  const said = h("span", { id: "alias-result", role: "status" });
  const form = h("form", { class: "tools", id: "alias-form" }, h("label", {}, "Set alias "), alias, " to ", version,
    h("button", { type: "submit" }, "Set"), said);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      await call("PUT", `/models/${encodeURIComponent(name)}/aliases/${encodeURIComponent(alias.value.trim())}`,
                 { version: Number(version.value) });
      said.textContent = `${name}@${alias.value.trim()} is version ${version.value}`;
      const fresh = await get(`/models/${encodeURIComponent(name)}`);
      for (const v of fresh.versions) {
        const cell = table.querySelector(`tr[data-version="${v.version}"] .aliases`);
        if (cell) cell.textContent = (v.aliases ?? []).join(", ");
      }
    } catch (err) {
      said.replaceChildren(errorBox(err));
    }
  });
  page.append(form);
}
