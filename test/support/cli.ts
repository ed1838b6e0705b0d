import { spawn } from 'node:child_process';
import path from 'node:path';

/** The built `warren` entry point (run `pnpm exec tsc -b` first: it loads packages/cli/dist). */
export const WARREN_BIN = path.resolve(import.meta.dirname, '../../packages/cli/bin/warren.js');

/** What one CLI run printed and how it ended. */
export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface CliRunOptions {
  /** Variables laid over this process's environment (WARREN_URL, WARREN_API_KEY, ...). */
  env?: Record<string, string>;
  /** Written to the CLI's stdin, which is then closed; without it stdin is closed at once. */
  input?: string;
  cwd?: string;
  /** A hang guard: the process is killed after this long (default 60 s). */
  timeoutMs?: number;
}

/**
 * Runs the built `warren` command as a child process and collects its output.
 *
 * @example
 * const { code, stdout } = await runCli(['ls', '--json'], { env: { WARREN_URL: warren.url, WARREN_API_KEY: warren.apiKey } });
 */
export function runCli(args: string[], options: CliRunOptions = {}): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [WARREN_BIN, ...args], {
      cwd: options.cwd,
      env: { ...process.env, NODE_OPTIONS: '', ...options.env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (c: Buffer) => out.push(c));
    child.stderr.on('data', (c: Buffer) => err.push(c));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 60_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') });
    });
    child.stdin.end(options.input ?? '');
  });
}
