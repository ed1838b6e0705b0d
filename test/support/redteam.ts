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
    /** The daemon's start lies in this window of the test's clock (a call's round trip wide). */
    private readonly started: StartWindow,
  ) {}

  static async of(sandbox: Sandbox): Promise<DaemonIdentity> {
    const { info, started } = await startWindow(sandbox);
    return new DaemonIdentity(info.pid, started);
  }

  /** Checks the same daemon answers; returns its info for further checks (memory, say). */
  async expectSame(sandbox: Sandbox): Promise<Awaited<ReturnType<Sandbox['daemonInfo']>>> {
    const { info, started } = await startWindow(sandbox);
    expect(info.pid).toBe(this.pid);
    // The two windows overlap when it is the same start. The windows are as wide as each call's
    // round trip, so a slow answer on a loaded machine widens them instead of failing the check;
    // a restarted daemon starts after the first window ends.
    const slackMs = 500;
    expect(started.earliest - slackMs).toBeLessThanOrEqual(this.started.latest);
    expect(this.started.earliest - slackMs).toBeLessThanOrEqual(started.latest);
    return info;
  }
}

interface StartWindow {
  earliest: number;
  latest: number;
}

async function startWindow(sandbox: Sandbox) {
  const before = Date.now();
  const info = await sandbox.daemonInfo();
  const after = Date.now();
  return { info, started: { earliest: before - info.uptimeMs, latest: after - info.uptimeMs } };
}
