import { execFileSync, spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import dgram from 'node:dgram';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import dnsPacket from 'dns-packet';

/** A request the lab's upstream received, as it logged it. */
export interface UpstreamSeen {
  scheme: 'http' | 'https';
  method: string;
  url: string;
  headers: Record<string, string>;
  body: string;
  remote: string;
}

/**
 * A private network the egress tests own: a network namespace joined to the host by a veth pair
 * (10.77.N.1 on the host side, 10.77.N.2 inside), an upstream HTTP/HTTPS echo server inside it
 * with a certificate from the lab's own CA, and a DNS server on 127.0.0.1 whose answers the test
 * sets. Nothing here sends a packet anywhere else. Needs root (`ip netns`).
 */
export class EgressLab {
  readonly namespace: string;
  readonly hostSide: string;
  readonly upstreamAddress: string;
  readonly labCidr: string;
  readonly caPem: string;
  readonly seen: UpstreamSeen[] = [];
  dnsPort = 0;
  /** Name → addresses the lab DNS server answers; other names get NXDOMAIN. */
  readonly records = new Map<string, string[]>();
  /** Names the DNS server never answers (a resolver timeout). */
  readonly silent = new Set<string>();
  /** Every name the DNS server was asked about. */
  readonly queries: string[] = [];
  #dns: dgram.Socket | undefined;
  #upstream: ChildProcessWithoutNullStreams | undefined;
  readonly #dir: string;
  readonly #veth: string;

  private constructor(n: number) {
    this.namespace = `wegress${n}`;
    this.#veth = `weg${n}`;
    this.hostSide = `10.77.${n}.1`;
    this.upstreamAddress = `10.77.${n}.2`;
    this.labCidr = `10.77.${n}.0/24`;
    this.#dir = mkdtempSync(path.join(os.tmpdir(), 'warren-egress-lab-'));
    this.caPem = '';
  }

  /** Whether this machine can run the lab (root with `ip netns`). */
  static available(): boolean {
    if (process.getuid?.() !== 0) return false;
    try {
      execFileSync('ip', ['netns', 'list'], { stdio: 'ignore' });
      return true;
    } catch {
      return false;
    }
  }

  /**
   * Starts the lab. `staticDir`: a folder of the test's whose files the upstream also serves, as
   * they are, under `/static/` (a package repository, a Python index).
   */
  static async start(hostNames: string[], options: { staticDir?: string } = {}): Promise<EgressLab> {
    const lab = new EgressLab(100 + (process.pid % 150));
    try {
      await lab.#start(hostNames, options.staticDir);
    } catch (err) {
      await lab.stop();
      throw err;
    }
    return lab;
  }

  async #start(hostNames: string[], staticDir: string | undefined): Promise<void> {
    const ip = (...args: string[]) => execFileSync('ip', args, { stdio: 'pipe' });
    try {
      ip('netns', 'del', this.namespace);
    } catch {
      // not left over from an earlier run
    }
    ip('netns', 'add', this.namespace);
    ip('link', 'add', `${this.#veth}h`, 'type', 'veth', 'peer', 'name', `${this.#veth}n`);
    ip('link', 'set', `${this.#veth}n`, 'netns', this.namespace);
    ip('addr', 'add', `${this.hostSide}/24`, 'dev', `${this.#veth}h`);
    ip('link', 'set', `${this.#veth}h`, 'up');
    ip('-n', this.namespace, 'addr', 'add', `${this.upstreamAddress}/24`, 'dev', `${this.#veth}n`);
    ip('-n', this.namespace, 'link', 'set', `${this.#veth}n`, 'up');
    ip('-n', this.namespace, 'link', 'set', 'lo', 'up');

    const file = (name: string) => path.join(this.#dir, name);
    const openssl = (...args: string[]) => execFileSync('openssl', args, { stdio: 'pipe' });
    openssl(
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-keyout',
      file('ca.key'),
      '-out',
      file('ca.pem'),
      '-days',
      '2',
      '-subj',
      '/CN=warren egress lab CA',
    );
    writeFileSync(file('ext.cnf'), `subjectAltName=${hostNames.map((h) => `DNS:${h}`).join(',')}\n`);
    openssl(
      'req',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-keyout',
      file('leaf.key'),
      '-out',
      file('leaf.csr'),
      '-subj',
      `/CN=${hostNames[0]}`,
    );
    openssl(
      'x509',
      '-req',
      '-in',
      file('leaf.csr'),
      '-CA',
      file('ca.pem'),
      '-CAkey',
      file('ca.key'),
      '-CAcreateserial',
      '-out',
      file('leaf.pem'),
      '-days',
      '2',
      '-extfile',
      file('ext.cnf'),
    );
    (this as { caPem: string }).caPem = readFileSync(file('ca.pem'), 'utf8');

    const script = new URL('./egress-upstream.mjs', import.meta.url).pathname;
    const child = spawn('ip', [
      'netns',
      'exec',
      this.namespace,
      process.execPath,
      script,
      this.upstreamAddress,
      file('leaf.pem'),
      file('leaf.key'),
      ...(staticDir === undefined ? [] : [staticDir]),
    ]);
    this.#upstream = child;
    await new Promise<void>((resolve, reject) => {
      let buffered = '';
      child.stdout.on('data', (chunk: Buffer) => {
        buffered += chunk.toString();
        let nl: number;
        while ((nl = buffered.indexOf('\n')) >= 0) {
          const line = buffered.slice(0, nl);
          buffered = buffered.slice(nl + 1);
          if (line === 'ready') resolve();
          else this.seen.push(JSON.parse(line) as UpstreamSeen);
        }
      });
      child.once('exit', (code) => reject(new Error(`the lab upstream exited with ${code}`)));
      setTimeout(() => reject(new Error('the lab upstream did not start')), 10_000).unref();
    });

    const dns = dgram.createSocket('udp4');
    this.#dns = dns;
    dns.on('message', (message, remote) => {
      const query = dnsPacket.decode(message);
      const question = query.questions?.[0];
      if (!question) return;
      this.queries.push(question.name);
      if (this.silent.has(question.name.toLowerCase())) return;
      const addresses = this.records.get(question.name.toLowerCase());
      const family = question.type === 'A' ? 'A' : question.type === 'AAAA' ? 'AAAA' : undefined;
      const answers = (addresses ?? [])
        .filter((a) => (family === 'A' ? !a.includes(':') : family === 'AAAA' ? a.includes(':') : false))
        .map((data) => ({ type: family as 'A' | 'AAAA', name: question.name, ttl: 0, class: 'IN' as const, data }));
      const reply = dnsPacket.encode({ id: query.id, type: 'response', flags: addresses ? 0 : 3, questions: [question], answers });
      dns.send(reply, remote.port, remote.address);
    });
    await new Promise<void>((resolve) => dns.bind(0, '127.0.0.1', resolve));
    this.dnsPort = dns.address().port;
  }

  /** Requests the upstream received at this path (query ignored). */
  seenAt(pathPrefix: string): UpstreamSeen[] {
    return this.seen.filter((s) => s.url.startsWith(pathPrefix));
  }

  async stop(): Promise<void> {
    this.#dns?.close();
    if (this.#upstream && this.#upstream.exitCode === null) {
      const exited = new Promise((resolve) => this.#upstream?.once('exit', resolve));
      this.#upstream.kill();
      await exited;
    }
    for (const args of [
      ['link', 'del', `${this.#veth}h`],
      ['netns', 'del', this.namespace],
    ]) {
      try {
        execFileSync('ip', args, { stdio: 'ignore' });
      } catch {
        // already gone
      }
    }
  }
}
