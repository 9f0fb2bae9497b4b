// edgeforge's browser runner: loads onnxruntime-web (wasm, SIMD + threads), times the artifact at
// batch 1 and runs the evaluation set, reporting events the host reads with window.__ef.take().
// The host computes drift from the outputs with the same code as every other device.
const queue = [];
let stopRequested = false;
let workers = 0;
window.__ef = {
  take() { return queue.splice(0, queue.length); },
  stop() { stopRequested = true; },
};

function emit(event, fields) {
  queue.push(Object.assign({ event: event }, fields || {}));
  document.getElementById('status').textContent = 'edgeforge: ' + event;
}

function message(e) {
  if (e && e.message) return String(e.message);
  return String(e);
}

window.addEventListener('error', (e) => emit('error', { kind: 'page', message: message(e.error || e.message) }));
window.addEventListener('unhandledrejection', (e) => emit('error', { kind: 'page', message: message(e.reason) }));

// Count the Web Workers onnxruntime-web starts: its threads are workers on a SharedArrayBuffer.
const NativeWorker = window.Worker;
window.Worker = class extends NativeWorker {
  constructor(...args) { super(...args); workers += 1; }
};

// wasm-feature-detect's SIMD probe: a module using v128 validates only where SIMD is supported.
const SIMD_PROBE = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 10, 1, 8,
  0, 65, 0, 253, 15, 253, 98, 11]);

const ARRAYS = { float32: Float32Array, float64: Float64Array, int32: Int32Array, int64: BigInt64Array,
  uint8: Uint8Array, int8: Int8Array, bool: Uint8Array };

async function fetchBytes(url) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(url + ': HTTP ' + r.status);
  return r.arrayBuffer();
}

