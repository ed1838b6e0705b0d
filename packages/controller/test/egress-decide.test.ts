import { describe, expect, it } from '@jest/globals';
import { EgressPolicy, SecretBinding } from '@warren/protocol';
import { AddressFloor, parseLabCidrs } from '../src/egress/address-floor.js';
import { decideEgress, effectiveEgressPolicy } from '../src/egress/decide.js';
import { canonicalHost, hostMatches, normalisePath, splitAuthority } from '../src/egress/host-name.js';
import { loadConfig, redactConfig } from '../src/config.js';

const operator = { deny: ['*.evil.test', 'blocked.example.com'] };
const allow = (rules: unknown[]) => EgressPolicy.parse({ mode: 'allow', rules });

describe('host patterns', () => {
  it.each([
    ['*.example.com', 'a.example.com', true],
    ['*.example.com', 'a.b.example.com', true],
    ['*.example.com', 'example.com', false],
    ['*.example.com', 'evilexample.com', false],
    ['*.example.com', 'example.com.evil.net', false],
    ['*.example.com', 'a.example.com.evil.net', false],
    ['example.com', 'a.example.com', false],
    ['example.com', 'example.com', true],
  ])('%s against %s is %s', (pattern, name, expected) => {
    expect(hostMatches(pattern, name)).toBe(expected);
  });

  it('canonicalises case, one trailing dot and Unicode to punycode, on both the rule and the request', () => {
    expect(canonicalHost('API.Example.COM.')).toEqual({ kind: 'name', name: 'api.example.com' });
    expect(canonicalHost('bücher.example')).toEqual({ kind: 'name', name: 'xn--bcher-kva.example' });
    expect(EgressPolicy.parse({ mode: 'allow', rules: [{ host: '*.Example.COM.' }] })).toEqual({ mode: 'allow', rules: [{ host: '*.example.com' }] });
    const policy = allow([{ host: 'xn--bcher-kva.example' }]);
    expect(decideEgress(policy, operator, { host: 'BÜCHER.example.', port: 443 }).allowed).toBe(true);
    // A Cyrillic look-alike of "example" is another name.
    expect(decideEgress(allow([{ host: 'example.com' }]), operator, { host: 'ехample.com', port: 443 }).allowed).toBe(false);
  });

  it('refuses rules that are IP addresses, Unicode or malformed', () => {
    for (const host of ['10.0.0.1', '*.1.2.3', 'bücher.example', 'a..b', '-a.example', 'a_b.example', '*', '*.', 'a.*.example', 'example.com:443']) {
      expect(EgressPolicy.safeParse({ mode: 'allow', rules: [{ host }] }).success).toBe(false);
    }
  });

  it.each([
    ['127.0.0.1', '127.0.0.1'],
    ['127.1', '127.0.0.1'],
    ['2130706433', '127.0.0.1'],
    ['0177.0.0.1', '127.0.0.1'],
    ['0x7f.1', '127.0.0.1'],
    ['0', '0.0.0.0'],
    ['[::ffff:127.0.0.1]', '::ffff:7f00:1'],
    ['[0:0:0:0:0:ffff:7f00:1]', '::ffff:7f00:1'],
    ['::1', '::1'],
  ])('sees %s as the IP literal %s and refuses it', (raw, ip) => {
    const c = canonicalHost(raw);
    expect(c).toMatchObject({ kind: 'ip', ip });
    expect(decideEgress({ mode: 'open' }, operator, { host: raw, port: 443 })).toMatchObject({ allowed: false, reason: 'ip-literal' });
  });

  it.each(['', 'a@b.example', 'b.example:443', 'a%2eb.example', 'a b.example', 'a/b', '[::1', 'x'.repeat(300)])('refuses the malformed host %j', (raw) => {
    expect(decideEgress({ mode: 'open' }, operator, { host: raw, port: 443 })).toMatchObject({ allowed: false, reason: 'invalid-host' });
  });

  it('splits authorities and refuses ports 0 and 65536', () => {
    expect(splitAuthority('example.com:8443')).toEqual({ host: 'example.com', port: 8443 });
    expect(splitAuthority('[::1]:80')).toEqual({ host: '[::1]', port: 80 });
    expect(splitAuthority('example.com', 80)).toEqual({ host: 'example.com', port: 80 });
    expect(splitAuthority('example.com:0')).toBeUndefined();
    expect(splitAuthority('example.com:65536')).toBeUndefined();
    expect(splitAuthority('a:b:c')).toBeUndefined();
  });
});

