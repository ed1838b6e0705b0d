import type { Command } from 'commander';
import type { KeyInfo } from '@warren/protocol';
import { wantsJson } from './args.js';
import { printJson, shortTime, table } from './output.js';
import { restClient } from './sandbox-commands.js';

/** `warren keys create --tenant T`: makes a key (admin keys only) and prints its secret once. */
export async function keyCreateCommand(
  options: { tenant: string; role?: 'admin' | 'member'; name?: string; scope?: string[]; expiresIn?: number },
  command: Command,
): Promise<void> {
  const made = await restClient(command).createKey({
    tenant: options.tenant,
    ...(options.role === undefined ? {} : { role: options.role }),
    ...(options.name === undefined ? {} : { name: options.name }),
    ...(options.scope === undefined ? {} : { scopes: options.scope }),
    ...(options.expiresIn === undefined ? {} : { expiresInSeconds: options.expiresIn }),
  });
  if (wantsJson(command)) return printJson(made);
  process.stdout.write(`${made.key}\n`);
  process.stderr.write(`Key ${made.id} (${made.role} of tenant ${made.tenant}): the secret above is shown this once; keep it.\n`);
}

/** `warren keys ls [--tenant T]`: every key, never a secret. */
export async function keyListCommand(options: { tenant?: string }, command: Command): Promise<void> {
  const keys = await restClient(command).listKeys(options.tenant);
  if (wantsJson(command)) return printJson(keys);
  process.stdout.write(table(['ID', 'TENANT', 'ROLE', 'NAME', 'CREATED', 'EXPIRES', 'STATE'], keys.map(keyRow)));
}

/** `warren keys rotate ID`: a new secret for a key, printed once. */
export async function keyRotateCommand(id: string, _options: unknown, command: Command): Promise<void> {
  const rotated = await restClient(command).rotateKey(id);
  if (wantsJson(command)) return printJson(rotated);
  process.stdout.write(`${rotated.key}\n`);
}

/** `warren keys revoke ID...`: ends keys, and what they opened. */
export async function keyRevokeCommand(ids: string[], _options: unknown, command: Command): Promise<void> {
  const rest = restClient(command);
  for (const id of ids) await rest.revokeKey(id);
}

/** `warren tenant`: the caller's tenant's usage against its limits. */
export async function tenantCommand(_options: unknown, command: Command): Promise<void> {
  const report = await restClient(command).tenant();
  if (wantsJson(command)) return printJson(report);
  const rows = Object.entries(report.usage).map(([name, used]) => [name, String(used), limitOf(report.limits, name)]);
  process.stdout.write(`tenant ${report.tenant}\n${table(['WHAT', 'USED', 'LIMIT'], rows)}`);
  process.stdout.write(`root sandboxes: ${report.limits.allowRoot === true ? 'allowed' : 'not allowed'}\n`);
}

function keyRow(key: KeyInfo): string[] {
  const state = key.revokedAt ? 'revoked' : key.expiresAt && Date.parse(key.expiresAt) <= Date.now() ? 'expired' : key.configured ? 'configured' : 'active';
  return [key.id, key.tenant, key.role, key.name ?? '', key.configured ? '' : shortTime(key.createdAt), key.expiresAt ? shortTime(key.expiresAt) : '', state];
}

/** The limit beside a usage line: `sandboxes` against `maxSandboxes`, and so on. */
function limitOf(limits: Record<string, number | boolean>, usage: string): string {
  const name = {
    sandboxes: 'maxSandboxes',
    cpus: 'maxCpus',
    memoryMb: 'maxMemoryMb',
    diskMb: 'maxDiskMb',
    snapshots: 'maxSnapshots',
    snapshotMb: 'maxSnapshotMb',
    volumes: 'maxVolumes',
    createsLastMinute: 'createsPerMinute',
  }[usage];
  const value = name === undefined ? undefined : limits[name];
  return value === undefined ? '-' : String(value);
}
