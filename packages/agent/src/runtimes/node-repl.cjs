'use strict';
// The JavaScript side of a code context (packages/agent/src/services/code-runtimes.ts says more).
// Run as `node -e <this text>`: each cell runs with vm's runInThisContext, so declarations persist
// between cells; it speaks the same JSON lines as python-bridge.py.
const vm = require('node:vm');
const util = require('node:util');
const readline = require('node:readline');
const { createRequire } = require('node:module');
const path = require('node:path');

const rawOut = process.stdout.write.bind(process.stdout);
const send = (obj) => rawOut(JSON.stringify(obj) + '\n');
let current = null;
// Per cell and stream: the first HEAD characters go out as written, the last TAIL when the cell
// ends, and the UTF-8 bytes of the middle are counted (as the Python kernel does).
const HEAD = 4 << 20,
  TAIL = 4 << 20,
  PIECE = 1 << 20,
  CHUNK = 1 << 16;
const caps = {};
const emit = (name, text) => {
  for (let i = 0; i < text.length; i += PIECE) send({ t: 'stream', id: current, name, text: text.slice(i, i + PIECE), omitted: 0 });
};
const seal = (cap) => {
  if (cap.small.length > 0) cap.tail.push(cap.small.join(''));
  cap.small = [];
  cap.smallLength = 0;
};
function capture(name, text) {
  const cap = (caps[name] ??= { passed: 0, tail: [], small: [], smallLength: 0, tailLength: 0, dropped: 0 });
  let start = 0;
  if (cap.passed < HEAD) {
    start = Math.min(text.length, HEAD - cap.passed);
    cap.passed += start;
    emit(name, start === text.length ? text : text.slice(0, start));
    if (start === text.length) return;
  }
  const piece = start === 0 ? text : text.slice(start);
  cap.tailLength += piece.length;
  cap.small.push(piece);
  cap.smallLength += piece.length;
  if (cap.smallLength >= CHUNK) seal(cap);
  while (cap.tail.length > 0 && cap.tailLength - cap.tail[0].length >= TAIL) {
    const first = cap.tail.shift();
    cap.tailLength -= first.length;
    cap.dropped += Buffer.byteLength(first);
  }
}
function finishCaptures() {
  for (const name of ['stdout', 'stderr']) {
    const cap = caps[name];
    if (!cap) continue;
    delete caps[name];
    seal(cap);
    let text = cap.tail.join('');
    if (text.length > TAIL) {
      cap.dropped += Buffer.byteLength(text.slice(0, text.length - TAIL));
      text = text.slice(text.length - TAIL);
    }
    if (cap.dropped > 0) send({ t: 'stream', id: current, name, text: '', omitted: cap.dropped });
    emit(name, text);
  }
}
for (const name of ['stdout', 'stderr']) {
  const stream = process[name];
  stream.write = (chunk, encoding, callback) => {
    const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
    if (current !== null) capture(name, text);
    const done = typeof encoding === 'function' ? encoding : callback;
    if (typeof done === 'function') process.nextTick(done);
    return true;
  };
}
const cwd = process.cwd();
globalThis.require = createRequire(path.join(cwd, '[cell]'));
globalThis.module = { exports: {} };
globalThis.exports = globalThis.module.exports;
globalThis.__dirname = cwd;
globalThis.__filename = path.join(cwd, '[cell]');
let interrupt = null;
process.on('SIGINT', () => interrupt && interrupt());
process.on('uncaughtException', (err) => process.stderr.write('Uncaught ' + util.inspect(err) + '\n'));
process.on('unhandledRejection', (err) => process.stderr.write('Unhandled rejection: ' + util.inspect(err) + '\n'));

function compile(code, filename) {
  const trimmed = code.trim();
  if (trimmed.startsWith('{') && trimmed.endsWith('}')) {
    try {
      return new vm.Script('(' + code + '\n)', { filename });
    } catch {
      // not an object literal: a block, compiled as written below
    }
  }
  return new vm.Script(code, { filename });
}

function failure(err) {
  if (err instanceof Error || (err && typeof err === 'object' && 'stack' in err)) {
    const lines = String(err.stack ?? '').split('\n');
    const end = lines.findIndex((line) => line.includes('node:vm') || line.includes('[eval]'));
    return { name: String(err.name ?? 'Error'), value: String(err.message ?? ''), traceback: (end > 0 ? lines.slice(0, end) : lines).join('\n') };
  }
  return { name: 'Thrown', value: util.inspect(err), traceback: 'Uncaught ' + util.inspect(err) };
}

let count = 0;
async function run(job) {
  current = job.id;
  count += 1;
  let status = 'ok';
  // A run's `env` holds for this cell only: the previous values come back after it.
  const saved = new Map();
  for (const [name, value] of Object.entries(job.env && typeof job.env === 'object' ? job.env : {})) {
    saved.set(name, process.env[name]);
    process.env[name] = String(value);
  }
  try {
    let value = compile(String(job.code ?? ''), 'cell-' + count + '.js').runInThisContext({ breakOnSigint: true, displayErrors: false });
    if (value && typeof value.then === 'function') {
      value = await new Promise((resolve, reject) => {
        interrupt = () => reject(Object.assign(new Error('Script execution interrupted.'), { name: 'Interrupted' }));
        value.then(resolve, reject);
      });
    }
    if (value !== undefined) {
      send({
        t: 'display',
        id: job.id,
        main: true,
        data: { 'text/plain': util.inspect(value, { depth: 6, maxArrayLength: 200, maxStringLength: 100000 }) },
        clipped: false,
      });
    }
  } catch (err) {
    status = 'error';
    const reported = failure(err);
    if (/^Script execution (was )?interrupted/.test(reported.value)) reported.name = 'Interrupted';
    send({ t: 'error', id: job.id, ...reported });
  } finally {
    interrupt = null;
    for (const [name, value] of saved) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  }
  await new Promise((resolve) => setImmediate(resolve));
  finishCaptures();
  send({ t: 'done', id: job.id, count, status });
  current = null;
}

const jobs = [];
let running = false;
async function pump() {
  if (running) return;
  running = true;
  while (jobs.length > 0) await run(jobs.shift());
  running = false;
  if (closed) process.exit(0);
}
let closed = false;
readline
  .createInterface({ input: process.stdin })
  .on('line', (line) => {
    let job;
    try {
      job = JSON.parse(line);
    } catch {
      return;
    }
    if (job.op === 'run') {
      jobs.push(job);
      void pump();
    } else if (job.op === 'shutdown') process.exit(0);
  })
  .on('close', () => {
    closed = true;
    if (!running) process.exit(0);
  });
send({ t: 'ready', pid: process.pid });
