import { describe, expect, it } from '@jest/globals';
import { CodedError } from '@warren/protocol';
import { templateImage } from '../src/e2b/template-builds/names.js';
import { parseImageRef } from '../src/image-ref.js';
import { isTenantRootRef, operatorBuildName, tenantBuildName, tenantPathPart } from '../src/tenancy/image-names.js';
import { TenantName } from '../src/tenancy/principals.js';

describe("tenants' image names", () => {
  // Every shape a tenant name may take: a trailing dash (which no image name may end a part with), double dashes, digits, the longest.
  const tenants = ['acme', 'acme-', 'acme--', 'a-b', 'a--b-', '0', '9-', 'a'.repeat(63), `${'a'.repeat(62)}-`];

  it.each(tenants)('gives tenant %j names the engine takes, for builds and E2B templates alike', (tenant) => {
    expect(TenantName.safeParse(tenant).success).toBe(true);
    for (const name of [tenantBuildName(tenant, 'myimg:1'), templateImage(tenant, 'my-tpl', 'default')]) expect(() => parseImageRef(name)).not.toThrow();
  });

  it('never gives two tenants one namespace', () => {
    const parts = ['acme', 'acme-', 'acme--', 'acme-1', 'acme_1', 'acme1'].filter((t) => TenantName.safeParse(t).success).map(tenantPathPart);
    expect(new Set(parts).size).toBe(parts.length);
    expect(tenantPathPart('acme-')).toBe('acme_1');
    expect(templateImage('acme-', 'x', 'v1')).toBe('e2b/acme_1/x:v1');
  });

  it("names a member's build under its tenant, keeps its own prefix, and refuses another's or a root", () => {
    expect(tenantBuildName('acme', 'myimg:1')).toBe('warren-built/acme/myimg:1');
    expect(tenantBuildName('acme', 'warren-built/acme/myimg:1')).toBe('warren-built/acme/myimg:1');
    for (const tag of ['warren-built/bravo/myimg:1', 'e2b/acme/x:1', 'warren-built/x:1']) expect(() => tenantBuildName('acme', tag)).toThrow(CodedError);
    expect(() => tenantBuildName('acme', `${'a'.repeat(250)}:1`)).toThrow(/at most 237 characters/);
  });

  it("names an admin key's build as asked, never under a tenants' root", () => {
    expect(operatorBuildName('py-tools:1')).toBe('py-tools:1');
    for (const tag of ['warren-built/acme/x:1', 'e2b/acme/x:v1']) expect(() => operatorBuildName(tag)).toThrow(CodedError);
  });

  it('knows a tenants-root name in every spelling of Docker Hub, and only there', () => {
    for (const ref of ['warren-built/acme/x:1', 'docker.io/warren-built/acme/x', 'index.docker.io/e2b/acme/x:v1'])
      expect(isTenantRootRef(parseImageRef(ref))).toBe(true);
    for (const ref of ['ghcr.io/warren-built/acme/x', 'library/warren-built/x', 'warren-builtx/a', 'python:3.12'])
      expect(isTenantRootRef(parseImageRef(ref))).toBe(false);
  });
});
