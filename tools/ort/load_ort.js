// Loads onnxruntime-node with TMPDIR pointed at a folder of its own, removed
// at exit: the library writes an empty mat-debug-PID.log into TMPDIR on every
// start, and runs in tests and benchmarks would otherwise leave them in /tmp.
const fs = require('fs');
const os = require('os');
const path = require('path');

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-ort-'));
process.env.TMPDIR = scratch;
process.on('exit', () => fs.rmSync(scratch, { recursive: true, force: true }));
module.exports = require('onnxruntime-node');