describe('decideEgress', () => {
  it('denies everything under none, naming the policy', () => {
    expect(decideEgress({ mode: 'none' }, operator, { host: 'example.com', port: 443 })).toMatchObject({
      allowed: false,
      rule: 'policy:none',
      reason: 'policy-none',
    });
  });

  it('lets the operator deny list win over open and over a matching rule', () => {
    expect(decideEgress({ mode: 'open' }, operator, { host: 'x.evil.test', port: 443 })).toMatchObject({ allowed: false, rule: 'deny[0]:*.evil.test' });
    expect(decideEgress(allow([{ host: 'blocked.example.com' }]), operator, { host: 'BLOCKED.example.com.', port: 443 })).toMatchObject({
      allowed: false,
      rule: 'deny[1]:blocked.example.com',
      reason: 'operator-deny',
    });
  });

  it('allows 443 by default and other ports only when listed', () => {
    const policy = allow([{ host: 'registry.npmjs.org' }, { host: 'example.com', ports: [80, 8080] }]);
    expect(decideEgress(policy, operator, { host: 'registry.npmjs.org', port: 443 })).toEqual({
      allowed: true,
      host: 'registry.npmjs.org',
      rule: 'rules[0]:registry.npmjs.org',
    });
    expect(decideEgress(policy, operator, { host: 'registry.npmjs.org', port: 80 })).toMatchObject({ allowed: false, reason: 'no-matching-rule' });
    expect(decideEgress(policy, operator, { host: 'example.com', port: 8080 })).toMatchObject({ allowed: true, rule: 'rules[1]:example.com' });
    expect(decideEgress(policy, operator, { host: 'example.com', port: 443 })).toMatchObject({ allowed: false });
    expect(decideEgress(policy, operator, { host: 'example.com', port: 0 })).toMatchObject({ allowed: false, reason: 'invalid-host' });
  });

  it('checks methods and normalised path prefixes, and never lets such a rule open a tunnel', () => {
    const policy = allow([{ host: 'api.example.com', ports: [80, 443], methods: ['GET'], pathPrefix: '/v1/' }]);
    const ask = (method: string | undefined, path: string | undefined, port = 80) =>
      decideEgress(policy, operator, { host: 'api.example.com', port, method, path });
    expect(ask('GET', '/v1/items?x=1')).toMatchObject({ allowed: true });
    expect(ask('get', '/v1/items')).toMatchObject({ allowed: true });
    expect(ask('POST', '/v1/items')).toMatchObject({ allowed: false, reason: 'no-matching-rule' });
    expect(ask('GET', '/v2/items')).toMatchObject({ allowed: false });
    expect(ask('GET', '/V1/items')).toMatchObject({ allowed: false });
    for (const sneaky of ['/v1/../admin', '/v1/%2e%2e/admin', '/v1/%2E%2E/admin', '/v1//x', '/v1/a%2fb', '/v1\\..\\admin', '/v1/./x']) {
      expect(ask('GET', sneaky)).toMatchObject({ allowed: false, reason: 'ambiguous-path' });
    }
    expect(ask(undefined, undefined, 443)).toMatchObject({ allowed: false, reason: 'no-matching-rule' });
  });

  it('normalises paths or says why not', () => {
    expect(normalisePath('/a/b/?q=%2e%2e')).toEqual({ path: '/a/b/' });
    expect(normalisePath('a/b')).toHaveProperty('error');
  });

  it('gives the operator default and refuses modes above the maximum', () => {
    const op = { defaultPolicy: { mode: 'none' } as const, maxMode: 'allow' as const };
    expect(effectiveEgressPolicy(undefined, op)).toEqual({ mode: 'none' });
    expect(() => effectiveEgressPolicy({ mode: 'open' }, op)).toThrow(/at most 'allow'/);
  });
});

