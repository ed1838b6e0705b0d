import { expect, it } from '@jest/globals';
import type { DaemonEndpoint, SandboxProvider, SandboxSpec } from '@warren/controller';

/** What a contract run needs from its provider: the provider, and a spec that it can start. */
export interface ContractSubject {
  provider: SandboxProvider;
  /** A spec of a sandbox the provider can run (unique `agentId` per call). */
  spec: () => SandboxSpec;
  /** Makes the sandbox's processes stop from outside (a daemon killed). */
  stopFromOutside: (handle: string) => Promise<void>;
  /** A real call to a daemon through its endpoint; providers whose sandboxes run a real daemon pass one. */
  probe?: (endpoint: DaemonEndpoint, secret: string) => Promise<unknown>;
  /**
   * Backends that cannot freeze or stop a sandbox with its files kept (Kubernetes) say so: the
   * contract then holds them to refusing with `NOT_SUPPORTED` and leaving the sandbox running.
   */
  unsupported?: { pause?: boolean; stopStart?: boolean };
}

/**
 * The contract every {@link SandboxProvider} keeps, as one suite that each provider's tier runs:
 * the fake in unit tests, Docker in e2e, and later providers with a runner of their own. Call it
 * inside a `describe`.
 *
 * @example
 * describe('the Docker provider keeps the contract', () => providerContract(() => subject));
 */
export function providerContract(subject: () => ContractSubject): void {
  it('creates a running sandbox that lists with its labels, and removes it (twice is no error)', async () => {
    const { provider, spec } = subject();
    const wanted = spec();
    const handle = await provider.create(wanted);
    try {
      expect(await provider.inspect(handle)).toBe('running');
      const listed = (await provider.list()).find((s) => s.handle === handle);
      expect(listed?.labels).toMatchObject(wanted.labels);
      expect((await provider.states()).get(handle)).toBe('running');
    } finally {
      await provider.remove(handle, wanted.agentId);
    }
    expect(await provider.inspect(handle)).toBeUndefined();
    await provider.remove(handle, wanted.agentId);
  });

  it('pauses and resumes; stops and starts again (or refuses with NOT_SUPPORTED and keeps running)', async () => {
    const { provider, spec, unsupported } = subject();
    const wanted = spec();
    const handle = await provider.create(wanted);
    try {
      if (unsupported?.pause) await expect(provider.pause(handle)).rejects.toMatchObject({ code: 'NOT_SUPPORTED' });
      if (unsupported?.stopStart) {
        await expect(provider.stop(handle)).rejects.toMatchObject({ code: 'NOT_SUPPORTED' });
        await expect(provider.start(handle, wanted.agentId, wanted.daemonSecret)).rejects.toMatchObject({ code: 'NOT_SUPPORTED' });
      }
      if (unsupported?.pause || unsupported?.stopStart) {
        expect(await provider.inspect(handle)).toBe('running');
        return;
      }
      await provider.pause(handle);
      expect(await provider.inspect(handle)).toBe('paused');
      await provider.resume(handle);
      expect(await provider.inspect(handle)).toBe('running');
      await provider.stop(handle);
      expect(await provider.inspect(handle)).toBe('exited');
      await provider.start(handle, wanted.agentId, wanted.daemonSecret);
      expect(await provider.inspect(handle)).toBe('running');
    } finally {
      await provider.remove(handle, wanted.agentId);
    }
  });

  it('reaches the daemon through daemon(), before and after a stop and start', async () => {
    const { provider, spec, probe, unsupported } = subject();
    if (!probe) return; // a fake provider runs no daemon
    const wanted = spec();
    const handle = await provider.create(wanted);
    const answers = () =>
      waitFor(async () =>
        probe(provider.daemon(wanted.agentId), wanted.daemonSecret).then(
          () => true,
          () => false,
        ),
      );
    try {
      await answers();
      await expect(probe(provider.daemon(wanted.agentId), 'not-the-secret'.padEnd(48, 'x'))).rejects.toThrow();
      if (unsupported?.stopStart) return;
      await provider.stop(handle);
      await provider.start(handle, wanted.agentId, wanted.daemonSecret);
      await answers();
    } finally {
      await provider.remove(handle, wanted.agentId);
    }
  });

  it("reports a sandbox's death as an event, and its removal", async () => {
    const { provider, spec, stopFromOutside } = subject();
    const wanted = spec();
    const seen: string[] = [];
    const stop = await provider.events(
      (_handle, action) => seen.push(action),
      () => undefined,
    );
    const handle = await provider.create(wanted);
    try {
      await stopFromOutside(handle);
      await waitFor(() => seen.includes('die'));
      await provider.remove(handle, wanted.agentId);
      await waitFor(() => seen.includes('destroy'));
    } finally {
      stop();
      await provider.remove(handle, wanted.agentId);
    }
  });

  it('answers for the backend and describes its isolation', async () => {
    const { provider } = subject();
    await provider.ping();
    const isolation = await provider.isolation();
    expect(typeof isolation.limitsEnforced).toBe('boolean');
    expect((await provider.runtimes()).map((r) => r.name)).toContain('runc');
  });
}

async function waitFor(condition: () => boolean | Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error('the expected event did not come');
    await new Promise((r) => setTimeout(r, 20));
  }
}
