// The console end to end in a real browser: Playwright (playwright-core)
// driving Debian's headless Chromium against a studio with a finished job, a
// registered model and a running service, all made with the kiln CLI.
// KILN: the kiln executable; KILN_CONSOLE_SHOTS: where screenshots of failed
// steps go. Run by ctest (console_e2e).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, mkdirSync, writeFileSync, rmSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { deflateSync, gunzipSync } from "node:zlib";
import { chromium } from "playwright-core";

const kiln = process.env.KILN;
const chrome = process.env.CHROMIUM || "/usr/bin/chromium";
const shots = process.env.KILN_CONSOLE_SHOTS || join(tmpdir(), "kiln-console-shots");
const work = mkdtempSync(join(tmpdir(), "kiln-console-"));
let studio, url, writer, reader, browser, page;

function run(...args) {
  return execFileSync(kiln, args, { env: { ...process.env, KILN_STUDIO_URL: url, KILN_STUDIO_TOKEN: writer }, encoding: "utf8" });
}

async function api(path, init = {}) {
  const r = await fetch(url + "/api/v1" + path, { ...init, headers: { Authorization: `Bearer ${writer}`, ...(init.headers ?? {}) } });
  return r.json();
}

before(async () => {
  assert.ok(kiln, "set KILN to the kiln executable");
  assert.ok(existsSync(chrome), `no browser at ${chrome}: apt-get install chromium (scripts/install-deps.sh does), or set CHROMIUM`);
  const data = join(work, "studio");
  writer = execFileSync(kiln, ["studio", "token", "create", "--data", data, "--name", "ci", "--scope", "write"], { encoding: "utf8" }).trim();
  reader = execFileSync(kiln, ["studio", "token", "create", "--data", data, "--name", "viewer", "--scope", "read"], { encoding: "utf8" }).trim();
  // A user who views the default project, where everything here is made.
  writeFileSync(join(work, "password"), "ann's password\n");
  execFileSync(kiln, ["studio", "user", "create", "ann", "--data", data, "--password-file", join(work, "password")]);
  execFileSync(kiln, ["studio", "project", "grant", "default", "ann", "viewer", "--data", data]);
  studio = spawn(kiln, ["studio", "serve", "--data", data, "--port", "0", "--access-log", ""], { stdio: ["ignore", "ignore", "pipe"] });
  url = await new Promise((resolve, reject) => {
    let text = "";
    studio.stderr.on("data", (d) => {
      text += d;
      const m = text.match(/ready on (http:\/\/[0-9.]+:\d+)/);
      if (m) resolve(m[1]);
    });
    studio.on("exit", () => reject(new Error("the studio exited: " + text)));
  });
  run("store", "mb", "studio://data");
  run("store", "cp", "/usr/share/datasets/fashion-mnist", "studio://data/fmnist");
  writeFileSync(join(work, "w1.yaml"), "model: mlp\nmodel_config: {hidden: [64]}\ndataset: fashion_mnist\n" +
    "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\nepochs: 1\nmax_steps: 120\nbatch_size: 64\nseed: 0\n");
  writeFileSync(join(work, "job.yaml"), `name: w1-console\nrecipe: ${join(work, "w1.yaml")}\n` +
    "inputs: {data_url: studio://data/fmnist}\noutput: studio://runs/w1\nenv: {KILN_NUM_THREADS: '1'}\n");
  run("job", "submit", join(work, "job.yaml"), "--wait");
  run("model", "register", "fmnist", "--job", "1", "--wait");
  run("model", "alias", "fmnist", "production", "1");
  run("service", "deploy", "fmnist", "--model", "fmnist@production", "--instances", "1");
  for (let i = 0; i < 600 && (await api("/services/fmnist")).state !== "Running"; i++) await new Promise((r) => setTimeout(r, 100));
  browser = await chromium.launch({ executablePath: chrome, args: ["--no-sandbox", "--disable-gpu"] });
  page = await browser.newPage();
});

after(async () => {
  await browser?.close();
  try {
    run("service", "stop", "fmnist");
  } catch {}
  studio?.kill("SIGTERM");
  await new Promise((r) => (studio && studio.exitCode === null ? studio.on("exit", r) : r()));
  rmSync(work, { recursive: true, force: true });
});

