import { describe, expect, it } from '@jest/globals';
import { CodedError, CreateSandboxRequest, decodeGrant, FilePolicy, issueText, narrowPolicy, RESERVED_FOLDERS } from '../src/index.js';

const rawGrant = (policy: unknown) => Buffer.from(JSON.stringify({ policy, allowExec: true })).toString('base64url');

describe('policy roots in reserved folders are refused wherever a policy is parsed', () => {
  const refused = [
    '/proc',
    '/proc/self',
    '/sys/kernel',
    '/dev',
    '/dev/shm',
    '/run/warren',
    '/run/warren/x',
    '/opt/warren',
    '/workspace/../proc',
    '//dev//shm/',
    '/./sys',
  ];
  const accepted = ['/', '/workspace', '/run', '/opt', '/procfs', '/device', '/opt/warren-data', '/srv/proc'];

  it.each(refused)('refuses the root %s in create requests, named paths, the grant header and derive', (root) => {
    const create = CreateSandboxRequest.safeParse({ policy: { root } });
    expect(create.success).toBe(false);
    const message = create.error!.issues.map(issueText).join('; ');
    expect(message).toMatch(
      /^policy\.root: the root '.*' is in \/(proc|sys|dev|run\/warren|opt\/warren), which no policy may grant \(\/proc, \/sys, \/dev, \/run\/warren, \/opt\/warren are the kernel's and the daemon's own\); choose a folder such as \/workspace$/,
    );
    expect(FilePolicy.safeParse({ paths: { data: { root, mode: 'ro' } } }).success).toBe(false);
    expect(() => decodeGrant(rawGrant({ root, readOnly: false }))).toThrow(CodedError);
    expect(() => decodeGrant(rawGrant({ root, readOnly: false }))).toThrow(/no policy may grant/);
    expect(() => narrowPolicy({ root, readOnly: false }, { inherit: true })).toThrow(/The policy to derive from is not valid: the root .* no policy may grant/);
  });

  it.each(accepted)('accepts the root %s (reserved folders match on whole segments)', (root) => {
    expect(CreateSandboxRequest.safeParse({ policy: { root } }).success).toBe(true);
    expect(decodeGrant(rawGrant({ root, readOnly: false })).policy).toMatchObject({ root });
  });

  it('names the reserved folders once, for the agent to enforce by real path too', () => {
    expect(RESERVED_FOLDERS).toEqual(['/proc', '/sys', '/dev', '/run/warren', '/opt/warren']);
  });
});
