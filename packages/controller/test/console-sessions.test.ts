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

  it('takes the session the CSRF token belongs to: a planted cookie of another key never becomes the caller, nor logs the operator out', () => {
    const sessions = new ConsoleSessions({ credentials: Credentials.inMemory(API_KEY, masterKey, ['wk_other_key']), ttlSeconds: 60, clock });
    const operator = sessions.login(API_KEY);
    const planted = sessions.login('wk_other_key');
    // The browser sends the planted cookie (a longer path) first; the operator's page holds only its own token.
    const both = (csrf: string) => request(`${planted.id}; warren_console=${operator.id}`, csrf);
    expect(sessions.callerOf(both(operator.csrfToken), 'rest')).toMatchObject({ kind: 'operator', keyId: Credentials.inMemory(API_KEY).apiKeyId(API_KEY) });
    // The planted session counts only with its own token, which the console page never has.
    expect(sessions.callerOf(both(planted.csrfToken), 'rest')).toMatchObject({ keyId: Credentials.inMemory('wk_other_key').apiKeyId('wk_other_key') });
    // A planted cookie alone, with the operator's token: refused.
    expect(() => sessions.callerOf(request(planted.id, operator.csrfToken), 'rest')).toThrow(expect.objectContaining({ code: 'FORBIDDEN' }));
    sessions.close();
  });

  it('keeps the live sessions of other tabs (and a login a port page makes) in the new cookie, at most 8', () => {
    const sessions = make();
    const first = sessions.login(API_KEY);
    const second = sessions.login(API_KEY, request(first.id, ''));
    expect(second.id.split('~')).toHaveLength(2);
    for (const token of [first.csrfToken, second.csrfToken]) expect(sessions.callerOf(request(second.id, token), 'rest')).toMatchObject({ kind: 'operator' });
    let cookie = second.id;
    for (let i = 0; i < 10; i++) cookie = sessions.login(API_KEY, request(cookie, '')).id;
    expect(cookie.split('~')).toHaveLength(8);
    sessions.close();
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
