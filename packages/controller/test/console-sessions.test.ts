import { randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from '@jest/globals';
import { ConsoleSessions, type SessionRevocations } from '../src/console/session.js';
import { systemClock } from '../src/clock.js';
import { Credentials } from '../src/credentials.js';

const API_KEY = 'wk_test_console_sessions';
const HOST = 'warren.test:7420';

function request(cookie: string, csrf: string): IncomingMessage {
  return {
    headers: { cookie: `warren_console=${cookie}`, 'x-warren-csrf': csrf, host: HOST, origin: `http://${HOST}`, 'sec-fetch-site': 'same-origin' },
  } as unknown as IncomingMessage;
}

/** Revocations shared as a Kubernetes ConfigMap would share them, in memory. */
class SharedList implements SessionRevocations {
  readonly keys = new Map<string, number>();
  async revokeSession(key: string, expiresAt: number): Promise<void> {
    this.keys.set(key, expiresAt);
  }
  async revokedSessions(): Promise<Set<string>> {
    return new Set(this.keys.keys());
  }
}

/** Console sessions are signed, not stored: every controller replica with the same master key accepts them. */
describe('stateless console sessions', () => {
  const masterKey = randomBytes(32);
  let now = 1_000_000;
  const clock = { now: () => now, sleep: (ms: number) => systemClock.sleep(ms) };
  const make = (key = masterKey, revocations?: SessionRevocations) =>
    new ConsoleSessions({ credentials: Credentials.inMemory(API_KEY, key), ttlSeconds: 60, clock, revocations });

  it('accepts a session made by one replica on another with the same master key, and only there', () => {
    const a = make();
    const b = make();
    const other = make(randomBytes(32));
    const { id, csrfToken } = a.login(API_KEY);
    expect(b.callerOf(request(id, csrfToken), 'rest')).toMatchObject({ kind: 'operator' });
    expect(() => other.callerOf(request(id, csrfToken), 'rest')).toThrow(expect.objectContaining({ code: 'UNAUTHORIZED' }));
    a.close();
    b.close();
    other.close();
  });

  it('refuses a changed payload, a changed signature, the wrong CSRF token and an expired session', () => {
    const a = make();
    const { id, csrfToken } = a.login(API_KEY);
    const [payload, mac] = id.split('.') as [string, string];
    const longer = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(payload, 'base64url').toString()), e: now + 10 ** 9 })).toString('base64url');
    expect(() => a.callerOf(request(`${longer}.${mac}`, csrfToken), 'rest')).toThrow(expect.objectContaining({ code: 'UNAUTHORIZED' }));
    expect(() => a.callerOf(request(`${payload}.${mac.slice(0, -2)}AA`, csrfToken), 'rest')).toThrow(expect.objectContaining({ code: 'UNAUTHORIZED' }));
    expect(() => a.callerOf(request(id, a.login(API_KEY).csrfToken), 'rest')).toThrow(expect.objectContaining({ code: 'FORBIDDEN' }));
    now += 61_000;
    expect(() => a.callerOf(request(id, csrfToken), 'rest')).toThrow(expect.objectContaining({ code: 'UNAUTHORIZED' }));
    a.close();
  });

  it('ends a session on the replica that logs out at once, and on the others through the shared list', async () => {
    const shared = new SharedList();
    const a = make(masterKey, shared);
    const b = make(masterKey, shared);
    const { id, csrfToken } = a.login(API_KEY);
    await b.logout(request(id, csrfToken));
    expect(() => b.callerOf(request(id, csrfToken), 'rest')).toThrow(expect.objectContaining({ code: 'UNAUTHORIZED' }));
    expect(shared.keys.size).toBe(1);
    // A reads the shared list every 2 s.
    await new Promise((r) => setTimeout(r, 2300));
    expect(() => a.callerOf(request(id, csrfToken), 'rest')).toThrow(expect.objectContaining({ code: 'UNAUTHORIZED' }));
    // Another session of the same key is untouched.
    const again = a.login(API_KEY);
    expect(b.callerOf(request(again.id, again.csrfToken), 'rest')).toMatchObject({ kind: 'operator' });
    a.close();
    b.close();
  });
});