// The first image and label of Fashion-MNIST's test set (Debian's idx files).
function firstTestImage() {
  const dir = "/usr/share/datasets/fashion-mnist";
  const images = gunzipSync(readFileSync(join(dir, "t10k-images-idx3-ubyte.gz")));
  const labels = gunzipSync(readFileSync(join(dir, "t10k-labels-idx1-ubyte.gz")));
  return [images.subarray(16, 16 + 784), labels[8]];
}

// A greyscale PNG of width x height bytes.
function greyPng(pixels, width, height) {
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (bytes) => {
    let c = 0xffffffff;
    for (const b of bytes) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  };
  const chunk = (type, data) => {
    const out = Buffer.alloc(12 + data.length);
    out.writeUInt32BE(data.length, 0);
    out.write(type, 4, "ascii");
    data.copy(out, 8);
    out.writeUInt32BE(crc(out.subarray(4, 8 + data.length)), 8 + data.length);
    return out;
  };
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header[8] = 8;  // bit depth; colour type 0 (grey), the rest 0
  const rows = Buffer.alloc((width + 1) * height);
  for (let y = 0; y < height; y++) Buffer.from(pixels.subarray(y * width, (y + 1) * width)).copy(rows, y * (width + 1) + 1);
  return Buffer.concat([Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk("IHDR", header),
                        chunk("IDAT", deflateSync(rows)), chunk("IEND", Buffer.alloc(0))]);
}

// Runs a step; on failure saves a screenshot of the page as it was, then of
// every page of the console, so the failure can be seen in its context.
async function step(name, body) {
  try {
    await body();
  } catch (e) {
    mkdirSync(shots, { recursive: true });
    await page.screenshot({ path: join(shots, `${name}-failed.png`), fullPage: true }).catch(() => {});
    for (const [file, hash] of [["jobs", "#/jobs"], ["job-1", "#/jobs/1"], ["store", "#/store/runs/w1"],
                                ["models", "#/models"], ["model-fmnist", "#/models/fmnist"],
                                ["services", "#/services"], ["service-fmnist", "#/services/fmnist"]]) {
      await page.goto(`${url}/${hash}`).catch(() => {});
      await page.waitForTimeout(500);
      await page.screenshot({ path: join(shots, `${name}-page-${file}.png`), fullPage: true }).catch(() => {});
    }
    throw e;
  }
}

async function signIn(token) {
  await page.goto(url + "/");
  await page.fill("#token", token);
  await page.click("#signin button[type=submit]");
  await page.waitForSelector("#who");
}

