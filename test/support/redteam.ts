import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { expect } from '@jest/globals';
import type { Sandbox } from '@warren/sdk';

/**
 * A file on the host that no attack may change: its bytes, mode and owner are checked after each
 * attack. It stands for any host file an escape would reach.
 */
export class HostSentinel {
  private constructor(
    readonly path: string,
    private readonly content: string,
    private readonly owner: { uid: number; gid: number; mode: number },
  ) {}

  static async make(): Promise<HostSentinel> {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'warren-redteam-'));
    const file = path.join(dir, 'sentinel');
    const content = `host sentinel ${randomBytes(8).toString('hex')}\n`;
    await writeFile(file, content, { mode: 0o600 });
    const info = await stat(file);
    return new HostSentinel(file, content, { uid: info.uid, gid: info.gid, mode: info.mode });
  }

  async expectUnchanged(): Promise<void> {
    const info = await stat(this.path);
    expect({ content: await readFile(this.path, 'utf8'), uid: info.uid, gid: info.gid, mode: info.mode }).toEqual({ content: this.content, ...this.owner });
  }

  async remove(): Promise<void> {
    await rm(path.dirname(this.path), { recursive: true, force: true });
  }
}

/**
 * Runs a script as sandbox code (`sh -c`, as the sandbox user) and collects the `key=value`
 * lines it prints as facts, so a test states the outcome of each step in one object.
 */
export async function sandboxCode(
  sandbox: Sandbox,
  script: string,
  timeoutMs = 60_000,
): Promise<{ facts: Record<string, string>; stdout: string; stderr: string; exitCode: number }> {
  const run = await sandbox.commands.run(['sh', '-c', script], { timeoutMs });
  const facts: Record<string, string> = {};
  for (const line of run.stdout.split('\n')) {
    const match = /^([A-Za-z][\w-]*)[=:](.*)$/.exec(line.trim());
    if (match) facts[match[1]!] = match[2]!.trim();
  }
  return { facts, stdout: run.stdout, stderr: run.stderr, exitCode: run.exitCode ?? -1 };
}

/**
 * Who the sandbox's daemon is: its pid and start time (a restarted daemon could get the same pid
 * in its fresh namespace, never the same start). `expectSame` checks, after an attack, that the
 * same daemon still answers.
 */
export class DaemonIdentity {
  private constructor(
    readonly pid: number,
    private readonly startedAt: number,
  ) {}

  static async of(sandbox: Sandbox): Promise<DaemonIdentity> {
    const info = await sandbox.daemonInfo();
    return new DaemonIdentity(info.pid, Date.now() - info.uptimeMs);
  }

  /** Checks the same daemon answers; returns its info for further checks (memory, say). */
  async expectSame(sandbox: Sandbox): Promise<Awaited<ReturnType<Sandbox['daemonInfo']>>> {
    const info = await sandbox.daemonInfo();
    expect(info.pid).toBe(this.pid);
    expect(Math.abs(Date.now() - info.uptimeMs - this.startedAt)).toBeLessThan(2_000);
    return info;
  }
}
