import { describe, expect, it } from '@jest/globals';
import { parseAllow, policyFromOptions } from '../src/network-commands.js';

describe('warren network update options', () => {
  it('reads --allow as host, host:port and host:port,port, and refuses IP addresses and junk naming what is allowed', () => {
    expect(parseAllow('registry.npmjs.org')).toEqual({ host: 'registry.npmjs.org' });
    expect(parseAllow('*.pythonhosted.org:443')).toEqual({ host: '*.pythonhosted.org', ports: [443] });
    expect(parseAllow('deb.debian.org:80,443')).toEqual({ host: 'deb.debian.org', ports: [80, 443] });
    expect(() => parseAllow('10.0.0.1')).toThrow(/IP address/);
    expect(() => parseAllow('a.test:0')).toThrow(/--allow 'a.test:0'/);
    expect(() => parseAllow('a.test:80:81')).toThrow(/host, host:port/);
  });

  it('takes exactly one of --allow, --none, --open or --policy', () => {
    expect(policyFromOptions({ allow: ['a.test', 'b.test:80'] })).toEqual({ mode: 'allow', rules: [{ host: 'a.test' }, { host: 'b.test', ports: [80] }] });
    expect(policyFromOptions({ none: true })).toEqual({ mode: 'none' });
    expect(policyFromOptions({ open: true })).toEqual({ mode: 'open' });
    expect(policyFromOptions({ policy: '{"mode":"allow","rules":[{"host":"pypi.org"}]}' })).toEqual({ mode: 'allow', rules: [{ host: 'pypi.org' }] });
    expect(() => policyFromOptions({})).toThrow(/exactly one/);
    expect(() => policyFromOptions({ none: true, allow: ['a.test'] })).toThrow(/exactly one/);
    expect(() => policyFromOptions({ policy: '{"mode":"allow","rules":[]}' })).toThrow(/--policy: rules/);
    expect(() => policyFromOptions({ policy: 'nope' })).toThrow(/not JSON/);
  });
});
