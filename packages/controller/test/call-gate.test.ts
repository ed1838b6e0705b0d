import { DEFAULT_ADMIN } from '../src/tenancy/principals.js';
import { describe, expect, it } from '@jest/globals';
import { decodeFrame, encodeFrame, type FrameHeader } from '@warren/protocol';
import { CallGate } from '../src/call-gate.js';
import type { Holder } from '../src/grants.js';
import { Metrics } from '../src/metrics.js';

const policy = { root: '/workspace', readOnly: false };
const operator: Holder = { caller: { kind: 'operator', ...DEFAULT_ADMIN }, grant: () => ({ policy, allowExec: true, allowAudit: true }) };
const readOnly: Holder = {
  caller: { kind: 'derived', sandboxId: 's', grant: {} },
  grant: () => ({ policy: { root: '/workspace', readOnly: true }, allowExec: false }),
};

const frame = (header: Record<string, unknown>) => encodeFrame(header as FrameHeader);

/** Samples of one metric, as `label=value,...` keys. */
async function series(metrics: Metrics, name: string): Promise<Record<string, number>> {
  const metric = await metrics.registry.getSingleMetric(name)!.get();
  const out: Record<string, number> = {};
  for (const v of metric.values) {
    const key = Object.entries(v.labels)
      .map(([k, l]) => `${k}=${String(l)}`)
      .join(',');
    out[`${(v as { metricName?: string }).metricName ?? name}{${key}}`] = v.value;
  }
  return out;
}

function activityLog() {
  const log: string[] = [];
  let holds = 0;
  return {
    log,
    activity: {
      hold: () => {
        const n = ++holds;
        log.push(`hold ${n}`);
        return () => log.push(`release ${n}`);
      },
      touch: () => log.push('touch'),
    },
  };
}