describe('AddressFloor', () => {
  const floor = new AddressFloor({ labCidrs: parseLabCidrs(['10.77.0.0/24']), selfAddresses: () => ['10.77.0.1', '192.0.2.10', 'fe80::1%eth0'] });

  it.each([
    ['127.0.0.1', 'loopback'],
    ['0.0.0.0', 'unspecified'],
    ['0.1.2.3', 'unspecified'],
    ['169.254.169.254', 'link-local'],
    ['::ffff:169.254.169.254', 'link-local'],
    ['::ffff:a9fe:a9fe', 'link-local'],
    ['::ffff:127.0.0.1', 'loopback'],
    ['::ffff:7f00:1', 'loopback'],
    ['0:0:0:0:0:ffff:7f00:1', 'loopback'],
    ['::1', 'loopback'],
    ['::', 'unspecified'],
    ['::127.0.0.1', 'unspecified'],
    ['64:ff9b::7f00:1', 'ipv6-transition'],
    ['2002:7f00:1::', 'ipv6-transition'],
    ['2001:0:4136:e378::1', 'ipv6-transition'],
    ['fe80::1', 'link-local'],
    ['fd00:ec2::254', 'metadata'],
    ['fd00:ec2::253', 'unique-local'],
    ['168.63.129.16', 'metadata'],
    ['::ffff:168.63.129.16', 'metadata'],
    ['100.100.100.200', 'metadata'],
    ['fc00::1', 'unique-local'],
    ['ff02::1', 'multicast'],
    ['224.0.0.1', 'multicast'],
    ['255.255.255.255', 'reserved'],
    ['10.0.0.1', 'private'],
    ['::ffff:10.0.0.1', 'private'],
    ['172.16.5.4', 'private'],
    ['192.168.1.1', 'private'],
    ['100.64.0.1', 'cgnat'],
    ['10.77.0.1', 'self'],
    ['192.0.2.10', 'self'],
    ['not-an-ip', 'invalid'],
  ])('refuses %s as %s', (ip, cls) => {
    expect(floor.classify(ip)).toBe(cls);
  });

  it('lets public addresses and the lab range through', () => {
    expect(floor.classify('93.184.216.34')).toBeUndefined();
    expect(floor.classify('2606:2800:220:1::1')).toBeUndefined();
    expect(floor.classify('10.77.0.2')).toBeUndefined();
    expect(floor.classify('::ffff:10.77.0.2')).toBeUndefined();
    expect(new AddressFloor({ selfAddresses: () => [] }).classify('10.77.0.2')).toBe('private');
  });

  it('keeps the metadata addresses inside private space refused even when a lab range covers them', () => {
    const wide = new AddressFloor({ labCidrs: parseLabCidrs(['100.64.0.0/10']), selfAddresses: () => [] });
    expect(wide.classify('100.100.100.199')).toBeUndefined();
    expect(wide.classify('100.100.100.200')).toBe('metadata');
  });

  it('refuses lab CIDRs that are not wholly private', () => {
    for (const bad of ['127.0.0.0/8', '169.254.0.0/16', '0.0.0.0/8', '0.0.0.0/0', '8.0.0.0/7', '10.0.0.0/7', '224.0.0.0/4', 'fc00::/7', '10.1.2.3']) {
      expect(() => parseLabCidrs([bad])).toThrow(/egress.labCidrs/);
    }
    expect(parseLabCidrs(['10.77.0.9/24'])).toEqual([{ address: '10.77.0.0', prefix: 24 }]);
  });
});

