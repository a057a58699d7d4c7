// Notebooks: each with its project, spec, state and why, and a link that
// opens it (the token goes once, as a cookie for that notebook's paths).
import { get, token } from "./api";
import { h } from "./dom";

export async function notebooksPage(page: HTMLElement) {
  const { notebooks } = await get("/notebooks");
  page.append(h("h2", {}, "Notebooks"),
    notebooks.length ? h("table", { class: "grid", id: "notebooks" },
      h("tr", {}, h("th", {}, "name"), h("th", {}, "project"), h("th", {}, "spec"), h("th", {}, "state"),
        h("th", {}, "saved to"), h("th", {}, "")),
      notebooks.map((n: any) => h("tr", { "data-notebook": n.name },
        h("td", {}, n.name),
        h("td", {}, n.project),
        h("td", {}, `${n.spec.cpus} CPU ${n.spec.cpus === 1 ? "core" : "cores"}` +
          (n.spec.memory_mb ? `, ${n.spec.memory_mb} MB` : "")),
        h("td", { class: `state-${n.state}`, title: n.reason }, n.state),
        h("td", {}, h("code", {}, n.saved_to)),
        h("td", {}, n.state === "Running"
          ? h("a", { class: "open", target: "_blank",
              href: `/api/v1/notebooks/${encodeURIComponent(n.name)}/open?token=${encodeURIComponent(token() ?? "")}` }, "Open")
          : ""))))
      : h("p", { class: "muted" }, "No notebooks yet: kiln notebook create NAME --spec cpu-2"));
}
