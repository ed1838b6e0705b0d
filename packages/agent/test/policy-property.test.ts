import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { mkdir, mkdtemp, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { canRead, canWrite, CodedError, isWithin, locate, narrowPolicy, type DeriveRequest, type FilePolicy } from '@warren/protocol';
import { resolvePath } from '../src/policy.js';

/** Path segments a hostile caller might use, mixed with ordinary names. */
const segment = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.constantFrom('..', '.', '', 'src', 'pub', 'a.py', 'link-out', 'link-in', 'link-up', 'loop', 'to-secret', 's.txt', 'secret', 'workspace'),
  },
  { weight: 2, arbitrary: fc.constantFrom('workspace2', 'out', 'etc', 'passwd', '\u2024\u2024', '%2e%2e', '..\\..', ' ', 'proc', 'self', 'root') },
  { weight: 1, arbitrary: fc.string({ minLength: 1, maxLength: 4 }).filter((s) => !s.includes('/') && !s.includes('\0')) },
);
const pathArb = fc.tuple(fc.boolean(), fc.array(segment, { minLength: 0, maxLength: 7 })).map(([abs, segs]) => (abs ? '/' : '') + segs.join('/'));

describe('property: no generated path resolves outside the policy', () => {
  let dir: string;
  let root: string;

  beforeAll(async () => {
    dir = await realpath(await mkdtemp(path.join(os.tmpdir(), 'warren-prop-')));
    root = path.join(dir, 'workspace');
    await mkdir(path.join(root, 'src'), { recursive: true });
    await mkdir(path.join(root, 'pub'), { recursive: true });
    await mkdir(path.join(dir, 'workspace2'));
    await writeFile(path.join(root, 'src/a.py'), 'x');
    await symlink(dir, path.join(root, 'link-out'));
    await symlink('src', path.join(root, 'link-in'));
    await symlink('..', path.join(root, 'src/link-up'));
    await symlink('loop', path.join(root, 'loop'));
    await mkdir(path.join(root, 'secret'));
    await writeFile(path.join(root, 'secret/s.txt'), 's');
    await symlink('../secret', path.join(root, 'pub/to-secret'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('every resolved path lies inside the real root, for reads and writes', async () => {
    const policies: FilePolicy[] = [
      { root, readOnly: false },
      { root, readOnly: false, restrict: { read: [`${root}/pub`], write: [`${root}/src`] } },
      { paths: { code: { root: path.join(root, 'src'), mode: 'rw', writeApproval: false, readApproval: false } } },
    ];
    await fc.assert(
      fc.asyncProperty(pathArb, fc.constantFrom(0, 1, 2), fc.constantFrom<'read' | 'write'>('read', 'write'), async (input, which, intent) => {
        const policy = policies[which]!;
        let resolved;
        try {
          resolved = await resolvePath(policy, input, intent);
        } catch (err) {
          expect(err).toBeInstanceOf(CodedError);
          return;
        }
        const allowedRoot = which === 2 ? path.join(root, 'src') : root;
        expect(resolved.absolute === allowedRoot || resolved.absolute.startsWith(`${allowedRoot}/`)).toBe(true);
        if (which === 1) {
          const inPub = resolved.absolute === `${root}/pub` || resolved.absolute.startsWith(`${root}/pub/`);
          const inSrc = resolved.absolute === `${root}/src` || resolved.absolute.startsWith(`${root}/src/`);
          expect(intent === 'write' ? inSrc : inPub || inSrc).toBe(true);
        }
      }),
      { numRuns: 3000 },
    );
  });
});

describe('property: narrowPolicy never widens', () => {
  const roots = ['/workspace', '/workspace/src', '/workspace/out', '/workspace/src/lib', '/data', '/data/raw', '/etc', '/workspace2'];
  const parentArb: fc.Arbitrary<FilePolicy> = fc.oneof(
    fc.record({ root: fc.constant('/workspace'), readOnly: fc.boolean() }),
    fc.record({
      root: fc.constant('/workspace'),
      readOnly: fc.boolean(),
      restrict: fc.record({ read: fc.subarray(roots), write: fc.subarray(roots) }),
    }),
    fc.record({
      paths: fc.constant({
        data: { root: '/mnt/data', mode: 'ro' as const, writeApproval: true, readApproval: false },
        out: { root: '/workspace/out', mode: 'rw' as const, writeApproval: false, readApproval: false },
      }),
    }),
  );
  const reqPath = fc.oneof(fc.constantFrom(...roots, 'src', 'out/x', '../etc', '/data/raw/x', '/out', 'out', '/mnt/data'), pathArb);
  const requestArb: fc.Arbitrary<DeriveRequest> = fc.record(
    {
      allowRead: fc.oneof(reqPath, fc.array(reqPath, { maxLength: 3 })),
      allowWrite: fc.oneof(reqPath, fc.array(reqPath, { maxLength: 3 })),
      readonly: fc.boolean(),
      inherit: fc.boolean(),
    },
    { requiredKeys: [] },
  );
  const probe = fc.array(fc.oneof(reqPath, pathArb), { minLength: 1, maxLength: 8 });

  it('a derived policy reads and writes nothing its parent could not, and derived again stays inside', () => {
    fc.assert(
      fc.property(parentArb, requestArb, requestArb, probe, (parent, request, second, probes) => {
        let child: FilePolicy;
        try {
          child = narrowPolicy(parent, request);
        } catch (err) {
          expect((err as CodedError).code).toMatch(/^(PERMISSION_ESCALATION|INVALID_PARAMS)$/);
          return;
        }
        const asList = (v: string | string[] | undefined) => (v === undefined ? [] : typeof v === 'string' ? [v] : v);
        const within = (prefixes: string[], p: string) =>
          prefixes.some((prefix) => {
            const a = locate(parent, prefix);
            const b = locate(parent, p);
            return a !== undefined && b !== undefined && isWithin(a.virtual, b.virtual);
          });
        for (const p of probes) {
          if (canRead(child, p)) expect(canRead(parent, p)).toBe(true);
          if (canWrite(child, p)) expect(canWrite(parent, p)).toBe(true);
          // Without inherit the child gets exactly what it asked for, no more.
          if (!request.inherit && canWrite(child, p)) expect(!request.readonly && within(asList(request.allowWrite), p)).toBe(true);
          if (!request.inherit && canRead(child, p)) expect(within([...asList(request.allowRead), ...asList(request.allowWrite)], p)).toBe(true);
        }
        let grandchild: FilePolicy;
        try {
          grandchild = narrowPolicy(child, second);
        } catch (err) {
          expect((err as CodedError).code).toMatch(/^(PERMISSION_ESCALATION|INVALID_PARAMS)$/);
          return;
        }
        for (const p of probes) {
          if (canRead(grandchild, p)) expect(canRead(child, p) && canRead(parent, p)).toBe(true);
          if (canWrite(grandchild, p)) expect(canWrite(child, p) && canWrite(parent, p)).toBe(true);
        }
      }),
      { numRuns: 3000 },
    );
  });

  it('refuses to widen with PERMISSION_ESCALATION', () => {
    const ro: FilePolicy = { root: '/workspace', readOnly: true };
    expect(() => narrowPolicy(ro, { readonly: false })).toThrow(expect.objectContaining({ code: 'PERMISSION_ESCALATION' }));
    expect(() => narrowPolicy(ro, { allowWrite: 'src' })).toThrow(/widen/);
    expect(() => narrowPolicy({ root: '/workspace', readOnly: false }, { allowRead: '/etc' })).toThrow(/outside the parent/);
    const narrowed = narrowPolicy({ root: '/workspace', readOnly: false }, { allowRead: 'src' });
    expect(() => narrowPolicy(narrowed, { allowRead: '/workspace' })).toThrow(/not readable/);
    expect(narrowPolicy(narrowed, { inherit: true })).toEqual(narrowed);
  });

  it('narrows as seed 001 describes', () => {
    const parent: FilePolicy = { root: '/workspace', readOnly: false };
    expect(narrowPolicy(parent, {})).toEqual({ root: '/workspace', readOnly: false, restrict: { read: [], write: [] } });
    expect(narrowPolicy(parent, { inherit: true })).toEqual(parent);
    expect(narrowPolicy(parent, { inherit: true, readonly: true })).toEqual({
      root: '/workspace',
      readOnly: true,
      restrict: { read: ['/workspace'], write: [] },
    });
    const child = narrowPolicy(parent, { allowRead: 'src', allowWrite: ['out'] });
    expect(canRead(child, 'src/a.py')).toBe(true);
    expect(canWrite(child, 'src/a.py')).toBe(false);
    expect(canWrite(child, 'out/b.txt')).toBe(true);
    expect(canRead(child, 'README.md')).toBe(false);
  });
});
