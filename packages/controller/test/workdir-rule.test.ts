import { describe, expect, it } from '@jest/globals';
import { loadConfig } from '../src/config.js';
import { planSandbox, refuseWorkdir } from '../src/sandbox-plan.js';

describe('the working folder rule', () => {
  const plan = (workdir: string) => planSandbox({ workdir }, { config: loadConfig({}, { stateDir: '/tmp/warren-unit' }), runtimes: ['runc'] });

  it.each([
    '/proc/self/fd/3',
    '/proc',
    '/sys/fs/cgroup',
    '/dev/shm',
    '/opt/warren/bin',
    '/run/warren',
    '/var/run/warren/x',
    '/run/warren-egress',
    '/workspace/../proc/1/root',
    '//proc//self/',
  ])('refuses %s with FORBIDDEN, naming the field', (workdir) => {
    expect(() => plan(workdir)).toThrow(expect.objectContaining({ code: 'FORBIDDEN', details: expect.objectContaining({ field: 'workdir' }) }));
  });

  it.each(['/', '/run', '/var/run', '/opt', '/opt/warrenx', '/run/warren2', '/proc2', '/tmp/work', '/home/user/project'])('takes %s', (workdir) => {
    expect(plan(workdir).settings.workdir).toBe(workdir);
  });

  it('refuses a NUL with INVALID_PARAMS, and checks what a record brings too', () => {
    expect(() => plan('/work\u0000space')).toThrow(expect.objectContaining({ code: 'INVALID_PARAMS' }));
    expect(() => refuseWorkdir('/proc/self/fd/7')).toThrow(/lies in \/proc/);
    expect(() => refuseWorkdir('/workspace')).not.toThrow();
  });
});
