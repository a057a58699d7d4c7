// Greedy decoding in ONNX Runtime (CPU), the peer of `kiln generate`: an LLM
// decoder with its key/value cache as inputs and outputs (input_ids,
// attention_mask, past_key_values.N.key/value in; logits, present.N.* out).
//   node ort_generate.js MODEL --prompt 1,2,3 [--tokens N] [--threads N] [--warmup N]
// Prints, as `kiln generate` does:
//   tokens: T1 T2 ...
//   prefill X ms, decode p50 Y ms/token (Z tokens/s)
const ort = require('./load_ort');

function ids(type, values) {
  return new ort.Tensor(
      type, type === 'int64' ? BigInt64Array.from(values.map(BigInt)) : Int32Array.from(values), [1, values.length]);
}

// A float16 value from its bits (ONNX Runtime hands float16 tensors over as Uint16Array).
function halfToFloat(h) {
  const sign = h & 0x8000 ? -1 : 1, exponent = (h >> 10) & 0x1f, fraction = h & 0x3ff;
  if (exponent === 0) return sign * fraction * 2 ** -24;
  if (exponent === 31) return fraction ? NaN : sign * Infinity;
  return sign * (1 + fraction / 1024) * 2 ** (exponent - 15);
}

async function generate(session, prompt, count) {
  const meta = Object.fromEntries(session.inputMetadata.map((m) => [m.name, m]));
  const feeds = {};
  for (const m of session.inputMetadata)
    if (m.name.startsWith('past_key_values'))
      feeds[m.name] = new ort.Tensor(
          m.type, m.type === 'float16' ? new Uint16Array(0) : new Float32Array(0), [1, m.shape[1], 0, m.shape[3]]);
  const tokens = [];
  const stepMs = [];
  let prefillMs = 0;
  let step = prompt;
  let seen = 0;
  while (tokens.length < count) {
    feeds.input_ids = ids(meta.input_ids.type, step);
    const total = seen + step.length;
    if (meta.attention_mask) feeds.attention_mask = ids(meta.attention_mask.type, new Array(total).fill(1));
    if (meta.position_ids) feeds.position_ids = ids(meta.position_ids.type, step.map((_, i) => seen + i));
    const t0 = process.hrtime.bigint();
    const out = await session.run(feeds);
    const logits = out.logits;
    const vocab = logits.dims[2];
    const raw = logits.data.subarray(logits.data.length - vocab);
    const last = logits.type === 'float16' ? Array.from(raw, halfToFloat) : raw;
    let next = 0;
    for (let i = 1; i < vocab; ++i)
      if (last[i] > last[next]) next = i;
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    if (seen === 0)
      prefillMs = ms;
    else
      stepMs.push(ms);
    for (const name of Object.keys(feeds))
      if (name.startsWith('past_key_values')) feeds[name] = out[name.replace('past_key_values', 'present')];
    tokens.push(next);
    seen = total;
    step = [next];
  }
  return {tokens, prefillMs, stepMs};
}

async function main() {
  const [model, ...rest] = process.argv.slice(2);
  const flag = (name, fallback) => {
    const i = rest.indexOf(name);
    return i >= 0 ? rest[i + 1] : fallback;
  };
  const prompt = flag('--prompt', '').split(',').filter((s) => s !== '').map(Number);
  if (!model || prompt.length === 0) throw new Error('usage: ort_generate.js MODEL --prompt 1,2,3 [--tokens N]');
  const count = Number(flag('--tokens', 16));
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: Number(flag('--threads', 1)),
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
  });
  for (let i = 0; i < Number(flag('--warmup', 1)); ++i) await generate(session, prompt, count);
  const g = await generate(session, prompt, count);
  const sorted = [...g.stepMs].sort((a, b) => a - b);
  const p50 = sorted.length ? sorted[Math.floor(sorted.length / 2)] : 0;
  console.log(`tokens: ${g.tokens.join(' ')}`);
  console.log(
      `prefill ${g.prefillMs.toFixed(3)} ms, decode p50 ${p50.toFixed(3)} ms/token ` +
      `(${p50 > 0 ? (1000 / p50).toFixed(1) : 0} tokens/s)`);
}

main().catch((e) => {
  console.error(e.message || e);
  process.exit(1);
});
