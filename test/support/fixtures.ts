import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { startAgentServer, type FilePolicy } from '@warren/agent';
import { Credentials, startController, type Controller, silentLogger } from '@warren/controller';
import { Commands, Connection, Files, Sandbox } from '@warren/sdk';
import { removeStateDir } from './state-dir.js';

/** A controller on a free loopback port with a throw-away state folder and API key. */
export interface TestController extends AsyncDisposable {
  url: string;
  apiKey: string;
  controller: Controller;
}

/**
 * Starts a real controller against the real Docker engine (end-to-end tier). Sandboxes it made
 * and did not kill are removed on dispose, so a failing test leaks no container.
 *
 * @example
 * await using warren = await startTestController();
 * await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
 */
export async function startTestController(config: Parameters<typeof startController>[0] = {}): Promise<TestController> {
  const stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-e2e-'));
  const apiKey = `wk_test_${randomBytes(16).toString('hex')}`;
  const controller = await startController({
    credentials: Credentials.inMemory(apiKey),
    logger: silentLogger(),
    ...config,
    config: { port: 0, stateDir, reapIntervalMs: 1000, ...config.config },
  });
  const dispose = async () => {
    for (const record of controller.sandboxes.list()) await controller.sandboxes.kill(record.id).catch(() => undefined);
    await controller.close();
    await removeStateDir(stateDir);
  };
  return { url: controller.url, apiKey, controller, [Symbol.asyncDispose]: dispose };
}

/**
 * A test controller with one default sandbox, for a test file's `beforeAll`. Disposing the
 * controller kills the sandbox too.
 *
 * @example
 * beforeAll(async () => ({ warren, sandbox } = await startTestSandbox()), 60_000);
 * afterAll(async () => warren?.[Symbol.asyncDispose]());
 */
export async function startTestSandbox(): Promise<{ warren: TestController; sandbox: Sandbox }> {
  const warren = await startTestController();
  return { warren, sandbox: await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey }) };
}

/** An agent running in this process on a temporary unix socket, with an SDK connection to it. */
export interface TestAgent extends AsyncDisposable {
  /** The policy root: a fresh temporary folder. */
  root: string;
  connection: Connection;
  files: Files;
  commands: Commands;
  /** Opens another connection to the same agent, with extra upgrade headers (a grant, as the controller sends). */
  connect(headers?: Record<string, string>): Promise<Connection>;
}

/**
 * Starts the agent in-process over a real unix-socket WebSocket, rooted in a temporary folder
 * (integration tier: no Docker, real sockets, real files, real processes).
 *
 * @example
 * await using agent = await startTestAgent();
 * await agent.files.write('a.txt', 'hi');
 */
export async function startTestAgent(policy: Partial<FilePolicy> = {}, options: { owner?: { uid: number; gid: number } } = {}): Promise<TestAgent> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'warren-agent-'));
  const root = path.join(dir, 'workspace');
  await import('node:fs/promises').then((fs) => fs.mkdir(root));
  const socketPath = path.join(dir, 'agent.sock');
  const secret = randomBytes(32).toString('hex');
  const server = await startAgentServer({ socketPath, secret, policy: { root, readOnly: false, ...policy }, home: root, owner: options.owner });
  const connect = (headers: Record<string, string> = {}) => Connection.open(`ws+unix://${socketPath}:/`, secret, 10_000, headers);
  const connection = await connect();
  return {
    root,
    connection,
    files: new Files(() => connection),
    commands: new Commands(() => connection),
    connect,
    [Symbol.asyncDispose]: async () => {
      connection.close();
      await server.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Credentials with an admin key of the tenant `default` and, for each of `others`, an admin key of
 * a tenant of its own (`other-1`, `other-2`, ...): keys that reach every sandbox, as operators do,
 * but own no snapshot, volume or console session of each other's.
 *
 * @example
 * const credentials = await tenantCredentials(apiKey, [otherKey]);
 */
export async function tenantCredentials(apiKey: string, others: string[], masterKey: Buffer = randomBytes(32)): Promise<Credentials> {
  const credentials = Credentials.inMemory(apiKey, masterKey);
  for (const [i, key] of others.entries()) await credentials.keys.add(key, { tenant: `other-${i + 1}`, role: 'admin' });
  return credentials;
}
