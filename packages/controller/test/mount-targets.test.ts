import { describe, expect, it } from '@jest/globals';
import { reservedTargetOf } from '../src/sandbox-plan.js';

describe('reservedTargetOf: where no mount, volume or workspace may go', () => {
  it.each([
    ['/', '/'],
    ['/opt', '/opt/warren'],
    ['/opt/warren/x', '/opt/warren'],
    ['/run', '/run/warren'],
    ['//run//', '/run/warren'],
    ['/var/run', '/run/warren'],
    ['/var/run/warren/cpu', '/run/warren'],
    ['/var/lock/../run', '/run/warren'],
    ['/data/../opt', '/opt/warren'],
    ['/run/warren-egress/..', '/run/warren'],
    ['/proc/self', '/proc'],
    ['/dev', '/dev'],
  ])('%s covers %s', (target, reserved) => {
    expect(reservedTargetOf(target)).toBe(reserved);
  });

  it.each(['/data', '/mnt/x', '/workspace/cache', '/var/lib/thing', '/runner', '/opt2', '/home/user'])('%s is free', (target) => {
    expect(reservedTargetOf(target)).toBeUndefined();
  });
});
