// Jobs: the list (filtered, with durations and final metrics) and a job's
// page (stages, live metric curves, per-rank logs with search and follow,
// parameters, stop and retry).
import { Chart, LineController, LineElement, PointElement, LinearScale, Legend, Tooltip } from "chart.js";
import { call, follow, get } from "./api";
import { duration, errorBox, h, when } from "./dom";
import type { Session } from "./main";
import { VirtualList } from "./virtual_list";

Chart.register(LineController, LineElement, PointElement, LinearScale, Legend, Tooltip);

const ENDED = ["Completed", "Failed", "Terminated", "Abnormal"];
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"];

// The metrics a person looks for first (accuracy, loss), then the others, three at most.
const FIRST = ["test_accuracy", "accuracy", "val_accuracy", "test_loss", "loss", "val_loss", "epoch_loss"];

function metricsText(m: Record<string, number> | undefined): string {
  if (!m) return "";
  const keys = Object.keys(m).sort((a, b) => (FIRST.indexOf(a) + 1 || 99) - (FIRST.indexOf(b) + 1 || 99));
  return keys.slice(0, 3).map((k) => `${k} ${Number(m[k]).toPrecision(4)}`).join(", ");
}

// "scheduling 0.1 s, preparing 0.4 s, running 12.0 s, end": the stages in
// the order entered, each with the time it took (the last one still going).
function stageLine(times: Record<string, number>): string {
  const stages = Object.entries(times).sort((a, b) => a[1] - b[1]);
  return stages.map(([stage, at], i) => {
    if (stage === "end") return stage;
    const until = i + 1 < stages.length ? stages[i + 1][1] : Date.now();
    return `${stage} ${duration(at, until)}`;
  }).join(", ");
}

export async function jobsPage(page: HTMLElement, _s: Session) {
  const filter = h("input", { type: "search", id: "job-filter", placeholder: "Filter by name, state or tag", size: 36 });
  const count = h("span", { class: "muted", id: "job-count" });
  const list = new VirtualList<any>(34, (j) =>
    h("a", { class: `row state-${j.state}`, href: `#/jobs/${j.id}`, "data-job": j.id },
      h("span", { class: "id" }, j.id), h("span", { class: "name" }, j.name),
      h("span", { class: "state" }, j.state), h("span", { class: "dur" }, duration(j.started_ms, j.ended_ms)),
      // A queued job says where it stands instead ("position 2 in the queue, after job 5").
      j.stage === "queued" ? h("span", { class: "metrics queued muted" }, j.reason)
        : h("span", { class: "metrics" }, metricsText(j.final_metrics))), "vlist jobs");
  page.append(h("h2", {}, "Jobs"), h("div", { class: "tools" }, filter, count),
    h("div", { class: "row head" }, h("span", { class: "id" }, "id"), h("span", { class: "name" }, "name"),
      h("span", { class: "state" }, "state"), h("span", { class: "dur" }, "ran"),
      h("span", { class: "metrics" }, "final metrics, or place in the queue")), list.element);
  let jobs: any[] = [];
  const show = () => {
    const words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
    const shown = jobs.filter((j) => {
      const text = `${j.id} ${j.name} ${j.state} ${Object.entries(j.tags ?? {}).map(([k, v]) => `${k}=${v}`).join(" ")}`;
      return words.every((w) => text.toLowerCase().includes(w));
    });
    list.set(shown);
    count.textContent = `${shown.length} of ${jobs.length}`;
  };
  filter.addEventListener("input", show);
  const load = async () => {
    jobs = (await get("/jobs?limit=5000")).jobs;
    show();
  };
  await load();
  const timer = setInterval(() => load().catch(() => {}), 5000);
  return () => clearInterval(timer);
}

function metricChart(canvas: HTMLCanvasElement) {
  return new Chart(canvas, {
    type: "line",
    data: { datasets: [] },
    options: {
      animation: false,
      parsing: false,
      normalized: true,
      scales: { x: { type: "linear", title: { display: true, text: "step" } }, y: { type: "linear" } },
      plugins: { legend: { position: "bottom" } },
    },
  });
}