function median(xs) {
  const s = xs.slice().sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

function sliceFeeds(ort, inputs, data, start, count) {
  const feeds = {};
  for (const inp of inputs) {
    const per = inp.shape.slice(1).reduce((a, b) => a * b, 1);
    const Arr = ARRAYS[inp.dtype];
    const arr = new Arr(data[inp.name], start * per * Arr.BYTES_PER_ELEMENT, count * per);
    feeds[inp.name] = new ort.Tensor(inp.dtype === 'bool' ? 'bool' : inp.dtype, arr, [count].concat(inp.shape.slice(1)));
  }
  return feeds;
}

// onnxruntime-web's runs resolve as microtasks: a loop of them never lets a task in, and the host's
// reads of window.__ef (and its stop) are tasks. Between runs, every 50 ms, give way to them.
let lastBreath = performance.now();
async function breathe() {
  if (performance.now() - lastBreath < 50) return;
  await new Promise((resolve) => setTimeout(resolve, 0));
  lastBreath = performance.now();
}

async function timedOnce(session, feeds) {
  await breathe();
  const t0 = performance.now();
  await session.run(feeds);
  return performance.now() - t0;
}

// The runner's warmup_until_stable: the median of the last 5 runs within 5% of the 5 before.
async function warmup(session, feeds, spec) {
  const times = [];
  if (spec.warmups !== 'auto') {
    for (let i = 0; i < spec.warmups && !stopRequested; i++) times.push(await timedOnce(session, feeds));
    return [times, null];
  }
  const start = performance.now();
  for (;;) {
    times.push(await timedOnce(session, feeds));
    const n = times.length;
    if (n >= 10) {
      const a = median(times.slice(n - 10, n - 5));
      const b = median(times.slice(n - 5));
      if (Math.abs(b - a) <= 0.05 * Math.max(a, b, 1e-9)) return [times, true];
    }
    if (n >= 1000 || performance.now() - start > 30000 || stopRequested) return [times, false];
  }
}

function base64(buffer) {
  const bytes = new Uint8Array(buffer);
  let s = '';
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

async function evaluate(ort, session, inputs, data, spec) {
  const names = session.outputNames;
  const parts = names.map(() => []);
  const shapes = names.map(() => null);
  const types = names.map(() => null);
  for (let i = 0; i < spec.samples; i += spec.drift_batch) {
    if (stopRequested) return null;
    await breathe();
    const count = Math.min(spec.drift_batch, spec.samples - i);
    const out = await session.run(sliceFeeds(ort, inputs, data, i, count));
    if (i === 0) {
      const perSample = names.reduce((a, name) => a + out[name].data.byteLength / Math.max(1, out[name].dims[0]), 0);
      if (perSample * spec.samples > spec.outputs_max_bytes) {
        return { skipped: 'the evaluation outputs (' + (perSample * spec.samples / 1048576).toFixed(1)
          + ' MB) are over the ' + (spec.outputs_max_bytes / 1048576).toFixed(1) + ' MB the page sends back' };
      }
    }
    names.forEach((name, j) => {
      const t = out[name];
      parts[j].push(new Uint8Array(t.data.buffer.slice(t.data.byteOffset, t.data.byteOffset + t.data.byteLength)));
      shapes[j] = shapes[j] ? [shapes[j][0] + t.dims[0]].concat(t.dims.slice(1)) : t.dims.slice();
      types[j] = t.type;
    });
  }
  return names.map((name, j) => {
    const total = parts[j].reduce((a, p) => a + p.length, 0);
    const all = new Uint8Array(total);
    let at = 0;
    for (const p of parts[j]) { all.set(p, at); at += p.length; }
    return { name: name, dtype: types[j], shape: shapes[j], data: base64(all.buffer) };
  });
}

async function main() {
  emit('start', { time: Date.now() / 1000 });
  const spec = await (await fetch('spec.json')).json();
  const isolated = self.crossOriginIsolated === true;
  const fp = { user_agent: navigator.userAgent, cross_origin_isolated: isolated,
    shared_array_buffer: typeof SharedArrayBuffer !== 'undefined',
    hardware_concurrency: navigator.hardwareConcurrency || null,
    wasm_simd: WebAssembly.validate(SIMD_PROBE) };
  if (spec.threads > 1 && !isolated) {
    emit('fingerprint', { when: 'page', fingerprint: fp });
    emit('error', { kind: 'isolation', message: 'the page is not cross-origin isolated (no COOP/COEP): '
      + 'SharedArrayBuffer is missing and onnxruntime-web would run 1 thread, not ' + spec.threads });
    return;
  }
  const ort = await import('./ort/' + spec.entry);
  ort.env.wasm.numThreads = spec.threads;
  ort.env.wasm.wasmPaths = new URL('ort/', location.href).href;
  ort.env.logLevel = 'error';
  const model = await fetchBytes(spec.artifact);
  const data = {};
  for (const inp of spec.inputs) data[inp.name] = await fetchBytes(inp.file);
  emit('files', { checked: [spec.artifact].concat(spec.inputs.map((i) => i.file)) });
  const t0 = performance.now();
  const session = await ort.InferenceSession.create(model, { executionProviders: ['wasm'],
    graphOptimizationLevel: 'all' });
  const loadMs = performance.now() - t0;
  fp.threads = ort.env.wasm.numThreads;
  fp.workers_started = workers;
  fp.wasm_threads = isolated && fp.shared_array_buffer && ort.env.wasm.numThreads > 1;
  emit('fingerprint', { when: 'page', fingerprint: fp });
  const runtime = { name: 'onnxruntime-web', version: (ort.env.versions || {}).web || null,
    providers: ['wasm'], threads: ort.env.wasm.numThreads, load: { first_ms: loadMs } };
  emit('runtime', runtime);
  const one = sliceFeeds(ort, spec.inputs, data, 0, 1);
  const [warm, stable] = await warmup(session, one, spec);
  const samples = [];
  for (let i = 0; i < spec.runs && !stopRequested; i++) samples.push(await timedOnce(session, one));
  const lat = { warmups: warm.length, warmup_stable: stable, warmup_ms: warm, samples_ms: samples,
    batch: 1, peak_rss_mb: null, runtime: runtime };
  fp.workers_started = workers;
  if (stopRequested) {
    emit('latency', Object.assign(lat, { interrupted: true }));
    return;
  }
  emit('latency', lat);
  if (spec.drift) {
    const outputs = await evaluate(ort, session, spec.inputs, data, spec);
    if (outputs === null) {
      emit('stopped', {});
      return;
    }
    if (outputs.skipped) emit('evaluation', { skipped: outputs.skipped });
    else emit('evaluation', { samples: spec.samples, batch: spec.drift_batch, outputs: outputs });
  }
  emit('done', { time: Date.now() / 1000 });
}

main().catch((e) => emit('error', { kind: 'runtime', message: message(e) }));
