import { createWriteStream } from 'node:fs';
import { once } from 'node:events';
import type { Writable } from 'node:stream';
import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';
import { restClient } from './sandbox-commands.js';

/** What `warren audit export` takes. */
export interface AuditExportOptions {
  sandbox?: string;
  tenant?: string;
  since?: string;
  until?: string;
  out?: string;
}

/** Reads an `--since`/`--until` value: an ISO 8601 time, passed on as the controller reads it. */
export function parseIsoTime(value: string): string {
  if (!Number.isFinite(Date.parse(value))) throw new InvalidArgumentError('an ISO 8601 time, e.g. 2026-12-01T00:00:00Z');
  return value;
}

/**
 * `warren audit export [--sandbox ID] [--tenant T] [--since ISO] [--until ISO] [--out FILE]`: the
 * controller's durable audit trail as JSON lines, one call per line with its sandbox id, to FILE
 * (created owner-only: it holds command lines) or standard output. Also the trails of sandboxes
 * that are gone, until their retention ends.
 */
export async function auditExportCommand(options: AuditExportOptions, command: Command): Promise<void> {
  const out: Writable = options.out === undefined ? process.stdout : createWriteStream(options.out, { mode: 0o600 });
  let count = 0;
  try {
    const filter = {
      ...(options.sandbox === undefined ? {} : { sandbox: options.sandbox }),
      ...(options.tenant === undefined ? {} : { tenant: options.tenant }),
      ...(options.since === undefined ? {} : { since: options.since }),
      ...(options.until === undefined ? {} : { until: options.until }),
    };
    for await (const line of restClient(command).exportAudit(filter)) {
      count++;
      if (!out.write(`${JSON.stringify(line)}\n`)) await once(out, 'drain');
    }
  } finally {
    if (options.out !== undefined) {
      out.end();
      await once(out, 'finish');
    }
  }
  if (options.out !== undefined) process.stderr.write(`Wrote ${count} audit entries to ${options.out}.\n`);
}
