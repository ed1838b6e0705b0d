import { describe, expect, it } from '@jest/globals';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { AuditLog } from '../src/audit.js';
import { createHandlers } from '../src/server.js';
import { ProcessRuntime } from '../src/services/processes.js';
import { warmUp } from '../src/warm-up.js';

describe('the warm-up of a new daemon', () => {
  it('serves its calls through the connection code, leaves no audit entry and changes nothing', async () => {
    const root = await mkdtemp(path.join(os.tmpdir(), 'warren-warm-'));
    try {
      const policy = { root, readOnly: false };
      const audit = new AuditLog();
      const handlers = createHandlers(policy, root, new ProcessRuntime({ policy, home: root }), audit);
      let statted = 0;
      const stat = handlers['fs.stat'];
      handlers['fs.stat'] = async (params, ctx) => {
        statted++;
        return stat(params, ctx);
      };
      await warmUp(handlers);
      expect(statted).toBe(1);
      expect(audit.list({ limit: 10 }).entries).toEqual([]);
      expect(await readdir(root)).toEqual([]);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  it('ends when a call asks for approval (denied at once) or fails, and never throws', async () => {
    const root = await mkdtemp(path.join(os.tmpdir(), 'warren-warm-'));
    try {
      const asking = { paths: { w: { root, mode: 'ro' as const, writeApproval: true, readApproval: true } } };
      const handlers = createHandlers(asking, root, new ProcessRuntime({ policy: asking, home: root }));
      handlers['fs.stat'] = async (_params, ctx) => {
        const allowed = await ctx.requestApproval!({ operation: 'stat', path: '/w' });
        throw new Error(`approval answered ${allowed}`);
      };
      handlers['system.info'] = () => Promise.reject(new Error('broken'));
      const started = Date.now();
      await expect(warmUp(handlers)).resolves.toBeUndefined();
      expect(Date.now() - started).toBeLessThan(5_000);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});
