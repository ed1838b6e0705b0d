import type { Result } from '@warren/protocol';
import type { DaemonSession } from '../../daemon-session.js';
import { E2bHttpError } from '../errors.js';

/** Bash contexts' ids start with this; the rest names the shell session (`e2b-<id>`). */
export const BASH_CONTEXT_PREFIX = 'bash-';
/** The context a bash run without one uses, as E2B's template has one default context per language. */
export const DEFAULT_BASH_CONTEXT = 'bash-default';
/** The most bash contexts whose working folders are remembered; past it the oldest are forgotten (they then list the home). */
const MAX_REMEMBERED = 10_000;

/** E2B's `Context` object. */
export interface ContextObject {
  id: string;
  language: string;
  cwd: string;
}

/** One bash run's outcome: its output and how the shell command ended. */
export interface BashRun {
  stdout: Buffer;
  stderr: Buffer;
  result: Result<'shell.run'>;
}

/** Whether a context id names a bash context. */
export function isBashContext(id: string): boolean {
  return id.startsWith(BASH_CONTEXT_PREFIX);
}

/**
 * A bash cell with per-run variables: `NAME='value' eval '<code>'` runs the code in the session's
 * own shell (so `cd`, variables and functions it defines stay), while bash keeps assignments
 * before a builtin for that command alone, exported to what it starts. Names must be shell
 * identifiers; values are single-quoted.
 *
 * @example
 * bashCell('echo "$A"', { A: "it's" }); // `A='it'\''s' eval 'echo "$A"'`
 */
export function bashCell(code: string, env: Record<string, string> | undefined): string {
  const names = Object.keys(env ?? {});
  if (names.length === 0) return code;
  const bad = names.find((name) => !/^[A-Za-z_][A-Za-z0-9_]*$/.test(name));
  if (bad !== undefined)
    throw new E2bHttpError(400, `'${bad}' is not a shell variable name: a bash run's envs need letters, digits and _, not starting with a digit.`);
  const quote = (text: string) => `'${text.replaceAll("'", "'\\''")}'`;
  return `${names.map((name) => `${name}=${quote(env?.[name] ?? '')}`).join(' ')} eval ${quote(code)}`;
}

/**
 * `@e2b/code-interpreter`'s bash contexts on Warren's shell sessions (`shell.*`): one bash per
 * context that keeps its state between runs, as E2B's bash kernel does. The daemon keeps the
 * sessions; this remembers each context's working folder for listings, which `shell.list` does
 * not report.
 */
export class BashContexts {
  private readonly cwds = new Map<string, string>();

  /** Opens a new bash context in `cwd`. */
  async create(session: DaemonSession, sandboxId: string, cwd: string): Promise<ContextObject> {
    const id = `${BASH_CONTEXT_PREFIX}${crypto.randomUUID().replaceAll('-', '')}`;
    await session.call('shell.open', { session: sessionName(id), cwd });
    this.remember(sandboxId, id, cwd);
    return { id, language: 'bash', cwd };
  }

  /** The sandbox's bash contexts (the default one once used). */
  async list(session: DaemonSession, sandboxId: string, home: string): Promise<ContextObject[]> {
    const { sessions } = (await session.call('shell.list', {})).result;
    return sessions
      .filter((s) => s.session.startsWith(`e2b-${BASH_CONTEXT_PREFIX}`))
      .map((s) => {
        const id = s.session.slice('e2b-'.length);
        return { id, language: 'bash', cwd: this.cwds.get(`${sandboxId}/${id}`) ?? home };
      });
  }

  async exists(session: DaemonSession, id: string): Promise<boolean> {
    const { sessions } = (await session.call('shell.list', {})).result;
    return sessions.some((s) => s.session === sessionName(id));
  }

  /** A fresh shell in the context's folder; its variables and functions are gone. */
  async restart(session: DaemonSession, sandboxId: string, id: string, home: string): Promise<void> {
    if (!(await this.exists(session, id))) throw new E2bHttpError(404, `Context ${id} not found.`);
    await session.call('shell.close', { session: sessionName(id) });
    await session.call('shell.open', { session: sessionName(id), cwd: this.cwds.get(`${sandboxId}/${id}`) ?? home });
  }

  async remove(session: DaemonSession, sandboxId: string, id: string): Promise<boolean> {
    this.cwds.delete(`${sandboxId}/${id}`);
    return (await session.call('shell.close', { session: sessionName(id) })).result.closed;
  }

  /** Runs a cell in a context (the default one, opened in `home` on first use, when `id` is undefined). */
  async run(
    session: DaemonSession,
    id: string | undefined,
    home: string,
    code: string,
    env: Record<string, string> | undefined,
    signal: AbortSignal,
  ): Promise<BashRun> {
    const name = sessionName(id ?? DEFAULT_BASH_CONTEXT);
    const cmd = bashCell(code, env);
    if (id === undefined) await session.call('shell.open', { session: name, cwd: home });
    if (cmd.trim() === '') return { stdout: Buffer.alloc(0), stderr: Buffer.alloc(0), result: emptyRun() };
    const { result, payload } = await session.call('shell.run', { session: name, cmd }, { signal });
    const layout = result.outputPayload;
    if (layout === undefined || payload === undefined) return { stdout: Buffer.from(result.stdout), stderr: Buffer.from(result.stderr), result };
    return { stdout: payload.subarray(0, layout.stdout), stderr: payload.subarray(layout.stdout, layout.stdout + layout.stderr), result };
  }

  private remember(sandboxId: string, id: string, cwd: string): void {
    if (this.cwds.size >= MAX_REMEMBERED) this.cwds.delete(this.cwds.keys().next().value as string);
    this.cwds.set(`${sandboxId}/${id}`, cwd);
  }
}

function sessionName(id: string): string {
  return `e2b-${id}`;
}

function emptyRun(): Result<'shell.run'> {
  return {
    exitCode: 0,
    signal: null,
    stdout: '',
    stderr: '',
    durationMs: 0,
    timedOut: false,
    truncated: false,
    stdoutBytes: 0,
    stderrBytes: 0,
    sessionRestarted: false,
  };
}
