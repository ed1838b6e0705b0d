import type { Command } from 'commander';
import { EgressPolicy, EgressRule, type EgressLogEntry } from '@warren/protocol';
import { wantsJson } from './args.js';
import { UsageError, printJson, shortTime, table } from './output.js';
import { restClient } from './sandbox-commands.js';

/** Options of `warren network update`. */
export interface NetworkUpdateOptions {
  allow?: string[];
  none?: boolean;
  open?: boolean;
  policy?: string;
}

/**
 * One `--allow` value as a rule: `host`, `host:port` or `host:port,port` (`*.` wildcards allowed).
 *
 * @example
 * parseAllow('registry.npmjs.org'); // { host: 'registry.npmjs.org' }
 * parseAllow('deb.debian.org:80,443'); // { host: 'deb.debian.org', ports: [80, 443] }
 */
export function parseAllow(text: string): EgressRule {
  const match = /^([^:\s]+)(?::(\d{1,5}(?:,\d{1,5})*))?$/.exec(text.trim());
  if (!match)
    throw new UsageError(`--allow '${text}' is not host, host:port or host:port,port.`, 'Example: --allow registry.npmjs.org --allow deb.debian.org:80');
  const rule: Record<string, unknown> = { host: match[1] };
  if (match[2] !== undefined) rule.ports = match[2].split(',').map(Number);
  const parsed = EgressRule.safeParse(rule);
  if (!parsed.success) throw new UsageError(`--allow '${text}': ${parsed.error.issues.map((i) => i.message).join('; ')}.`);
  return parsed.data;
}

/** The policy `warren network update` asks for, from exactly one of --allow, --none, --open, --policy. */
export function policyFromOptions(options: NetworkUpdateOptions): EgressPolicy {
  const given = [options.allow?.length ? 'allow' : undefined, options.none ? 'none' : undefined, options.open ? 'open' : undefined, options.policy].filter(
    (v) => v !== undefined,
  );
  if (given.length !== 1) throw new UsageError('Give exactly one of --allow HOST (repeatable), --none, --open or --policy JSON.');
  if (options.none) return { mode: 'none' };
  if (options.open) return { mode: 'open' };
  if (options.policy !== undefined) {
    let json: unknown;
    try {
      json = JSON.parse(options.policy);
    } catch {
      throw new UsageError('--policy is not JSON.', 'Example: --policy \'{"mode":"allow","rules":[{"host":"pypi.org"}]}\'');
    }
    const parsed = EgressPolicy.safeParse(json);
    if (!parsed.success) throw new UsageError(`--policy: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}.`);
    return parsed.data;
  }
  return { mode: 'allow', rules: (options.allow ?? []).map(parseAllow) };
}

/** `warren network update ID`: replaces a sandbox's egress policy live. */
export async function networkUpdateCommand(id: string, options: NetworkUpdateOptions, command: Command): Promise<void> {
  const updated = await restClient(command).updateNetwork(id, policyFromOptions(options));
  if (wantsJson(command)) return printJson(updated);
  process.stdout.write(`${describePolicy(updated.egress)} (version ${updated.version})\n`);
}

/** `warren network show ID`: the policy the gateway enforces now. */
export async function networkShowCommand(id: string, _options: unknown, command: Command): Promise<void> {
  const current = await restClient(command).network(id);
  if (wantsJson(command)) return printJson(current);
  process.stdout.write(`${describePolicy(current.egress)} (version ${current.version})\n`);
}

function describePolicy(policy: EgressPolicy): string {
  if (policy.mode !== 'allow') return `egress ${policy.mode}`;
  return `egress allow: ${policy.rules.map((r) => `${r.host}${r.ports ? `:${r.ports.join(',')}` : ''}${r.methods ? ` ${r.methods.join('|')}` : ''}${r.pathPrefix ?? ''}`).join(', ')}`;
}

/**
 * `warren logs --egress ID`: the sandbox's gateway events; with `--follow`, new ones as they come
 * (polled every second) until interrupted.
 */
export async function egressLogsCommand(id: string, options: { since?: number; limit?: number; follow?: boolean }, command: Command): Promise<void> {
  const rest = restClient(command);
  let since = options.since ?? -1;
  let header = true;
  for (;;) {
    const page = await rest.egressLog(id, { ...(since >= 0 ? { since } : {}), ...(options.limit === undefined ? {} : { limit: options.limit }) });
    if (wantsJson(command)) for (const entry of page.entries) process.stdout.write(`${JSON.stringify(entry)}\n`);
    else if (page.entries.length > 0 || header) process.stdout.write(egressTable(page.entries, header));
    header = false;
    since = page.entries.at(-1)?.seq ?? since;
    if (!options.follow) return;
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

function egressTable(entries: EgressLogEntry[], withHeader: boolean): string {
  const rows = entries.map((e) => [
    String(e.seq),
    shortTime(e.time),
    e.kind,
    `${e.host}:${e.port}`,
    [e.method, e.path].filter(Boolean).join(' '),
    e.decision,
    e.rule,
    `${e.bytesOut}/${e.bytesIn}`,
  ]);
  const text = table(['SEQ', 'TIME', 'KIND', 'TARGET', 'REQUEST', 'DECISION', 'RULE', 'BYTES OUT/IN'], rows);
  return withHeader ? text : text.split('\n').slice(1).join('\n');
}
