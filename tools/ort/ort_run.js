// Runs an ONNX model in ONNX Runtime (CPU) for Kiln's tests and benchmarks.
//   node ort_run.js MODEL SPEC.json OUT_DIR [--threads N] [--bench RUNS]
// SPEC.json: {"inputs": [{"name", "type", "dims", "file"}]} where each file
// holds the raw little-endian elements. Writes OUT_DIR/outputs.json listing
// the outputs (name, type, dims, file) next to their raw files; with --bench,
// also the latency of each run in milliseconds.
const fs = require('fs');
const path = require('path');
const ort = require('./load_ort');

const arrays = {
  float32: Float32Array, float64: Float64Array, int32: Int32Array, int64: BigInt64Array,
  uint8: Uint8Array, int8: Int8Array, bool: Uint8Array,
};

async function main() {
  const [model, specPath, outDir, ...rest] = process.argv.slice(2);
  const flag = (name, fallback) => {
    const i = rest.indexOf(name);
    return i >= 0 ? Number(rest[i + 1]) : fallback;
  };
  const threads = flag('--threads', 1);
  const benchRuns = flag('--bench', 0);
  const spec = JSON.parse(fs.readFileSync(specPath, 'utf8'));
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: threads, interOpNumThreads: 1, graphOptimizationLevel: 'all',
  });
  const feeds = {};
  for (const input of spec.inputs) {
    const bytes = fs.readFileSync(input.file);
    const Ctor = arrays[input.type];
    const data = new Ctor(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
    feeds[input.name] = new ort.Tensor(input.type, input.type === 'bool' ? Uint8Array.from(data) : data, input.dims);
  }
  const results = await session.run(feeds);
  fs.mkdirSync(outDir, { recursive: true });
  const outputs = [];
  for (const name of session.outputNames) {
    const t = results[name];
    const file = path.join(outDir, `${name.replace(/[^A-Za-z0-9_.-]/g, '_')}.bin`);
    fs.writeFileSync(file, Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
    outputs.push({ name, type: t.type, dims: t.dims.map(Number), file });
  }
  const report = { outputs };
  if (benchRuns > 0) {
    for (let i = 0; i < 3; ++i) await session.run(feeds);
    report.latency_ms = [];
    for (let i = 0; i < benchRuns; ++i) {
      const t0 = process.hrtime.bigint();
      await session.run(feeds);
      report.latency_ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
  }
  fs.writeFileSync(path.join(outDir, 'outputs.json'), JSON.stringify(report));
}

main().catch((e) => {
  console.error(`ort_run: ${e.message}`);
  process.exit(1);
});
