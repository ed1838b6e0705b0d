import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';

/**
 * The controller's secrets. The API key opens the REST API. The master key never leaves the
 * controller: each sandbox's token and daemon secret are derived from it and the sandbox id, so a
 * restarted controller can recompute them from the id in the container's labels, and no secret
 * is stored in Docker.
 */
export class Credentials {
  private readonly apiKeyDigest: Buffer;

  private constructor(
    apiKey: string,
    private readonly masterKey: Buffer,
  ) {
    this.apiKeyDigest = digest(apiKey);
  }

  /**
   * Loads the keys from the state folder, making them on first start (files mode 0600).
   * `generatedApiKey` is set only when a key was just made, so the caller prints it once.
   */
  static async load(stateDir: string, apiKeyFromEnv: string | undefined): Promise<{ credentials: Credentials; generatedApiKey?: string }> {
    await mkdir(stateDir, { recursive: true, mode: 0o700 });
    const masterKey = Buffer.from(await readOrCreate(path.join(stateDir, 'master.key'), () => randomBytes(32).toString('hex')), 'hex');
    if (apiKeyFromEnv) return { credentials: new Credentials(apiKeyFromEnv, masterKey) };
    let generated: string | undefined;
    const apiKey = await readOrCreate(path.join(stateDir, 'api-key'), () => (generated = `wk_${randomBytes(24).toString('base64url')}`));
    return generated ? { credentials: new Credentials(apiKey, masterKey), generatedApiKey: generated } : { credentials: new Credentials(apiKey, masterKey) };
  }

  /** For tests and embedding: credentials held in memory only. */
  static inMemory(apiKey: string, masterKey: Buffer = randomBytes(32)): Credentials {
    return new Credentials(apiKey, masterKey);
  }

  /** Constant-time check of a presented API key. */
  isApiKey(presented: string): boolean {
    return timingSafeEqual(digest(presented), this.apiKeyDigest);
  }

  /** The token that reaches one sandbox and nothing else. */
  sandboxToken(sandboxId: string): string {
    return `wst_${this.derive('token', sandboxId)}`;
  }

  isSandboxToken(sandboxId: string, presented: string): boolean {
    return timingSafeEqual(digest(presented), digest(this.sandboxToken(sandboxId)));
  }

  /** The secret the controller presents to a sandbox's daemon. */
  agentSecret(sandboxId: string): string {
    return this.derive('agent', sandboxId);
  }

  private derive(purpose: string, sandboxId: string): string {
    return createHmac('sha256', this.masterKey).update(`${purpose}:${sandboxId}`).digest('base64url');
  }
}

function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}

async function readOrCreate(file: string, make: () => string): Promise<string> {
  try {
    return (await readFile(file, 'utf8')).trim();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    const value = make();
    // 'wx' fails if another process made the file first; then its value wins.
    await writeFile(file, `${value}\n`, { mode: 0o600, flag: 'wx' }).catch(async (e: NodeJS.ErrnoException) => {
      if (e.code !== 'EEXIST') throw e;
    });
    return (await readFile(file, 'utf8')).trim();
  }
}