test("a writer signs in, reads the job, its curve and logs, sets an alias, changes a weight and tries the model", async () => {
  await step("load", async () => {
    await page.goto(url + "/");
    await page.waitForSelector("#signin");
    // That first visit also started the browser's renderer. The console's own
    // load is timed after it, each in a fresh context (an empty cache), best
    // of three, so that a test running beside this one on a busy machine is
    // not taken for the console being slow.
    const times = [];
    for (let i = 0; i < 3; i++) {
      const context = await browser.newContext();
      const fresh = await context.newPage();
      const started = Date.now();
      await fresh.goto(url + "/");
      await fresh.waitForSelector("#signin");
      times.push(Date.now() - started);
      await context.close();
    }
    console.log(`# the console loaded in ${times.join(", ")} ms`);
    assert.ok(Math.min(...times) < 1000, `the console took ${Math.min(...times)} ms to load at best`);
  });
  await step("signin", async () => {
    await signIn(writer);
    assert.match(await page.textContent("#who"), /ci \(write\)/);
  });
  await step("jobs", async () => {
    await page.waitForSelector("[data-job='1']");
    const row = await page.textContent("[data-job='1']");
    assert.match(row, /w1-console/);
    assert.match(row, /Completed/);
    assert.match(row, /test_accuracy 0\.\d+/, "the list shows the test set's accuracy first");
    await page.fill("#job-filter", "no-such-job");
    assert.equal(await page.locator("[data-job]").count(), 0);
    await page.fill("#job-filter", "w1");
    await page.click("[data-job='1']");
  });
  await step("job", async () => {
    await page.waitForSelector("#job-state");
    assert.match(await page.textContent("#job-state"), /Completed/);
    assert.match(await page.textContent("#job-stages"), /^scheduling [\d.]+ s, preparing [\d.]+ s, running [\d.]+ s, end$/);
    const curve = page.locator("canvas[data-metric='loss']");
    await curve.waitFor();
    assert.ok(Number(await curve.getAttribute("data-points")) > 10, "the loss curve has its points");
    await page.fill("#log-grep", "accuracy");
    await page.waitForFunction(() => /lines/.test(document.querySelector("#log-count")?.textContent ?? "") &&
      [...document.querySelectorAll("#log-lines .logline")].length > 0 &&
      [...document.querySelectorAll("#log-lines .logline")].every((l) => /accuracy/.test(l.textContent)));
  });
  await step("store", async () => {
    await page.goto(url + "/#/store/runs/w1");
    await page.waitForSelector("#objects");
    assert.match(await page.textContent("#objects"), /checkpoint\.safetensors/);
    const file = join(work, "notes.txt");
    writeFileSync(file, "trained from the console test\n");
    await page.setInputFiles("#upload-file", file);
    await page.click("form.tools button[type=submit]");
    await page.waitForSelector("text=uploaded notes.txt");
    const listed = await api("/buckets/runs/objects?prefix=w1/notes.txt");
    assert.equal(listed.objects.length, 1);
    assert.equal(listed.objects[0].size, 30);
  });
  await step("alias", async () => {
    await page.goto(url + "/#/models/fmnist");
    await page.waitForSelector("#alias-form");
    await page.fill("#alias-name", "staging");
    await page.click("#alias-form button[type=submit]");
    await page.waitForSelector("text=fmnist@staging is version 1");
    const model = await api("/models/fmnist");
    assert.deepEqual(model.versions[0].aliases.sort(), ["production", "staging"]);
  });
  await step("weight", async () => {
    await page.goto(url + "/#/services/fmnist");
    const weight = page.locator("input.weight").first();
    await weight.waitFor();
    await weight.fill("40");
    await weight.dispatchEvent("change");
    await page.waitForSelector("input.weight.saved");
    const service = await api("/services/fmnist");
    assert.equal(service.versions[0].weight, 40);
  });
  await step("try-it", async () => {
    // Fashion-MNIST's first test image as a PNG file, through the form and the studio.
    const [image, label] = firstTestImage();
    const file = join(work, "test-image.png");
    writeFileSync(file, greyPng(image, 28, 28));
    await page.setInputFiles("#try-file", file);
    await page.click("#try-send");
    await page.waitForSelector("#prediction");
    const classes = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"];
    assert.equal(await page.textContent("#prediction"), `${classes[label]} (class ${label})`);
    // The request shows in the service's request log on the page.
    await page.waitForSelector("#service-requests tr.request");
    assert.match(await page.textContent("#service-requests tr.request"), /v1.*#\d+.*200/);
    assert.equal(await page.textContent("td.scaling"), "fixed");
  });
  await step("notebooks", async () => {
    // A notebook listed with its spec and a link that opens it with the signed-in token.
    if (!existsSync("/usr/bin/jupyter-notebook")) return;
    await api("/notebooks", { method: "POST", body: JSON.stringify({ name: "scratch", spec: "cpu-1" }),
                              headers: { "Content-Type": "application/json" } });
    for (let i = 0; i < 300 && (await api("/notebooks/scratch")).state !== "Running"; i++) await new Promise((r) => setTimeout(r, 100));
    await page.goto(url + "/#/notebooks");
    await page.waitForSelector("[data-notebook='scratch'] a.open");
    assert.match(await page.textContent("[data-notebook='scratch']"), /default.*1 CPU core, 4096 MB.*Running/);
    const href = await page.getAttribute("[data-notebook='scratch'] a.open", "href");
    assert.match(href, /\/api\/v1\/notebooks\/scratch\/open\?token=kst_/);
    // The link opens Jupyter itself, through the studio, in the browser.
    const jupyter = await browser.newPage();
    try {
      await jupyter.goto(url + href);
      await jupyter.waitForSelector("#notebook_list");
      assert.match(jupyter.url(), /\/api\/v1\/notebooks\/scratch\/proxy\/tree/);
    } finally {
      await jupyter.close();
    }
    await api("/notebooks/scratch/stop", { method: "POST" });
  });
  await step("failed-version", async () => {
    // A version that fails its check shows why, on the page.
    await fetch(url + "/api/v1/models/broken/versions", { method: "POST", body: "not a model",
      headers: { Authorization: `Bearer ${writer}`, "Content-Type": "application/octet-stream" } });
    for (let i = 0; i < 300 && (await api("/models/broken")).versions?.[0]?.state !== "FAILED"; i++)
      await new Promise((r) => setTimeout(r, 100));
    await page.goto(url + "/#/models/broken");
    const reason = page.locator("tr[data-version='1'] .reason");
    await reason.waitFor();
    assert.ok((await reason.textContent()).length > 10, "the failure's reason is on the page");
    assert.ok(await reason.isVisible());
  });
  await step("versions-fit", async () => {
    // The versions table fits a 1280-px window: no sideways scrolling.
    await page.setViewportSize({ width: 1280, height: 800 });
    await page.goto(url + "/#/models/fmnist");
    await page.waitForSelector("#versions");
    const widths = await page.evaluate(() => {
      const box = document.querySelector("#versions").parentElement;
      return [document.documentElement.scrollWidth, box.scrollWidth, box.clientWidth];
    });
    assert.ok(widths[0] <= 1280 && widths[1] <= widths[2], `widths ${widths.join(", ")}`);
  });
  await step("follow", async () => {
    // A running job's log, opened after it printed more than a screen: following shows its newest lines.
    const script = "seq 1 400 | sed 's/^/early /'; i=0; while [ $i -lt 400 ]; do i=$((i+1)); echo tick $i; sleep 0.05; done";
    const spec = { name: "ticker", command: ["/bin/sh", "-c", script, "job"], nproc: 1 };
    const { id } = await api("/jobs", { method: "POST", body: JSON.stringify(spec), headers: { "Content-Type": "application/json" } });
    for (let i = 0; i < 300 && (await api(`/jobs/${id}/logs`)).total < 420; i++) await new Promise((r) => setTimeout(r, 100));
    await page.goto(url + `/#/jobs/${id}`);
    await page.waitForFunction(() => /following/.test(document.querySelector("#log-count")?.textContent ?? ""));
    const seen = await page.evaluate(() => document.querySelector("#log-count").textContent);
    await page.waitForFunction((before) => document.querySelector("#log-count").textContent !== before, seen);
    const [atEnd, text] = await page.evaluate(() => {
      const el = document.querySelector("#log-lines");
      return [el.scrollTop + el.clientHeight >= el.scrollHeight - 25, el.textContent];
    });
    assert.ok(atEnd, "the followed log is scrolled to its end");
    assert.match(text, /tick \d+/, "the newest lines are in view");
    await api(`/jobs/${id}/stop`, { method: "POST" });
  });
});

test("a reader sees the same pages without the controls that write", async () => {
  await page.evaluate(() => sessionStorage.clear());
  await step("reader", async () => {
    await signIn(reader);
    await page.goto(url + "/#/jobs/1");
    await page.waitForSelector("#job-state");
    assert.equal(await page.locator("#retry").count(), 0);
    await page.goto(url + "/#/models/fmnist");
    await page.waitForSelector("#versions");
    assert.equal(await page.locator("#alias-form").count(), 0);
    await page.goto(url + "/#/services/fmnist");
    await page.waitForSelector("input.weight");
    assert.equal(await page.locator("input.weight").first().isDisabled(), true);
  });
  await step("user", async () => {
    // A user signs in with a password: a wrong one is refused on the form, the right one shows the user's role.
    await page.evaluate(() => sessionStorage.clear());
    await page.goto(url + "/");
    await page.fill("#user", "ann");
    await page.fill("#password", "not the password");
    await page.click("#signin button[type=submit]");
    await page.waitForSelector("#signin .error");
    assert.match(await page.textContent("#signin .error"), /wrong user name or password/);
    await page.fill("#user", "ann");
    await page.fill("#password", "ann's password");
    await page.click("#signin button[type=submit]");
    await page.waitForSelector("#who");
    assert.equal(await page.textContent("#who"), "ann (viewer in default)");
    await page.goto(url + "/#/jobs/1");
    await page.waitForSelector("#job-state");
    assert.equal(await page.locator("#retry").count(), 0);
  });
});

test("a thousand jobs stay quick to list and filter", async () => {
  // The list as the API would give it for 1,000 jobs (made up here: running
  // a thousand real jobs would take minutes).
  // The two newest after the first wait in the queue.
  const jobs = Array.from({ length: 1000 }, (_, i) => ({
    id: 1000 - i, name: `sweep-${1000 - i}`, state: i === 1 || i === 2 ? "Pending" : i % 7 ? "Completed" : "Failed",
    stage: i === 1 || i === 2 ? "queued" : "end",
    reason: i === 1 || i === 2 ? `position ${3 - i} in the queue, waiting for 2 CPU cores (2 of 2 in use by jobs 1000)` : "",
    created_ms: Date.now() - i * 60000, started_ms: Date.now() - i * 60000, ended_ms: Date.now() - i * 60000 + 42000,
    final_metrics: { loss: 0.3 + i / 1e4, accuracy: 0.9 - i / 1e5 }, tags: { team: i % 2 ? "vision" : "speech" },
  }));
  await page.route("**/api/v1/jobs?limit=*", (route) =>
    route.fulfill({ status: 200, contentType: "application/json", body: JSON.stringify({ jobs }) }));
  try {
    await page.evaluate(() => sessionStorage.clear());
    await signIn(writer);
    await step("many-jobs", async () => {
      const started = Date.now();
      await page.goto(url + "/#/jobs");
      await page.waitForFunction(() => document.querySelector("#job-count")?.textContent === "1000 of 1000");
      console.log(`# 1,000 jobs listed in ${Date.now() - started} ms`);
      const rows = await page.locator("[data-job]").count();
      assert.ok(rows > 0 && rows < 100, `${rows} job rows in the page at once`);
      assert.match(await page.locator("[data-job='999'] .queued").textContent(), /position 2 in the queue, waiting for 2 CPU cores/);
      assert.match(await page.locator("[data-job='998'] .queued").textContent(), /position 1 in the queue/);
      const typed = Date.now();
      await page.fill("#job-filter", "failed team=speech");
      await page.waitForFunction(() => document.querySelector("#job-count")?.textContent === "72 of 1000");
      assert.ok(Date.now() - typed < 500, `filtering took ${Date.now() - typed} ms`);
    });
  } finally {
    await page.unroute("**/api/v1/jobs?limit=*");
  }
});

test("a 100,000-line log stays quick", async () => {
  // The log viewer keeps only the lines in view in the page.
  await page.evaluate(() => sessionStorage.clear());
  await signIn(writer);
  await step("many-lines", async () => {
    const spec = { name: "chatty", command: ["/bin/sh", "-c", "seq 1 100000 | sed 's/^/line /'", "job"], nproc: 1 };
    const { id } = await api("/jobs", { method: "POST", body: JSON.stringify(spec), headers: { "Content-Type": "application/json" } });
    for (let i = 0; i < 600 && (await api(`/jobs/${id}`)).state !== "Completed"; i++) await new Promise((r) => setTimeout(r, 100));
    const started = Date.now();
    await page.goto(url + `/#/jobs/${id}`);
    await page.waitForFunction(() => /^100000 lines/.test(document.querySelector("#log-count")?.textContent ?? ""), null, { timeout: 20000 });
    const shown = await page.locator("#log-lines .logline").count();
    assert.ok(shown < 200, `${shown} log lines in the page at once`);
    console.log(`# a 100,000-line log loaded in ${Date.now() - started} ms`);
    const scrolled = Date.now();
    await page.evaluate(() => { document.querySelector("#log-lines").scrollTop = 1e9; });
    await page.waitForFunction(() => /line 100000/.test(document.querySelector("#log-lines")?.textContent ?? ""));
    assert.ok(Date.now() - scrolled < 1000, "scrolling to the end took over a second");
  });
});
