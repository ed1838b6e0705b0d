import { pino, type DestinationStream, type Logger } from 'pino';

export type { Logger };

/** The levels `LOG_LEVEL` (or `logLevel` in the configuration file) may name, most severe first; `silent` logs nothing. */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** What every log line shows in place of a secret. */
export const REDACTED = '[redacted]';

/**
 * Field names that hold credentials, redacted wherever they appear at the top of a line or one
 * level down (`{ headers: { authorization } }`, `{ sandbox: { token } }`). The controller never
 * passes a credential to the logger on purpose; this is the net below that rule.
 */
const SECRET_KEYS = ['token', 'apiKey', 'apiKeyHashes', 'secret', 'agentSecret', 'password', 'authorization', 'cookie'];
const REDACT_PATHS = [
  ...SECRET_KEYS.flatMap((key) => [key, `*.${key}`]),
  ...['set-cookie', 'x-api-key', 'proxy-authorization'].map((header) => `headers["${header}"]`),
];

export interface LoggerOptions {
  /** The least severe level written; `info` by default. */
  level?: LogLevel | undefined;
  /** Where the JSON lines go: standard error by default. Tests pass an object whose `write` collects them. */
  destination?: DestinationStream | undefined;
}

/**
 * The controller's logger: one JSON object per line on standard error, with `time` (ISO 8601),
 * `level` (its name), `msg` (what happened, e.g. `sandbox.created`: pino's own message key, so
 * pino-pretty and other tools for pino read the lines) and that event's fields.
 * Credentials are redacted by field name (see {@link REDACTED}).
 *
 * @example
 * const logger = createLogger({ level: 'debug' });
 * logger.info({ sandboxId }, 'sandbox.created');
 * // {"level":"info","time":"2026-01-01T00:00:00.000Z","pid":42,"sandboxId":"...","msg":"sandbox.created"}
 */
export function createLogger(options: LoggerOptions = {}): Logger {
  return pino(
    {
      level: options.level ?? 'info',
      base: { pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: { paths: REDACT_PATHS, censor: REDACTED },
    },
    options.destination ?? pino.destination({ fd: 2, sync: true }),
  );
}

/** A logger that writes nothing, for tests and embedders that log elsewhere. */
export function silentLogger(): Logger {
  return createLogger({ level: 'silent' });
}
