import { describe, expect, it } from '@jest/globals';
import { mkdtempSync, readFileSync, statSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { EGRESS_CA_CERT_FILE, EGRESS_CA_KEY_FILE, EgressCa } from '../src/egress/ca.js';

describe('EgressCa', () => {
  it('keeps its key private on disk and reads the same CA back', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'warren-egress-ca-'));
    const first = await EgressCa.loadOrCreate(dir);
    expect(statSync(path.join(dir, EGRESS_CA_KEY_FILE)).mode & 0o777).toBe(0o600);
    expect(readFileSync(path.join(dir, EGRESS_CA_CERT_FILE), 'utf8')).toBe(first.certPem);
    expect(first.certPem).not.toContain('PRIVATE KEY');
    const again = await EgressCa.loadOrCreate(dir);
    expect(again.certPem).toBe(first.certPem);
  });

  it('mints leaves a client trusting only the CA accepts for that host and no other', async () => {
    const { ca } = await EgressCa.create();
    const context = await ca.contextFor('api.example.com');
    expect(await ca.contextFor('api.example.com')).toBe(context);
    const server = tls.createServer({ SNICallback: (_name, cb) => cb(null, context) }, (s) => s.destroy());
    server.on('tlsClientError', () => {});
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as net.AddressInfo;
    const dial = (servername: string) =>
      new Promise<string>((resolve) => {
        const socket = tls.connect({ host: '127.0.0.1', port, servername, ca: ca.certPem }, () => {
          socket.destroy();
          resolve('trusted');
        });
        socket.on('error', (err) => {
          socket.destroy();
          resolve((err as NodeJS.ErrnoException).code ?? err.message);
        });
      });
    try {
      expect(await dial('api.example.com')).toBe('trusted');
      expect(await dial('other.example.com')).toBe('ERR_TLS_CERT_ALTNAME_INVALID');
    } finally {
      server.close();
    }
  });
});
