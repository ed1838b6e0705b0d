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
 * The exit status of a command line that was used wrongly (an unknown command or option, a missing
 * or malformed argument), as POSIX utilities and Bash builtins use it; a command that ran and
 * failed exits 1, or with the status of what it ran.
 */
export const USAGE_EXIT_CODE = 2;

/**
 * A command line the CLI cannot act on (arguments that contradict each other, a value it does not
 * know), found after commander parsed it: exits {@link USAGE_EXIT_CODE} as commander's own usage
 * errors do.
 *
 * @example
 * throw new UsageError('Neither side names a sandbox.', 'Write one side as ID:/path.');
 */
export class UsageError extends CliError {
  constructor(message: string, suggestion?: string) {
    super(message, suggestion, USAGE_EXIT_CODE);
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
export function table(headers: string[], rowsIn: string[][]): string {
  const rows = rowsIn.map((row) => row.map(printable));
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
  return pairs.map(([k, v]) => `${`${k}:`.padEnd(width + 2)}${printable(v)}`).join('\n') + '\n';
}

/** Control characters, and the Unicode marks that reorder what a terminal shows (bidi overrides). */
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/gu;

/**
 * Text that sandbox code may have chosen (file names, labels, audit entries), made safe to print
 * on a terminal: every control character, escape sequences included, and every bidi override is
 * shown as a `\xNN` or `\uNNNN` escape instead of being acted on. `table` and `keyValues` apply it
 * to every cell.
 *
 * @example
 * printable('a\x1b[2Jb'); // 'a\\x1b[2Jb'
 */
export function printable(text: string): string {
  return text.replace(UNPRINTABLE, (c) => {
    const code = c.codePointAt(0)!;
    return code < 0x100 ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
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

/** A byte count as `512 B`, `3.4 KiB`, `98.1 MiB`, `1.20 GiB`. */
export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 ** 2) return `${(bytes / 1024).toFixed(1)} KiB`;
  if (bytes < 1024 ** 3) return `${(bytes / 1024 ** 2).toFixed(1)} MiB`;
  return `${(bytes / 1024 ** 3).toFixed(2)} GiB`;
}

/**
 * One line of a transfer's progress: a bar and a percentage when the total is known, the bytes
 * moved, and the rate so far.
 *
 * @example
 * progressLine('Uploading ./data', { bytes: 50 * 2 ** 20, totalBytes: 200 * 2 ** 20 }, 1000);
 * // 'Uploading ./data [█████░░░░░░░░░░░░░░░]  25% 50.0/200.0 MiB 52.4 MB/s'
 */
export function progressLine(label: string, progress: { bytes: number; totalBytes?: number | undefined }, elapsedMs: number, width = 20): string {
  const rate = elapsedMs > 0 ? `${(((progress.bytes / elapsedMs) * 1000) / 1e6).toFixed(1)} MB/s` : '';
  const total = progress.totalBytes;
  if (total === undefined || total <= 0) return `${label} ${formatBytes(progress.bytes)} ${rate}`.trimEnd();
  const fraction = Math.min(1, progress.bytes / total);
  const filled = Math.round(fraction * width);
  const bar = `[${'█'.repeat(filled)}${'░'.repeat(width - filled)}]`;
  const unit = total < 1024 ** 2 ? 'KiB' : total < 1024 ** 3 ? 'MiB' : 'GiB';
  const scale = unit === 'KiB' ? 1024 : unit === 'MiB' ? 1024 ** 2 : 1024 ** 3;
  const amounts = `${(progress.bytes / scale).toFixed(1)}/${(total / scale).toFixed(1)} ${unit}`;
  return `${label} ${bar} ${String(Math.floor(fraction * 100)).padStart(3)}% ${amounts} ${rate}`.trimEnd();
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
