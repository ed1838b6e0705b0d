import { chown, mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { customAlphabet } from 'nanoid';
import { CodedError, CreateSandboxRequest, type CreateSandboxResponse, type SandboxInfo, type SandboxState } from '@warren/protocol';
import { probeAgent } from './agent-link.js';
import type { ControllerConfig } from './config.js';
import type { Credentials } from './credentials.js';
import { LABELS, SANDBOX_USER, type DockerProvider } from './docker.js';

// 24 characters of a 62-letter alphabet: 142 bits of randomness, safe in URLs and container names.
const newId = customAlphabet('0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ', 24);

/** What the controller knows of one sandbox; all of it is also in the container's labels. */
export interface SandboxRecord {
  id: string;
  containerId: string;
  image: string;
  createdAt: Date;
  expiresAt: Date;
  labels: Record<string, string>;
}

/**
 * The sandbox table: creates, finds, kills and reaps sandboxes. It holds nothing Docker does not
 * also hold, so {@link SandboxService.recover} rebuilds it after a restart.
 */
export class SandboxService {
  private readonly records = new Map<string, SandboxRecord>();

  constructor(
    private readonly docker: DockerProvider,
    private readonly credentials: Credentials,
    private readonly config: ControllerConfig,
    private readonly runtimeVolume: string,
  ) {}

  /** The host path of a sandbox's daemon socket. */
  socketPath(id: string): string {
    return path.join(this.socketDir(id), 'agent.sock');
  }

  private socketDir(id: string): string {
    return path.join(this.config.stateDir, 'sandboxes', id);
  }

  /** Rebuilds the table from the labels of Warren's containers. */
  async recover(): Promise<number> {
    for (const container of await this.docker.listSandboxes()) {
      const id = container.labels[LABELS.sandbox];
      if (!id) continue;
      this.records.set(id, recordFromLabels(id, container.containerId, container.labels));
    }
    return this.records.size;
  }

  /** Creates a sandbox and answers once its daemon has answered a real call. */
  async create(body: unknown): Promise<CreateSandboxResponse> {
    const started = performance.now();
    const parsed = CreateSandboxRequest.safeParse(body ?? {});
    if (!parsed.success) {
      throw new CodedError('INVALID_PARAMS', `Invalid sandbox request: ${parsed.error.issues.map((i) => `${i.path.join('.') || 'body'}: ${i.message}`).join('; ')}`);
    }
    const request = parsed.data;
    const id = newId();
    const createdAt = new Date();
    const expiresAt = new Date(createdAt.getTime() + (request.ttlSeconds ?? this.config.limits.ttlSeconds) * 1000);
    const image = request.image ?? this.config.defaultImage;
    const socketDir = this.socketDir(id);
    await this.prepareSocketDir(id, socketDir);

    let containerId: string | undefined;
    try {
      containerId = await this.docker.startSandbox({
        id,
        image,
        env: request.env ?? {},
        labels: request.labels ?? {},
        createdAt,
        expiresAt,
        socketDirOnHost: socketDir,
        runtimeVolume: this.runtimeVolume,
        limits: this.config.limits,
      });
      await this.waitUntilReady(id, containerId);
    } catch (err) {
      if (containerId) await this.docker.removeSandbox(containerId).catch(() => undefined);
      await rm(socketDir, { recursive: true, force: true });
      throw err;
    }
    const record: SandboxRecord = { id, containerId, image, createdAt, expiresAt, labels: request.labels ?? {} };
    this.records.set(id, record);
    return { ...describe(record, 'running'), token: this.credentials.sandboxToken(id), readyMs: Math.round(performance.now() - started) };
  }

  /** The folder the daemon listens in: owned by the sandbox user, holding the one-time secret file. */
  private async prepareSocketDir(id: string, dir: string): Promise<void> {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const secretFile = path.join(dir, 'secret');
    await writeFile(secretFile, this.credentials.agentSecret(id), { mode: 0o600 });
    if (process.getuid?.() === 0) {
      await chown(dir, SANDBOX_USER.uid, SANDBOX_USER.gid);
      await chown(secretFile, SANDBOX_USER.uid, SANDBOX_USER.gid);
    }
  }

  private async waitUntilReady(id: string, containerId: string): Promise<void> {
    const deadline = Date.now() + this.config.readyTimeoutMs;
    let lastError: unknown;
    for (let attempt = 0; Date.now() < deadline; attempt++) {
      try {
        await probeAgent(this.socketPath(id), this.credentials.agentSecret(id), Math.max(100, deadline - Date.now()));
        return;
      } catch (err) {
        lastError = err;
      }
      if (attempt % 20 === 19 && (await this.docker.containerState(containerId)) !== 'running') break;
      await new Promise((r) => setTimeout(r, Math.min(5 + attempt * 2, 50)));
    }
    const logs = await this.docker.logsTail(containerId);
    throw new CodedError('SANDBOX_NOT_READY', `The sandbox daemon did not answer within ${this.config.readyTimeoutMs} ms (${String((lastError as Error)?.message ?? lastError)}).${logs ? ` Container output: ${logs}` : ''}`, {
      sandboxId: id,
    });
  }

  /** A sandbox's description with its current state, from Docker. */
  async get(id: string): Promise<SandboxInfo> {
    const record = this.require(id);
    const state = await this.docker.containerState(record.containerId);
    return describe(record, toState(state));
  }

  /** Every sandbox this controller knows. */
  list(): SandboxRecord[] {
    return [...this.records.values()];
  }

  has(id: string): boolean {
    return this.records.has(id);
  }

  /** Kills a sandbox: its container and its socket folder are gone afterwards. */
  async kill(id: string): Promise<void> {
    const record = this.require(id);
    await this.docker.removeSandbox(record.containerId);
    await rm(this.socketDir(id), { recursive: true, force: true });
    this.records.delete(id);
  }

  /** Kills every sandbox whose time is up; returns their ids. */
  async reapExpired(now = new Date()): Promise<string[]> {
    const expired = this.list().filter((r) => r.expiresAt <= now);
    for (const record of expired) await this.kill(record.id).catch(() => undefined);
    return expired.map((r) => r.id);
  }

  private require(id: string): SandboxRecord {
    const record = this.records.get(id);
    if (!record) throw new CodedError('SANDBOX_NOT_FOUND', `No sandbox '${id}': it never existed, was killed, or expired.`, { sandboxId: id });
    return record;
  }
}

function recordFromLabels(id: string, containerId: string, labels: Record<string, string>): SandboxRecord {
  const user: Record<string, string> = {};
  for (const [key, value] of Object.entries(labels)) if (key.startsWith(LABELS.userPrefix)) user[key.slice(LABELS.userPrefix.length)] = value;
  return {
    id,
    containerId,
    image: labels[LABELS.image] ?? '',
    createdAt: new Date(labels[LABELS.createdAt] ?? 0),
    expiresAt: new Date(labels[LABELS.expiresAt] ?? 0),
    labels: user,
  };
}

function describe(record: SandboxRecord, state: SandboxState): SandboxInfo {
  return {
    id: record.id,
    state,
    image: record.image,
    createdAt: record.createdAt.toISOString(),
    expiresAt: record.expiresAt.toISOString(),
    labels: record.labels,
  };
}

function toState(dockerState: string | undefined): SandboxState {
  if (dockerState === 'running' || dockerState === 'paused') return dockerState;
  return dockerState === undefined ? 'gone' : 'exited';
}
