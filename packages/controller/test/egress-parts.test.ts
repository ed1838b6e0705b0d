import { describe, expect, it } from '@jest/globals';
import tls from 'node:tls';
import net from 'node:net';
import { Readable } from 'node:stream';
import { egressEventSink } from '../src/egress/sink.js';
import { applySecrets, brokerSecrets, RedactStream } from '../src/egress/secrets.js';
import { parseClientHello } from '../src/egress/tls-hello.js';
import { createLogger } from '../src/logger.js';
import { Metrics } from '../src/metrics.js';

/** The first bytes a real Node TLS client sends, caught on a loopback listener. */
async function clientHello(servername?: string): Promise<Buffer> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  const got = new Promise<Buffer>((resolve) => server.once('connection', (s) => s.once('data', (d: Buffer) => (s.destroy(), resolve(d)))));
  const client = tls.connect({ host: '127.0.0.1', port, ...(servername === undefined ? {} : { servername }) });
  client.on('error', () => {});
  const data = await got;
  client.destroy();
  server.close();
  return data;
}

describe('parseClientHello', () => {
  it('reads the SNI of a real ClientHello, and waits for the whole record', async () => {
    const hello = await clientHello('registry.example.com');
    expect(parseClientHello(hello)).toEqual({ kind: 'hello', serverName: 'registry.example.com' });
    expect(parseClientHello(hello.subarray(0, 3))).toEqual({ kind: 'incomplete' });
    expect(parseClientHello(hello.subarray(0, hello.length - 1))).toEqual({ kind: 'incomplete' });
  });

  it('reports no SNI when the client sends none, and refuses what is not TLS', async () => {
    expect(parseClientHello(await clientHello())).toEqual({ kind: 'hello', serverName: undefined });
    expect(parseClientHello(Buffer.from('GET / HTTP/1.1\r\n'))).toEqual({ kind: 'not-tls' });
    const garbage = Buffer.from([0x16, 3, 1, 0, 8, 1, 0, 0, 200, 1, 2, 3, 4]);
    expect(parseClientHello(garbage)).toEqual({ kind: 'not-tls' });
  });
});

describe('brokered secrets', () => {
  const binding = { name: 'API_KEY', ref: 'k', hosts: ['api.example.com'], target: { header: 'Authorization', template: 'Bearer {secret}' } };

  it('refuses an unknown operator secret without echoing any value, and a name bound twice', () => {
    expect(() => brokerSecrets([binding], {})).toThrow(/operator secret 'k'/);
    expect(() => brokerSecrets([binding, binding], { k: 'v' })).toThrow(/bound twice/);
  });

  it('substitutes only for bound hosts, and leaves a header without the placeholder alone', () => {
    const [secret] = brokerSecrets([binding], { k: 'real-value' });
    const headers: Record<string, string> = { authorization: `Bearer ${secret!.placeholder}` };
    expect(applySecrets([secret!], 'evil.example.com', headers, new URL('http://evil.example.com/'))).toEqual([]);
    expect(headers.authorization).toBe(`Bearer ${secret!.placeholder}`);
    expect(applySecrets([secret!], 'api.example.com', { authorization: 'Basic own' }, new URL('http://api.example.com/'))).toEqual([]);
    expect(applySecrets([secret!], 'api.example.com', headers, new URL('http://api.example.com/'))).toEqual(['API_KEY']);
    expect(headers.authorization).toBe('Bearer real-value');
  });

  it('redacts a value split across chunks of a response', async () => {
    const [secret] = brokerSecrets([{ ...binding, value: 'abcdefghij', ref: undefined }], {});
    const chunks = ['xx abcde', 'fghij yy abc', 'defghij', ' end'];
    const out: Buffer[] = [];
    for await (const chunk of Readable.from(chunks.map((c) => Buffer.from(c))).pipe(new RedactStream([secret!]))) out.push(chunk as Buffer);
    expect(Buffer.concat(out).toString()).toBe(`xx ${secret!.placeholder} yy ${secret!.placeholder} end`);
  });
});

describe('egressEventSink', () => {
  it('counts attempts with bounded labels and logs the event without secret values', async () => {
    const metrics = new Metrics();
    const lines: string[] = [];
    const logger = createLogger({ destination: { write: (line: string) => void lines.push(line) } });
    const forwarded: unknown[] = [];
    const sink = egressEventSink({ metrics, logger, forward: (e) => forwarded.push(e) });
    const base = { sandboxId: 's1', port: 443, bytesOut: 10, bytesIn: 20, durationMs: 5, policyVersion: 1 };
    sink({ ...base, kind: 'connect', host: 'a.example.com', decision: 'allowed', rule: 'rules[0]:a.example.com', secrets: ['API_KEY'] });
    sink({ ...base, kind: 'http', host: 'b.example.com', decision: 'denied', rule: 'policy:none', reason: 'policy-none', bytesOut: 0, bytesIn: 0 });
    const text = await metrics.registry.metrics();
    expect(text).toContain('warren_egress_attempts_total{kind="connect",decision="allowed",reason="allowed"} 1');
    expect(text).toContain('warren_egress_attempts_total{kind="http",decision="denied",reason="policy-none"} 1');
    expect(text).toContain('warren_egress_bytes_total{direction="in"} 20');
    expect(text).not.toContain('example.com');
    expect(lines.map((l) => JSON.parse(l) as { msg: string; host: string })).toMatchObject([
      { msg: 'egress.allowed', host: 'a.example.com' },
      { msg: 'egress.denied', host: 'b.example.com' },
    ]);
    expect(forwarded).toHaveLength(2);
  });
});
