import type { ServerResponse } from 'node:http';
import type { AuditEntry, ProcessInfo } from '@warren/protocol';
import { grantFor, refusalFor, type Caller } from '../../grants.js';
import type { HttpServerDeps } from '../../server-context.js';
import { DaemonSession } from '../../daemon-session.js';
import { E2bHttpError } from '../errors.js';
import { json } from '../http-util.js';

/** E2B's `SandboxLogEntry`: one structured line of a sandbox's log. */
export interface E2bLogEntry {
  timestamp: string;
  level: 'debug' | 'info' | 'warn' | 'error';
  message: string;
  fields: Record<string, string>;
}

/** The most entries one answer carries, and the default when `limit` is absent (E2B's own default is 1000). */
const MAX_LOG_ENTRIES = 1000;
/** Audit entries read from the trail for one answer (the newest of them are kept). */
const MAX_TRAIL_ENTRIES = 10_000;
/** Output replayed per stream of each process, from its end. */
const OUTPUT_TAIL_BYTES = 64 * 1024;
/** Processes whose output one answer includes. */
const MAX_PROCESSES = 64;
const LEVELS = ['debug', 'info', 'warn', 'error'] as const;

/**
 * `GET /v2/sandboxes/{id}/logs` and the older `GET /sandboxes/{id}/logs`: the sandbox's log in
 * E2B's shape, made of what Warren keeps. Each call on the sandbox from its durable audit trail
 * (method, command, outcome, who called), and, while it runs and the caller may run commands,
 * the output its daemon still holds of each process it started through `process.start` (the last
 * 64 KiB of stdout and stderr, one entry per line, stamped with the process's start). v2 takes
 * `cursor` (ms), `direction` (`forward`, the default, or `backward`), `level`, `limit` and
 * `search`; v1 takes `start` (ms) and `limit` and answers `logs` lines beside `logEntries`.
 */
export async function serveE2bLogs(deps: HttpServerDeps, res: ServerResponse, id: string, query: URLSearchParams, caller: Caller, v2: boolean): Promise<void> {
  const limit = intParam(query, 'limit') ?? MAX_LOG_ENTRIES;
  if (limit < 0) throw new E2bHttpError(400, 'limit must be 0 or more.');
  const since = intParam(query, v2 ? 'cursor' : 'start');
  const direction = v2 ? (query.get('direction') ?? 'forward') : 'forward';
  if (direction !== 'forward' && direction !== 'backward')
    throw new E2bHttpError(400, `direction must be forward or backward, not '${direction.slice(0, 32)}'.`);
  const level = query.get('level') ?? 'debug';
  const floor = LEVELS.indexOf(level as (typeof LEVELS)[number]);
  if (floor < 0) throw new E2bHttpError(400, `level must be one of ${LEVELS.join(', ')}, not '${level.slice(0, 32)}'.`);
  const search = v2 ? query.get('search') : null;

  const entries = [...(await trailEntries(deps, id)), ...(await outputEntries(deps, id, caller))].filter(
    (e) =>
      LEVELS.indexOf(e.level) >= floor &&
      (search === null || e.message.includes(search)) &&
      (since === undefined || (direction === 'forward' ? Date.parse(e.timestamp) >= since : Date.parse(e.timestamp) <= since)),
  );
  // A stable sort by time: the trail's order, then each process's lines in order.
  entries.sort((a, b) => Date.parse(a.timestamp) - Date.parse(b.timestamp));
  if (direction === 'backward') entries.reverse();
  const page = entries.slice(0, Math.min(limit, MAX_LOG_ENTRIES));
  if (v2) return json(res, 200, { logs: page });
  json(res, 200, { logs: page.map((e) => ({ timestamp: e.timestamp, line: e.message })), logEntries: page });
}

function intParam(query: URLSearchParams, name: string): number | undefined {
  const text = query.get(name);
  if (text === null || text === '') return undefined;
  if (!/^-?\d{1,16}$/.test(text)) throw new E2bHttpError(400, `${name} must be a whole number, not '${text.slice(0, 32)}'.`);
  return Number(text);
}

/** The newest audit entries of the sandbox as log entries, oldest first. */
async function trailEntries(deps: HttpServerDeps, id: string): Promise<E2bLogEntry[]> {
  const kept: AuditEntry[] = [];
  let since: number | undefined;
  for (;;) {
    const page = await deps.audit.list(id, { since, limit: 1000 });
    kept.push(...page.entries);
    if (kept.length > MAX_TRAIL_ENTRIES) kept.splice(0, kept.length - MAX_TRAIL_ENTRIES);
    if (page.nextCursor === undefined) break;
    since = page.nextCursor;
  }
  return kept.map((entry) => ({
    timestamp: entry.time,
    level: entry.outcome === 'ok' ? 'info' : 'error',
    message: `${entry.method}${entry.command === undefined ? '' : ` ${entry.command}`}: ${entry.outcome}`,
    fields: {
      source: 'audit',
      method: entry.method,
      outcome: entry.outcome,
      durationMs: String(entry.durationMs),
      ...(entry.paths.length > 0 && { paths: entry.paths.join(' ') }),
      ...(entry.callerKind !== undefined && { caller: entry.callerKind }),
      ...(entry.keyId !== undefined && { keyId: entry.keyId }),
    },
  }));
}

/**
 * The output the daemon still holds of the sandbox's processes, one entry per line: only while
 * it runs (a paused or hibernated sandbox is not woken to read a log) and for a caller the rule
 * table lets run commands, since output is what `process.attach` would show it.
 */
async function outputEntries(deps: HttpServerDeps, id: string, caller: Caller): Promise<E2bLogEntry[]> {
  const record = deps.sandboxes.record(id);
  if (record.state !== 'running') return [];
  const grant = () => grantFor(record, caller);
  if (refusalFor({ caller, grant }, 'exec', 'sandbox logs') !== undefined) return [];
  let session: DaemonSession | undefined;
  try {
    session = await DaemonSession.open(deps.sandboxes, id, caller, grant(), deps.metrics);
    const { result } = await session.call('process.list', {});
    const entries: E2bLogEntry[] = [];
    for (const proc of result.processes.slice(-MAX_PROCESSES)) entries.push(...(await processLines(session, proc)));
    return entries;
  } catch {
    // The trail alone still answers when the daemon cannot be reached.
    return [];
  } finally {
    session?.close();
  }
}

async function processLines(session: DaemonSession, proc: ProcessInfo): Promise<E2bLogEntry[]> {
  const text = { stdout: '', stderr: '' };
  const decoder = { stdout: new TextDecoder(), stderr: new TextDecoder() };
  await session.call(
    'process.attach',
    {
      handle: proc.handle,
      follow: false,
      stdoutOffset: Math.max(proc.stdout.start, proc.stdout.end - OUTPUT_TAIL_BYTES),
      stderrOffset: Math.max(proc.stderr.start, proc.stderr.end - OUTPUT_TAIL_BYTES),
    },
    {
      onEvent: (name, _data, payload) => {
        if ((name === 'stdout' || name === 'stderr') && payload) text[name] += decoder[name].decode(payload, { stream: true });
      },
    },
  );
  const lines: E2bLogEntry[] = [];
  for (const stream of ['stdout', 'stderr'] as const) {
    for (const line of text[stream].split('\n')) {
      if (line === '') continue;
      lines.push({
        timestamp: proc.startedAt,
        level: stream === 'stdout' ? 'info' : 'error',
        message: line,
        fields: { source: 'process', stream, pid: String(proc.pid), command: proc.cmd.slice(0, 200) },
      });
    }
  }
  return lines;
}
