// Services: their states; a service's versions with traffic weights (editable),
// instances and their health, autoscaling and its decisions, request and
// error counts, latency, the request log, and a try-it form that sends an
// infer request through the studio.
import { Chart, BarController, BarElement, CategoryScale, LinearScale, Legend } from "chart.js";
import { call, get } from "./api";
import { errorBox, h } from "./dom";
import type { Session } from "./main";

Chart.register(BarController, BarElement, CategoryScale, LinearScale, Legend);

export async function servicesPage(page: HTMLElement) {
  const { services } = await get("/services");
  page.append(h("h2", {}, "Services"),
    services.length ? h("table", { class: "grid", id: "services" },
      h("tr", {}, h("th", {}, "name"), h("th", {}, "state"), h("th", {}, "versions"), h("th", {}, "reason")),
      services.map((sv: any) => h("tr", {},
        h("td", {}, h("a", { href: `#/services/${encodeURIComponent(sv.name)}` }, sv.name)),
        h("td", { class: `state-${sv.state}` }, sv.state),
        h("td", {}, (sv.versions ?? []).map((v: any) => `${v.name}: ${v.model} (${v.weight})`).join(", ")),
        h("td", {}, sv.reason))))
      : h("p", { class: "muted" }, "No services yet: kiln service deploy NAME --model MODEL@ALIAS"));
}

// The first input's shape with dynamic dimensions as 1, and a tensor of it
// from a grey image file (scaled to the input's height and width) or zeros.
async function imageTensor(file: File, shape: number[]): Promise<number[]> {
  const [height, width] = shape.slice(-2);
  const bitmap = await createImageBitmap(file);
  const canvas = document.createElement("canvas");
  canvas.width = width;
  canvas.height = height;
  const ctx = canvas.getContext("2d")!;
  ctx.drawImage(bitmap, 0, 0, width, height);
  const pixels = ctx.getImageData(0, 0, width, height).data;
  const out: number[] = [];
  for (let i = 0; i < width * height; i++) out.push((pixels[i * 4] + pixels[i * 4 + 1] + pixels[i * 4 + 2]) / (3 * 255));
  return out;
}

function tryIt(name: string, signature: any, onSent: () => void): HTMLElement {
  const input = signature?.inputs?.[0];
  const shape: number[] = (input?.shape ?? [1]).map((d: any) => (typeof d === "number" && d > 0 ? d : 1));
  const file = h("input", { type: "file", id: "try-file", accept: "image/*" });
  const text = h("textarea", { id: "try-json", rows: 4, cols: 60,
    placeholder: `{"inputs": [{"name": "${input?.name ?? "input"}", "shape": [${shape}], "datatype": "FP32", "data": [...]}]}` });
  const result = h("div", { id: "try-result", role: "status" });
  const send = h("button", { type: "submit", id: "try-send" }, "Send");
  const form = h("form", { class: "try", id: "try-form" }, h("h3", {}, "Try it"),
    h("p", { class: "muted" }, `An image file (made ${shape.slice(-2).join("x")}, grey) or a request in JSON.`),
    file, text, send, result);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    result.replaceChildren("sending...");
    try {
      let body: any;
      if (file.files?.length) {
        body = { inputs: [{ name: input?.name ?? "input", shape, datatype: "FP32", data: await imageTensor(file.files[0], shape) }] };
      } else {
        body = JSON.parse(text.value);
      }
      const started = performance.now();
      const reply = await call("POST", `/services/${encodeURIComponent(name)}/v2/models/${encodeURIComponent(name)}/infer`, body);
      const ms = performance.now() - started;
      const out = reply.outputs?.[0];
      const values: number[] = out?.data ?? [];
      let best = 0;
      values.forEach((v, i) => { if (v > values[best]) best = i; });
      // The registry knows the class names of models trained on a built-in dataset.
      const label = signature?.labels?.[best];
      result.replaceChildren(
        h("p", {}, "prediction: ", h("strong", { id: "prediction" }, label ? `${label} (class ${best})` : `class ${best}`),
          ` (${ms.toFixed(1)} ms, model version ${reply.model_version ?? "?"})`),
        h("pre", {}, JSON.stringify(out ?? reply, null, 1).slice(0, 2000)));
      onSent();
    } catch (err) {
      result.replaceChildren(errorBox(err));
    }
  });
  return form;
}

// The median from a histogram of per-bucket counts: the upper bound of the
// bucket that holds it (the last finite bound for the +Inf bucket).
function p50(buckets: { le: number | string; count: number }[]): number {
  const total = buckets.reduce((n, b) => n + b.count, 0);
  let seen = 0;
  let bound = 0;
  for (const b of buckets) {
    if (typeof b.le === "number") bound = b.le;
    seen += b.count;
    if (total && seen * 2 >= total) return bound;
  }
  return 0;
}

