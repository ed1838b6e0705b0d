import { spawn } from 'node:child_process';
import { stat } from 'node:fs/promises';
import { CodedError } from '@warren/protocol';
import type { Handler } from '../dispatch.js';
import { resolvePath, type FilePolicy } from '../policy.js';
import { CappedOutput } from './output.js';

/** What each stream of a foreground command keeps (head + tail) before dropping the middle. */
export const DEFAULT_OUTPUT_CAP_BYTES = 1024 * 1024;
export const DEFAULT_EXEC_TIMEOUT_MS = 10 * 60 * 1000;

/**
 * The environment a child starts from. The daemon's own environment never reaches a child: the
 * caller's `env` is laid over this and nothing else.
 */
export function baseEnvironment(home: string): Record<string, string> {
  return {
    PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    HOME: home,
    LANG: 'C.UTF-8',
    LC_ALL: 'C.UTF-8',
    TERM: 'dumb',
  };
}

export interface ExecOptions {
  policy: FilePolicy;
  home: string;
  outputCapBytes?: number;
}

export function execHandlers(options: ExecOptions): { 'process.exec': Handler<'process.exec'> } {
  const cap = options.outputCapBytes ?? DEFAULT_OUTPUT_CAP_BYTES;
  return {
    async 'process.exec'(params, ctx) {
      const cwd = await resolveCwd(options.policy, params.cwd);
      const [file, args] = typeof params.cmd === 'string' ? ['/bin/sh', ['-c', params.cmd]] : [params.cmd[0]!, params.cmd.slice(1)];
      const started = performance.now();
      const stdout = new CappedOutput(cap);
      const stderr = new CappedOutput(cap);
      // detached: the child leads its own process group, so a timeout can kill the whole group.
      const child = spawn(file, args, {
        cwd,
        env: { ...baseEnvironment(options.home), ...params.env },
        detached: true,
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      child.stdout.on('data', (chunk: Buffer) => stdout.push(chunk));
      child.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));
      child.stdin.on('error', () => undefined); // a child that exits before reading its stdin is not an error
      child.stdin.end(params.stdin ?? '');

      let timedOut = false;
      const killGroup = () => {
        if (child.pid === undefined) return;
        try {
          process.kill(-child.pid, 'SIGKILL');
        } catch {
          // the group is already gone
        }
      };
      const timer = setTimeout(() => {
        timedOut = true;
        killGroup();
      }, params.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS);
      const onAbort = () => killGroup();
      ctx.signal.addEventListener('abort', onAbort, { once: true });

      try {
        const { code, signal } = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve, reject) => {
          child.once('error', (err) => reject(spawnError(err, file)));
          // When the leader exits, whatever it left running in its group goes too; the pipes
          // then close and every byte already written is still read.
          child.once('exit', () => killGroup());
          child.once('close', (code, signal) => resolve({ code, signal }));
        });
        if (ctx.signal.aborted && !timedOut) throw new CodedError('CANCELLED', 'The command was cancelled; its process group was killed.');
        return {
          result: {
            exitCode: code,
            signal,
            stdout: stdout.text(),
            stderr: stderr.text(),
            durationMs: Math.round((performance.now() - started) * 100) / 100,
            timedOut,
            truncated: stdout.truncated || stderr.truncated,
            stdoutBytes: stdout.total,
            stderrBytes: stderr.total,
          },
        };
      } finally {
        clearTimeout(timer);
        ctx.signal.removeEventListener('abort', onAbort);
      }
    },
  };
}

async function resolveCwd(policy: FilePolicy, cwd: string | undefined): Promise<string> {
  const target = await resolvePath(policy, cwd ?? '.', 'read');
  const info = await stat(target.absolute).catch(() => undefined);
  if (!info) throw new CodedError('NOT_FOUND', `The working folder '${target.display}' does not exist.`, { path: target.display });
  if (!info.isDirectory()) throw new CodedError('NOT_A_DIRECTORY', `The working folder '${target.display}' is a file.`, { path: target.display });
  return target.absolute;
}

function spawnError(err: NodeJS.ErrnoException, file: string): CodedError {
  if (err.code === 'ENOENT') return new CodedError('NOT_FOUND', `No program '${file}' in the sandbox.`, { program: file });
  if (err.code === 'EACCES') return new CodedError('FORBIDDEN', `'${file}' is not executable by the sandbox user.`, { program: file });
  if (err.code === 'EAGAIN') return new CodedError('RESOURCE_EXHAUSTED', 'The sandbox is out of processes (pids limit); wait for some to finish.');
  return new CodedError('INTERNAL', `Could not start '${file}': ${err.message}`);
}
