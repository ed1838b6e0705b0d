import { describe, expect, it } from '@jest/globals';
import { CodedError, decodeFrame, encodeFrame, WireClient, type FrameHeader, type WireSocket, type WireSocketHandlers } from '../src/index.js';

/** A socket whose peer is the test: what the client sent, and a way to answer. */
function fakeSocket() {
  const sent: FrameHeader[] = [];
  let handlers: WireSocketHandlers | undefined;
  let open = true;
  const calls = { pause: 0, resume: 0, close: [] as (number | undefined)[] };
  const socket: WireSocket = {
    send: (frame) => void sent.push(decodeFrame(Buffer.from(frame)).header),
    close: (code) => {
      calls.close.push(code);
      open = false;
    },
    get isOpen() {
      return open;
    },
    listen: (h) => void (handlers = h),
    pause: () => void calls.pause++,
    resume: () => void calls.resume++,
  };
  return {
    socket,
    sent,
    calls,
    answer: (header: FrameHeader, payload?: Uint8Array) => handlers!.message(encodeFrame(header, payload)),
    raw: (data: Uint8Array) => handlers!.message(data),
    drop: (code = 1006, reason = '') => {
      open = false;
      handlers!.close(code, reason);
    },
  };
}

async function connected(options: Partial<Parameters<typeof WireClient.connect>[1]> = {}) {
  const peer = fakeSocket();
  const opening = WireClient.connect(peer.socket, { client: 'test', ...options });
  peer.answer({ type: 'welcome', protocolVersion: 1, protocolMinor: 99, server: 'fake', serverVersion: '9' });
  return { peer, client: await opening };
}

const STAT = { path: '/workspace/a', type: 'file', size: 1, mode: 0o644, mtimeMs: 0, nlink: 1, readable: true, writable: true };
const tick = () => new Promise((r) => setImmediate(r));

