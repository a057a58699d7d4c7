// Latency of an ONNX model in ONNX Runtime (CPU), the peer figure of `kiln bench`.
//   node ort_bench.js MODEL INPUT_NAME DIMS [--type float32|int64] [--threads N] [--runs N] [--each]
// DIMS is comma-separated, e.g. 64,1,28,28; one axis may be a range, 1,20..59,64,
// whose lengths are run in turn (as `kiln bench --shape x=1x20..59x64`).
// Prints one line:
//   batch B p50 X p90 Y p99 Z samples/s S
// and with --each, then one per shape of the range from the same runs:
//   shape 1,37,64 p50 X p90 Y
const ort = require('./load_ort');

async function main() {
  const [model, inputName, dimsText, ...rest] = process.argv.slice(2);
  const flag = (name, fallback) => {
    const i = rest.indexOf(name);
    return i >= 0 ? rest[i + 1] : fallback;
  };
  const threads = Number(flag('--threads', 1));
  const runs = Number(flag('--runs', 50));
  const type = flag('--type', 'float32');
  // Every shape DIMS stands for: one, or one per length of its range.
  const parts = dimsText.split(',');
  const at = parts.findIndex((p) => p.includes('..'));
  let lengths = [null];
  if (at >= 0) {
    const [lo, hi] = parts[at].split('..').map(Number);
    lengths = Array.from({ length: hi - lo + 1 }, (_, i) => lo + i);
  }
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: threads, interOpNumThreads: 1, graphOptimizationLevel: 'all',
  });
  const feedsList = lengths.map((length) => {
    const shape = parts.map((p, i) => (i === at ? length : Number(p)));
    const count = shape.reduce((a, b) => a * b, 1);
    const data = type === 'int64' ? new BigInt64Array(count) : Float32Array.from({ length: count }, () => Math.random());
    return { [inputName]: new ort.Tensor(type, data, shape) };
  });
  const dims = parts.map((p, i) => (i === at ? lengths[0] : Number(p)));
  for (let i = 0; i < Math.max(5, feedsList.length); ++i) await session.run(feedsList[i % feedsList.length]);
  const ms = [];
  const msOfShape = feedsList.map(() => []);
  for (let i = 0; i < runs; ++i) {
    const t0 = process.hrtime.bigint();
    await session.run(feedsList[i % feedsList.length]);
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
    msOfShape[i % feedsList.length].push(ms[ms.length - 1]);
  }
  // Samples are rows of axis 0, which the range may be.
  const batchOf = (i) => (at === 0 ? lengths[i % lengths.length] : dims[0]);
  let rows = 0;
  for (let i = 0; i < runs; ++i) rows += batchOf(i);
  const mean = ms.reduce((a, b) => a + b, 0) / rows;
  const pct = (values, p) => {
    const sorted = [...values].sort((a, b) => a - b);
    return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))].toFixed(3);
  };
  console.log(`batch ${dims[0]} p50 ${pct(ms, 0.5)} p90 ${pct(ms, 0.9)} p99 ${pct(ms, 0.99)} samples/s ${(1000 / mean).toFixed(0)}`);
  if (rest.includes('--each') && at >= 0) {
    lengths.forEach((length, i) => {
      const shape = parts.map((p, j) => (j === at ? length : Number(p)));
      console.log(`shape ${shape.join(',')} p50 ${pct(msOfShape[i], 0.5)} p90 ${pct(msOfShape[i], 0.9)}`);
    });
  }
}

main().catch((e) => {
  console.error(`ort_bench: ${e.message}`);
  process.exit(1);
});