describe('CallGate: one look at each frame for access, metrics and holds', () => {
  it('times a call from its request to its final answer, by method and outcome', async () => {
    const metrics = new Metrics();
    const gate = new CallGate({ holder: operator, metrics, maxMessageBytes: 1024 });
    expect(gate.fromClient(frame({ type: 'req', id: 1, method: 'fs.stat', params: { path: 'a' } }))).toBeUndefined();
    expect(gate.fromClient(frame({ type: 'req', id: 2, method: 'fs.stat', params: { path: 'b' } }))).toBeUndefined();
    gate.fromDaemon(frame({ type: 'evt', id: 1, event: 'stdout', data: {} }));
    gate.fromDaemon(frame({ type: 'res', id: 1, result: {} }));
    gate.fromDaemon(frame({ type: 'err', id: 2, error: { code: 'NOT_FOUND', message: 'gone' } }));
    gate.fromDaemon(frame({ type: 'res', id: 1, result: {} })); // a second answer to one call is not counted twice
    expect(await series(metrics, 'warren_calls_total')).toEqual({
      'warren_calls_total{method=fs.stat,outcome=ok}': 1,
      'warren_calls_total{method=fs.stat,outcome=error}': 1,
    });
    expect((await series(metrics, 'warren_call_seconds'))['warren_call_seconds_count{method=fs.stat}']).toBe(2);
    expect(await series(metrics, 'warren_errors_total')).toEqual({ 'warren_errors_total{code=NOT_FOUND,source=call}': 1 });
  });

  it('refuses a call its grant does not allow with FORBIDDEN and the id, counted as refused; a refused duplicate id leaves the first call timed', async () => {
    const metrics = new Metrics();
    const gate = new CallGate({ holder: readOnly, metrics, maxMessageBytes: 1024 });
    expect(gate.fromClient(frame({ type: 'req', id: 5, method: 'fs.stat', params: { path: 'a' } }))).toBeUndefined();
    const refusal = gate.fromClient(frame({ type: 'req', id: 5, method: 'fs.write', params: { path: 'a', content: 'x' } }));
    expect(decodeFrame(refusal!).header).toMatchObject({ type: 'err', id: 5, error: { code: 'FORBIDDEN', details: { method: 'fs.write', access: 'write' } } });
    gate.fromDaemon(frame({ type: 'res', id: 5, result: {} }));
    expect(await series(metrics, 'warren_calls_total')).toEqual({
      'warren_calls_total{method=fs.write,outcome=refused}': 1,
      'warren_calls_total{method=fs.stat,outcome=ok}': 1,
    });
  });

  it('a frame over maxMessageBytes is answered FRAME_TOO_LARGE with its id and never read further', () => {
    const gate = new CallGate({ holder: operator, metrics: new Metrics(), maxMessageBytes: 64 });
    const refusal = gate.fromClient(frame({ type: 'req', id: 9, method: 'fs.stat', params: { path: 'x'.repeat(100) } }));
    expect(decodeFrame(refusal!).header).toMatchObject({ type: 'err', id: 9, error: { code: 'FRAME_TOO_LARGE' } });
  });

  it('an error code the protocol does not know, from a hostile daemon, counts as INTERNAL: no label values of its choosing', async () => {
    const metrics = new Metrics();
    const gate = new CallGate({ holder: operator, metrics, maxMessageBytes: 1024 });
    for (let i = 0; i < 100; i++) gate.fromDaemon(frame({ type: 'err', id: i, error: { code: `MADE_UP_${i}`, message: 'x' } }));
    gate.fromDaemon(frame({ type: 'err', id: 1, error: { code: { toString: 1 }, message: 'x' } }));
    gate.fromDaemon(frame({ type: 'err', id: 1, error: null }));
    expect(await series(metrics, 'warren_errors_total')).toEqual({ 'warren_errors_total{code=INTERNAL,source=call}': 102 });
  });

  it('headers that are not JSON, not objects or carry odd ids pass through unobserved, for the daemon to refuse', () => {
    const gate = new CallGate({ holder: readOnly, metrics: new Metrics(), maxMessageBytes: 1024 });
    const notJson = Buffer.concat([Buffer.from([0, 0, 0, 3]), Buffer.from('{{{')]);
    for (const data of [Buffer.alloc(0), Buffer.from([0, 0, 0, 9]), notJson, frame({ type: 'req', id: { a: 1 }, method: 'fs.stat', params: {} })]) {
      expect(gate.fromClient(data)).toBeUndefined();
      expect(() => gate.fromDaemon(data)).not.toThrow();
    }
    // The access check holds whatever the id: a refused method is refused, with id null when the id is not one.
    expect(decodeFrame(gate.fromClient(frame({ type: 'req', id: [1], method: 'process.exec', params: {} }))!).header).toMatchObject({
      id: null,
      error: { code: 'FORBIDDEN' },
    });
  });

  it('each call in flight holds the sandbox awake until its answer, a cancel or the close; other frames touch it', () => {
    const { log, activity } = activityLog();
    const gate = new CallGate({ holder: readOnly, metrics: new Metrics(), maxMessageBytes: 1024, activity });
    gate.fromClient(frame({ type: 'req', id: 1, method: 'fs.stat', params: {} }));
    gate.fromClient(frame({ type: 'req', id: 2, method: 'fs.stat', params: {} }));
    gate.fromClient(frame({ type: 'req', id: 3, method: 'fs.stat', params: {} }));
    gate.fromClient(frame({ type: 'req', id: 4, method: 'fs.write', params: {} })); // refused: touches, holds nothing
    gate.fromClient(frame({ type: 'approval', id: 1, allow: true }));
    gate.fromDaemon(frame({ type: 'res', id: 1, result: {} }));
    gate.fromClient(frame({ type: 'cancel', id: 2 }));
    gate.close();
    expect(log).toEqual(['hold 1', 'hold 2', 'hold 3', 'touch', 'touch', 'release 1', 'release 2', 'release 3']);
  });
});