export async function servicePage(page: HTMLElement, s: Session, name: string) {
  const head = h("div");
  const versions = h("div", { id: "service-versions" });
  const stats = h("canvas", { id: "service-latency" });
  const events = h("div", { id: "service-events" });
  const requests = h("div", { id: "service-requests" });
  let chart: Chart | null = null;
  const draw = async () => {
    const sv = await get(`/services/${encodeURIComponent(name)}`);
    const metrics = await get(`/services/${encodeURIComponent(name)}/metrics`).catch(() => null);
    const log = await get(`/services/${encodeURIComponent(name)}/requests?limit=20`).catch(() => null);
    head.replaceChildren(h("h2", {}, `Service ${name}`),
      h("p", {}, "state ", h("strong", { id: "service-state" }, sv.state), sv.reason ? ` (${sv.reason})` : ""),
      h("p", { class: "muted" }, "endpoint ", h("code", {}, sv.endpoint ?? "")));
    versions.replaceChildren(h("table", { class: "grid" },
      h("tr", {}, h("th", {}, "version"), h("th", {}, "model"), h("th", {}, "weight"), h("th", {}, "instances"),
        h("th", {}, "scaling"), h("th", {}, "requests"), h("th", {}, "errors")),
      (sv.versions ?? []).map((v: any) => {
        const m = metrics?.versions?.[v.name] ?? {};
        const weight = h("input", { type: "number", min: 0, max: 100, value: v.weight, size: 4, class: "weight",
          "data-version": v.name, disabled: !s.canWrite });
        weight.addEventListener("change", async () => {
          try {
            await call("PUT", `/services/${encodeURIComponent(name)}/versions/${encodeURIComponent(v.name)}`,
                       { model: v.model, weight: Number(weight.value) });
            weight.classList.add("saved");
          } catch (err) {
            weight.after(errorBox(err));
          }
        });
        return h("tr", {}, h("td", {}, v.name), h("td", {}, v.model), h("td", {}, weight),
          h("td", {}, (v.instances ?? []).map((i: any) =>
            h("span", { class: `instance ${i.ready ? "ready" : "down"}`, title: `port ${i.port}` }, `#${i.id} ${i.ready ? "ready" : "starting"}`))),
          h("td", { class: "scaling" }, v.autoscale
            ? `${v.autoscale.min_instances}..${v.autoscale.max_instances}, ${Number(v.load?.in_flight ?? 0).toFixed(1)} in flight`
            : "fixed"),
          h("td", {}, m.requests ?? ""), h("td", {}, m.errors ?? ""));
      })));
    events.replaceChildren(...(sv.events ?? []).slice().reverse().map((e: any) =>
      h("p", { class: "muted" }, `${new Date(e.time_ms).toLocaleTimeString()}: ${e.version} from ${e.from} to ${e.to} instances (${e.reason})`)));
    const logged: any[] = log?.requests ?? [];
    requests.replaceChildren(logged.length
      ? h("table", { class: "grid" },
        h("tr", {}, h("th", {}, "time"), h("th", {}, "version"), h("th", {}, "instance"), h("th", {}, "status"), h("th", {}, "ms")),
        logged.map((r) => h("tr", { class: "request" }, h("td", {}, new Date(r.time_ms).toLocaleTimeString()), h("td", {}, r.version),
          h("td", {}, `#${r.instance}`), h("td", { class: r.status >= 400 ? "state-Failed" : "" }, r.status),
          h("td", {}, Number(r.ms).toFixed(2)))))
      : h("p", { class: "muted" }, "No requests yet."));
    const byVersion = Object.entries(metrics?.versions ?? {}) as [string, any][];
    if (!chart) {
      chart = new Chart(stats, {
        type: "bar",
        data: { labels: [], datasets: [
          { label: "median latency (ms)", data: [], backgroundColor: "#2563eb", yAxisID: "ms" },
          { label: "errors", data: [], backgroundColor: "#dc2626", yAxisID: "count" }] },
        options: { animation: false, scales: { ms: { position: "left", beginAtZero: true },
                                               count: { position: "right", beginAtZero: true, grid: { drawOnChartArea: false } } } },
      });
    }
    chart.data.labels = byVersion.map(([v]) => v);
    chart.data.datasets[0].data = byVersion.map(([, m]) => p50(m.latency_ms_buckets ?? []));
    chart.data.datasets[1].data = byVersion.map(([, m]) => Number(m.errors ?? 0));
    chart.update();
    return sv;
  };
  const sv = await draw();
  let signature = null;
  try {
    const model = sv.versions?.[0]?.model;
    if (model) signature = (await get(`/models/resolve?uri=${encodeURIComponent(model)}`)).signature;
  } catch {
    /* the form takes JSON then */
  }
  page.append(head, h("h3", {}, "Versions"), versions, events,
    h("h3", {}, "Latency and errors by version"), h("div", { class: "small-chart" }, stats),
    tryIt(name, signature, () => { draw().catch(() => {}); }), h("h3", {}, "Recent requests"), requests);
  const timer = setInterval(() => draw().catch(() => {}), 5000);
  return () => {
    clearInterval(timer);
    chart?.destroy();
  };
}