describe('WireClient', () => {
  it('says hello first and agrees on the lower minor of the same major', async () => {
    const { peer, client } = await connected();
    expect(peer.sent[0]).toMatchObject({ type: 'hello', protocolVersion: 1, client: 'test' });
    expect(client.protocol).toMatchObject({ version: 1, serverMinor: 99, server: 'fake', serverVersion: '9' });
    expect(client.protocol.minor).toBeLessThan(99);
  });

  it('refuses a welcome of another major, naming both versions, and closes the socket', async () => {
    const peer = fakeSocket();
    const opening = WireClient.connect(peer.socket, { client: 'test' });
    peer.answer({ type: 'welcome', protocolVersion: 2, server: 'fake', serverVersion: '9' });
    await expect(opening).rejects.toMatchObject({ code: 'PROTOCOL_VERSION_MISMATCH', message: expect.stringContaining('speaks protocol 2.0') });
    expect(peer.calls.close).toHaveLength(1);
  });

  it('fails the handshake with the error frame the peer sent, or with its own timeout', async () => {
    const peer = fakeSocket();
    const opening = WireClient.connect(peer.socket, { client: 'test' });
    peer.answer({ type: 'err', id: null, error: { code: 'UNAUTHORIZED', message: 'no' } });
    await expect(opening).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    const silent = fakeSocket();
    await expect(WireClient.connect(silent.socket, { client: 'test', handshakeTimeoutMs: 5 })).rejects.toThrow(/No handshake answer within 5 ms/);
  });

  it('matches answers to calls by id, hands events to their call, and checks the result tolerantly', async () => {
    const { peer, client } = await connected();
    const events: unknown[] = [];
    const stat = client.call('fs.stat', { path: 'a' });
    const exec = client.call('process.exec', { cmd: 'echo hi' }, { onEvent: (e, payload) => events.push([e.event, payload?.toString()]) });
    const [statReq, execReq] = peer.sent.slice(1) as { id: number }[];
    expect(statReq!.id).not.toBe(execReq!.id);
    peer.answer({ type: 'evt', id: execReq!.id, event: 'stdout', data: { offset: 0 } }, Buffer.from('hi\n'));
    peer.answer({ type: 'res', id: statReq!.id, result: { ...STAT, unknownField: 1 } });
    peer.answer({
      type: 'res',
      id: execReq!.id,
      result: { exitCode: 0, signal: null, stdout: 'hi\n', stderr: '', durationMs: 1, timedOut: false, truncated: false, stdoutBytes: 3, stderrBytes: 0 },
    });
    expect((await stat).result).toEqual(STAT);
    expect((await exec).result.exitCode).toBe(0);
    expect(events).toEqual([['stdout', 'hi\n']]);
    expect(client.idle).toBe(true);
  });

  it('refuses params that do not match the schema before sending anything', async () => {
    const { peer, client } = await connected();
    await expect(client.call('fs.stat', { path: 7 } as never)).rejects.toMatchObject({ code: 'INVALID_PARAMS', message: expect.stringContaining('fs.stat') });
    expect(peer.sent).toHaveLength(1);
  });

  it('cancels a call by its signal and by its timeout, naming the method', async () => {
    const { peer, client } = await connected();
    const abort = new AbortController();
    const cancelled = client.call('fs.stat', { path: 'a' }, { signal: abort.signal });
    abort.abort();
    await expect(cancelled).rejects.toMatchObject({ code: 'CANCELLED' });
    await expect(client.call('fs.stat', { path: 'b' }, { timeoutMs: 5 })).rejects.toThrow(/fs\.stat did not answer within 5 ms/);
    expect(peer.sent.filter((h) => h.type === 'cancel')).toHaveLength(2);
    expect(client.inFlight).toBe(0);
  });

  it('fails every pending call when the peer closes, and refuses later calls', async () => {
    const { peer, client } = await connected({ peerClosedError: (code) => new CodedError('SANDBOX_NOT_READY', `gone ${code}`) });
    let closed = 0;
    client.onClose(() => closed++);
    const pending = client.call('fs.stat', { path: 'a' });
    peer.drop(1011);
    await expect(pending).rejects.toThrow('gone 1011');
    await expect(client.call('fs.stat', { path: 'a' })).rejects.toThrow('gone 1011');
    expect(closed).toBe(1);
    expect(client.isOpen).toBe(false);
  });

  it('fails the call a frame it cannot read names, and reports one that names none', async () => {
    const bad: Error[] = [];
    const { peer, client } = await connected({ onBadFrame: (err) => bad.push(err) });
    const pending = client.call('fs.stat', { path: 'a' });
    const id = (peer.sent[1] as { id: number }).id;
    const header = Buffer.from(JSON.stringify({ type: 'bogus', id }));
    const prefix = Buffer.alloc(4);
    prefix.writeUInt32BE(header.length);
    peer.raw(Buffer.concat([prefix, header]));
    await expect(pending).rejects.toMatchObject({ code: 'INVALID_FRAME' });
    peer.raw(Buffer.from([0, 0, 0, 200, 1]));
    expect(bad).toHaveLength(1);
  });

  it('counts read pauses and resumes the socket only when the last is undone', async () => {
    const { peer, client } = await connected();
    client.pauseReading();
    client.pauseReading();
    expect(client.idle).toBe(false);
    client.resumeReading();
    expect(peer.calls).toMatchObject({ pause: 1, resume: 0 });
    client.resumeReading();
    expect(peer.calls).toMatchObject({ pause: 1, resume: 1 });
  });

  it('answers approvals with its handler when asked to, and denies without one', async () => {
    const { peer, client } = await connected({ answerApprovals: true });
    const read = client.call('fs.read', { path: 'a' });
    const id = (peer.sent[1] as { id: number }).id;
    peer.answer({ type: 'evt', id, event: 'approval', data: { operation: 'read', path: '/data/a' } });
    await tick();
    expect(peer.sent[2]).toEqual({ type: 'approval', id, allow: false });
    client.onApproval = () => true;
    peer.answer({ type: 'evt', id, event: 'approval', data: { operation: 'read', path: '/data/a' } });
    await tick();
    expect(peer.sent[3]).toEqual({ type: 'approval', id, allow: true });
    client.close();
    await expect(read).rejects.toMatchObject({ code: 'UPSTREAM_UNAVAILABLE' });
  });
});
