import { once } from 'node:events';
import { loadConfig, type ControllerConfig } from './config.js';
import { Credentials } from './credentials.js';
import { DockerProvider } from './docker.js';
import { createHttpServer, serverUrl } from './http.js';
import { collectRuntime } from './runtime.js';
import { SandboxService } from './sandboxes.js';

export interface StartControllerOptions {
  config?: Partial<ControllerConfig>;
  docker?: DockerProvider;
  credentials?: Credentials;
  log?: (event: string, fields?: Record<string, unknown>) => void;
}

/** A running controller. Dispose it to stop serving; sandboxes keep running. */
export interface Controller extends AsyncDisposable {
  url: string;
  config: ControllerConfig;
  sandboxes: SandboxService;
  /** Set only on the start that generated the API key, so it is printed once. */
  generatedApiKey?: string | undefined;
  close(): Promise<void>;
}

/**
 * Starts the controller: checks Docker, fills the runtime volume, rebuilds the sandbox table from
 * container labels, serves the REST API and the WebSocket relay, and reaps expired sandboxes.
 *
 * @example
 * await using controller = await startController({ config: { port: 0 } });
 * console.log(controller.url);
 */
export async function startController(options: StartControllerOptions = {}): Promise<Controller> {
  const config = loadConfig(process.env, options.config);
  const log = options.log ?? jsonLog;
  let generatedApiKey: string | undefined;
  let credentials = options.credentials;
  if (!credentials) {
    const loaded = await Credentials.load(config.stateDir, config.apiKey);
    credentials = loaded.credentials;
    generatedApiKey = loaded.generatedApiKey;
  }
  const docker = options.docker ?? new DockerProvider();
  await docker.ping();
  const runtime = await collectRuntime(config.agentBundlePath);
  const runtimeVolume = await docker.ensureRuntimeVolume(runtime, config.defaultImage);
  const sandboxes = new SandboxService(docker, credentials, config, runtimeVolume);
  const recovered = await sandboxes.recover();

  const { server, wss } = createHttpServer({ sandboxes, credentials, log });
  server.listen(config.port, config.host);
  await once(server, 'listening');
  const url = serverUrl(server, config.host);
  log('controller.started', { url, recovered, runtimeVolume });

  const reaper = setInterval(() => {
    sandboxes
      .reapExpired()
      .then((ids) => ids.length > 0 && log('sandboxes.reaped', { ids }))
      .catch((err: unknown) => log('reaper.failed', { error: String(err) }));
  }, config.reapIntervalMs);
  reaper.unref();

  const close = async () => {
    clearInterval(reaper);
    for (const ws of wss.clients) ws.terminate();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return { url, config, sandboxes, generatedApiKey, close, [Symbol.asyncDispose]: close };
}

function jsonLog(event: string, fields: Record<string, unknown> = {}): void {
  process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), event, ...fields })}\n`);
}