describe('egress configuration', () => {
  it('reads egress settings from the file and hides operator secrets', async () => {
    const { mkdtempSync, writeFileSync } = await import('node:fs');
    const dir = mkdtempSync('/tmp/warren-egress-config-');
    writeFileSync(
      `${dir}/c.json`,
      JSON.stringify({ egress: { maxMode: 'open', deny: ['*.Evil.test'], labCidrs: ['10.77.0.0/24'], secrets: { openai: 'sk-real' } } }),
    );
    const config = loadConfig({}, {}, `${dir}/c.json`);
    expect(config.egress).toMatchObject({ maxMode: 'open', deny: ['*.evil.test'], defaultPolicy: { mode: 'none' }, maxConnectionsPerSandbox: 64 });
    expect(JSON.stringify(redactConfig(config))).not.toContain('sk-real');
    writeFileSync(`${dir}/bad.json`, JSON.stringify({ egress: { labCidrs: ['127.0.0.0/8'] } }));
    expect(() => loadConfig({}, {}, `${dir}/bad.json`)).toThrow(/labCidrs/);
    writeFileSync(`${dir}/bad2.json`, JSON.stringify({ egress: { defaultPolicy: { mode: 'open' } } }));
    expect(() => loadConfig({}, {}, `${dir}/bad2.json`)).toThrow(/more open than maxMode/);
  });

  it('checks secret bindings', () => {
    const ok = { name: 'API_KEY', value: 'v', hosts: ['api.example.com'], target: { header: 'Authorization', template: 'Bearer {secret}' } };
    expect(SecretBinding.safeParse(ok).success).toBe(true);
    expect(SecretBinding.safeParse({ ...ok, ref: 'x' }).success).toBe(false);
    expect(SecretBinding.safeParse({ ...ok, target: { header: 'Authorization', template: 'Bearer' } }).success).toBe(false);
    expect(SecretBinding.safeParse({ ...ok, target: { header: 'X\r\nY', template: '{secret}' } }).success).toBe(false);
  });
});

describe('egress at create', () => {
  it('plans the policy (the default when none is named) and the secrets, after the operator maximum; bridge is refused with either', async () => {
    const { planSandbox } = await import('../src/sandbox-plan.js');
    const config = loadConfig({}, { stateDir: '/tmp/warren-egress-plan', allowBridgeNetwork: true });
    const context = { config, runtimes: ['runc'] };
    expect(planSandbox({ egress: { mode: 'none' } }, context).settings.network).toBe('none');
    expect(planSandbox({}, context).egress).toEqual({ mode: 'none' });
    const allow = planSandbox({ egress: { mode: 'allow', rules: [{ host: 'registry.npmjs.org' }] } }, context);
    expect([allow.egress, allow.settings.network]).toEqual([{ mode: 'allow', rules: [{ host: 'registry.npmjs.org' }] }, 'none']);
    const secrets = [{ name: 'K', value: 'v', hosts: ['api.example.com'], target: { query: 'key' } }];
    expect(planSandbox({ secrets }, context).secrets).toEqual(secrets);
    expect(() => planSandbox({ egress: { mode: 'open' } }, context)).toThrow(/at most 'allow'/);
    expect(() => planSandbox({ egress: { mode: 'allow', rules: [{ host: 'a.example' }] }, network: 'bridge' }, context)).toThrow(/network 'bridge' bypasses/);
    expect(() => planSandbox({ secrets, network: 'bridge' }, context)).toThrow(/network 'bridge' bypasses/);
    const strictDefault = {
      ...context,
      config: { ...config, egress: { ...config.egress, defaultPolicy: EgressPolicy.parse({ mode: 'allow', rules: [{ host: 'a.example' }] }) } },
    };
    expect(planSandbox({}, strictDefault).egress).toEqual({ mode: 'allow', rules: [{ host: 'a.example' }] });
    const mountable = { ...context, config: { ...config, allowedMountRoots: ['/srv'] } };
    expect(() => planSandbox({ mounts: [{ hostPath: '/srv/data', path: '/run/warren-egress' }] }, mountable)).toThrow(/run\/warren-egress/);
  });
});
