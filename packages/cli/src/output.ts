import yoctoSpinner from 'yocto-spinner';

/** A plain failure of the command line itself (bad argument, missing file), with what to do instead. */
export class CliError extends Error {
  override readonly name = 'CliError';
  constructor(
    message: string,
    readonly suggestion?: string,
    /** The process exit code; 1 unless told. */
    readonly exitCode = 1,
  ) {
    super(message);
  }
}

/**
 * The one line (and its suggestion) the CLI prints for a failure: SDK errors carry a `code` and a
 * `suggestion`, everything else is its message.
 *
 * @example
 * formatError(new CliError('No such file', 'Check the path.')); // 'warren: No such file (Check the path.)'
 */
export function formatError(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  const suggestion = (err as { suggestion?: unknown } | null)?.suggestion;
  const code = (err as { code?: unknown } | null)?.code;
  const prefix = typeof code === 'string' && err instanceof Error && err.name !== 'CliError' && !code.startsWith('commander.') ? `${code}: ` : '';
  const oneLine = `${prefix}${message}`.replace(/\s*\n\s*/g, ' ').trim();
  return typeof suggestion === 'string' && suggestion ? `warren: ${oneLine} (${suggestion})` : `warren: ${oneLine}`;
}

/**
 * Renders rows as an aligned text table: a header line, then one line per row, columns padded to
 * the widest cell and separated by two spaces. Nothing but the header when there are no rows.
 *
 * @example
 * table(['ID', 'STATE'], [['abc', 'running']]); // 'ID   STATE\nabc  running\n'
 */
export function table(headers: string[], rows: string[][]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(headers), ...rows.map(line)].join('\n') + '\n';
}

/** Key/value lines, keys padded to the widest: the human form of one record. */
export function keyValues(pairs: [string, string][]): string {
  const width = Math.max(...pairs.map(([k]) => k.length));
  return pairs.map(([k, v]) => `${`${k}:`.padEnd(width + 2)}${v}`).join('\n') + '\n';
}

/** Writes a value as indented JSON with a final newline. */
export function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value, null, 2) + '\n');
}

/**
 * Runs `work` with a spinner on stderr when both stdout and stderr are terminals and the work
 * takes longer than a quarter second; silent otherwise (pipes, files, CI, quick calls), so
 * scripted output never carries control characters.
 *
 * @example
 * const sandbox = await withSpinner('Creating a sandbox', () => Sandbox.create(options), 'Created a sandbox');
 */
export async function withSpinner<T>(text: string, work: (update: (text: string) => void) => Promise<T>, doneText = text): Promise<T> {
  if (!process.stdout.isTTY || !process.stderr.isTTY) return work(() => undefined);
  let current = text;
  let spinner: ReturnType<typeof yoctoSpinner> | undefined;
  const started = performance.now();
  const timer = setTimeout(() => (spinner = yoctoSpinner({ text: current, stream: process.stderr }).start()), 250);
  try {
    const result = await work((next) => {
      current = next;
      if (spinner) spinner.text = next;
    });
    spinner?.success(`${doneText} (${((performance.now() - started) / 1000).toFixed(1)} s)`);
    return result;
  } catch (err) {
    spinner?.stop();
    spinner?.clear();
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

/** `2026-11-21T23:14:39.000Z` as `2026-11-21 23:14:39`: short enough for a table. */
export function shortTime(iso: string): string {
  return iso.replace('T', ' ').replace(/\.\d+Z$|Z$/, '');
}

/** Seconds until an ISO time as `5m12s` / `2h03m` (or `expired`). */
export function timeLeft(iso: string, now = Date.now()): string {
  const seconds = Math.round((Date.parse(iso) - now) / 1000);
  if (!Number.isFinite(seconds)) return '-';
  if (seconds <= 0) return 'expired';
  if (seconds < 60) return `${seconds}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m${String(seconds % 60).padStart(2, '0')}s`;
  if (seconds < 86_400) return `${Math.floor(seconds / 3600)}h${String(Math.floor((seconds % 3600) / 60)).padStart(2, '0')}m`;
  return `${Math.floor(seconds / 86_400)}d${String(Math.floor((seconds % 86_400) / 3600)).padStart(2, '0')}h`;
}