export async function jobPage(page: HTMLElement, s: Session, id: number) {
  const job = await get(`/jobs/${id}`);
  const params = (await get(`/jobs/${id}/params`)).params ?? {};
  const head = h("div", { class: "job-head" });
  const drawHead = (j: any) => {
    head.replaceChildren(
      h("h2", {}, `Job ${j.id}: ${j.name}`),
      h("dl", { class: "facts" },
        h("dt", {}, "state"), h("dd", { id: "job-state" }, `${j.state} (${j.stage})`),
        h("dt", {}, "stages"), h("dd", { id: "job-stages" }, stageLine(j.stage_times ?? {})),
        j.reason ? [h("dt", {}, "reason"), h("dd", {}, j.reason)] : null,
        h("dt", {}, "submitted"), h("dd", {}, `${when(j.created_ms)} by ${j.submitted_by}`),
        h("dt", {}, "started"), h("dd", {}, when(j.started_ms)),
        h("dt", {}, "ran"), h("dd", {}, duration(j.started_ms, j.ended_ms)),
        j.exit_code !== null ? [h("dt", {}, "exit"), h("dd", {}, j.exit_code)] : null,
        h("dt", {}, "executor"), h("dd", {}, j.external_id ? `${j.executor} (job ${j.external_id})` : j.executor)),
      s.canWrite ? h("div", { class: "actions" },
        ENDED.includes(j.state) ? null : h("button", { id: "stop", onclick: () => call("POST", `/jobs/${id}/stop`) }, "Stop"),
        h("button", { id: "retry", onclick: async () => {
          const r = await call("POST", `/jobs/${id}/retry`);
          location.hash = `#/jobs/${r.id}`;
        } }, "Retry")) : "");
  };
  drawHead(job);

  // Metric curves: one chart per metric, this job and any compared with it.
  const compare = h("input", { id: "compare", placeholder: "Compare with job ids: 3 5", size: 24 });
  const charts = h("div", { class: "charts", id: "charts" });
  const drawn = new Map<string, Chart>();
  const loadMetrics = async () => {
    const ids = [id, ...compare.value.split(/[\s,]+/).map(Number).filter((n) => n > 0 && n !== id)];
    const runs = await Promise.all(ids.map(async (j) => [j, (await get(`/jobs/${j}/metrics`)).metrics] as const));
    const keys = new Set<string>();
    for (const [, m] of runs) for (const k of Object.keys(m ?? {})) keys.add(k);
    for (const key of keys) {
      let chart = drawn.get(key);
      if (!chart) {
        const canvas = h("canvas", { "data-metric": key });
        charts.append(h("figure", { class: "chart" }, h("figcaption", {}, key), canvas));
        chart = metricChart(canvas);
        drawn.set(key, chart);
      }
      chart.data.datasets = runs.filter(([, m]) => m?.[key]).map(([j, m], i) => ({
        label: `job ${j}`,
        data: m[key].map((p: number[]) => ({ x: p[0], y: p[1] })),
        borderColor: COLORS[i % COLORS.length],
        pointRadius: m[key].length < 3 ? 3 : 0,
        borderWidth: 1.5,
      }));
      chart.update();
      chart.canvas.dataset.points = String(chart.data.datasets[0]?.data.length ?? 0);
    }
    if (!keys.size) charts.replaceChildren(h("p", { class: "muted" }, "No metrics yet."));
  };
  compare.addEventListener("change", () => loadMetrics().catch((e) => charts.append(errorBox(e))));

  // Logs: per rank, searched on the server, followed live while the job runs.
  const rank = h("select", { id: "log-rank" }, h("option", { value: "" }, "all ranks"));
  for (let r = 0; r < (job.spec.nproc ?? 1) * (job.spec.nnodes ?? 1); r++) rank.append(h("option", { value: r }, `rank ${r}`));
  const grep = h("input", { type: "search", id: "log-grep", placeholder: "Search the logs (word or regex)" });
  const followBox = h("input", { type: "checkbox", id: "log-follow", checked: !ENDED.includes(job.state) });
  const status = h("span", { class: "muted", id: "log-count" });
  const lines: any[] = [];
  const view = new VirtualList<any>(20, (l) =>
    h("div", { class: "logline" }, h("span", { class: "rank" }, `[${l.rank}]`), " ", l.text), "vlist logs");
  view.element.id = "log-lines";
  let following: AbortController | null = null;
  const query = () => `rank=${rank.value}&grep=${encodeURIComponent(grep.value)}`.replace(/^rank=&/, "");
  const loadLogs = async () => {
    following?.abort();
    following = null;
    lines.length = 0;
    // Pages of 5,000 lines, so a long log arrives in pieces.
    for (let from = 0; ; ) {
      const page = await get(`/jobs/${id}/logs?${query()}&from_line=${from}&lines=5000`);
      lines.push(...page.lines);
      from += page.lines.length;
      view.set(lines);
      status.textContent = `${lines.length} lines`;
      if (!page.lines.length || from >= page.total) break;
    }
    if (followBox.checked) {
      view.scrollToEnd();  // following: the newest lines are the ones to see, and each new one stays in view
      following = new AbortController();
      const skip = lines.length;
      let seen = 0;
      follow(`/jobs/${id}/logs?follow=true&${query()}`, (event, data) => {
        if (event === "line" && ++seen > skip) {
          lines.push(JSON.parse(data));
          view.set(lines, true);
          status.textContent = `${lines.length} lines, following`;
        } else if (event === "end") {
          status.textContent = `${lines.length} lines; the job is ${JSON.parse(data).state}`;
        }
      }, following.signal).catch(() => {});
    }
  };
  let typing = 0;
  grep.addEventListener("input", () => {
    clearTimeout(typing);
    typing = window.setTimeout(() => loadLogs().catch((e) => status.replaceChildren(errorBox(e))), 250);
  });
  rank.addEventListener("change", () => loadLogs());
  followBox.addEventListener("change", () => loadLogs());

  const paramList = h("dl", { class: "facts", id: "params" });
  for (const [k, v] of Object.entries(params)) paramList.append(h("dt", {}, k), h("dd", {}, String(v)));
  page.append(head,
    h("h3", {}, "Metrics"), h("div", { class: "tools" }, compare), charts,
    h("h3", {}, "Logs"), h("div", { class: "tools" }, rank, grep, h("label", {}, followBox, " follow"), status), view.element,
    h("h3", {}, "Parameters"), Object.keys(params).length ? paramList : h("p", { class: "muted" }, "None recorded."),
    h("h3", {}, "Spec"), h("pre", {}, JSON.stringify(job.spec, null, 2)));
  await Promise.all([loadMetrics(), loadLogs()]);
  const timer = setInterval(async () => {
    try {
      const j = await get(`/jobs/${id}`);
      drawHead(j);
      if (!ENDED.includes(j.state)) await loadMetrics();
    } catch {
      /* the next tick tries again */
    }
  }, 3000);
  return () => {
    clearInterval(timer);
    following?.abort();
    for (const c of drawn.values()) c.destroy();
  };
}
