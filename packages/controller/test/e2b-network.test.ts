import { describe, expect, it } from '@jest/globals';
import { E2bHttpError } from '../src/e2b/errors.js';
import { ALL_TRAFFIC, e2bFromEgress, egressFromE2b } from '../src/e2b/control/network.js';

describe("E2B's network settings as Warren's egress policy", () => {
  it('maps E2B semantics: nothing denied is open, everything denied is none or the allowed hosts on 80 and 443', () => {
    expect(egressFromE2b({})).toEqual({ mode: 'open' });
    expect(egressFromE2b({ allowOut: ['pypi.org'] })).toEqual({ mode: 'open' });
    expect(egressFromE2b({}, true)).toEqual({ mode: 'open' });
    expect(egressFromE2b({}, false)).toEqual({ mode: 'none' });
    expect(egressFromE2b({ allow_internet_access: false })).toEqual({ mode: 'none' });
    expect(egressFromE2b({ denyOut: [ALL_TRAFFIC] })).toEqual({ mode: 'none' });
    expect(egressFromE2b({ allowOut: ['PyPI.org', '*.github.com', 'pypi.org'], denyOut: [ALL_TRAFFIC] })).toEqual({
      mode: 'allow',
      rules: [
        { host: 'pypi.org', ports: [80, 443] },
        { host: '*.github.com', ports: [80, 443] },
      ],
    });
    // allowOut wins over denyOut, as on E2B.
    expect(egressFromE2b({ allowOut: [ALL_TRAFFIC], denyOut: [ALL_TRAFFIC] })).toEqual({ mode: 'open' });
  });

  it('refuses what Warren cannot enforce with a 400 naming it, never drops it', () => {
    const refused = (network: Parameters<typeof egressFromE2b>[0]) => {
      try {
        egressFromE2b(network);
      } catch (err) {
        expect(err).toBeInstanceOf(E2bHttpError);
        return `${(err as E2bHttpError).status} ${(err as Error).message}`;
      }
      throw new Error('not refused');
    };
    expect(refused({ allowOut: ['8.8.8.8'], denyOut: [ALL_TRAFFIC] })).toMatch(/^400 allowOut '8\.8\.8\.8' \(an address/);
    expect(refused({ allowOut: ['10.0.0.0/8'], denyOut: [ALL_TRAFFIC] })).toMatch(/never addresses/);
    expect(refused({ allowOut: ['::1'], denyOut: [ALL_TRAFFIC] })).toMatch(/address/);
    expect(refused({ denyOut: ['1.1.1.1/32'] })).toMatch(/^400 denyOut '1\.1\.1\.1\/32'/);
    expect(refused({ allowOut: ['bad host!'], denyOut: [ALL_TRAFFIC] })).toMatch(/not a host name/);
    expect(refused({ rules: { 'api.example.com': [{ transform: { headers: { a: 'b' } } }] } })).toMatch(/network\.rules/);
    expect(refused({ egressProxy: { address: 'proxy:1080' } })).toMatch(/egressProxy/);
    expect(refused({ maskRequestHost: 'x' })).toMatch(/maskRequestHost/);
    expect(refused({ httpsPorts: [8443] })).toMatch(/httpsPorts/);
    expect(refused({ allowPublicTraffic: true })).toMatch(/public-ports/);
    expect(egressFromE2b({ allowPublicTraffic: false, egressProxy: null, rules: {} }, false)).toEqual({ mode: 'none' });
  });

  it("describes Warren's policy back in E2B's terms", () => {
    expect(e2bFromEgress(undefined)).toEqual({ network: { denyOut: [ALL_TRAFFIC] }, allowInternetAccess: false });
    expect(e2bFromEgress({ mode: 'open' })).toEqual({ network: {}, allowInternetAccess: true });
    expect(e2bFromEgress({ mode: 'allow', rules: [{ host: 'a.test', ports: [80] }] })).toEqual({
      network: { allowOut: ['a.test'], denyOut: [ALL_TRAFFIC] },
      allowInternetAccess: false,
    });
  });
});
