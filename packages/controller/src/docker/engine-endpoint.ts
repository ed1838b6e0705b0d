import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { DockerOptions } from 'dockerode';

/** The engine the controller talks to, and how it found it (printed at start). */
export interface EngineEndpoint {
  /** dockerode's connection options. */
  options: DockerOptions;
  /** Where it points, without secrets: `unix:///var/run/docker.sock`, `tcp://host:2376 (TLS)`. */
  address: string;
  /** What chose it: `DOCKER_HOST`, `context rootless`, or the default socket. */
  source: string;
}

/**
 * Finds the Docker engine the way the `docker` command does: `DOCKER_HOST` first; then the
 * context named by `DOCKER_CONTEXT` or by `currentContext` in `$DOCKER_CONFIG/config.json`
 * (`~/.docker` by default), whose endpoint and TLS files live under `contexts/`; then the
 * default socket. Rootless Docker and Docker Desktop set a context, so they are followed too.
 * A context that is named but cannot be read is an error that names it, never a silent fallback.
 *
 * @example
 * const engine = resolveEngine(process.env);
 * const docker = new Docker(engine.options); // engine.address says where it points
 */
export function resolveEngine(env: NodeJS.ProcessEnv, home = os.homedir()): EngineEndpoint {
  // docker-modem reads DOCKER_HOST (with DOCKER_TLS_VERIFY and DOCKER_CERT_PATH) itself.
  if (env.DOCKER_HOST) return { options: {}, address: env.DOCKER_HOST, source: 'DOCKER_HOST' };
  const configDir = env.DOCKER_CONFIG || path.join(home, '.docker');
  const context = env.DOCKER_CONTEXT || currentContext(configDir);
  if (context && context !== 'default') {
    const id = createHash('sha256').update(context).digest('hex');
    const metaFile = path.join(configDir, 'contexts', 'meta', id, 'meta.json');
    let docker: { Host?: string; SkipTLSVerify?: boolean } | undefined;
    try {
      docker = (JSON.parse(readFileSync(metaFile, 'utf8')) as { Endpoints?: { docker?: typeof docker } }).Endpoints?.docker;
    } catch (err) {
      throw new Error(`The Docker context '${context}' cannot be read (${metaFile}: ${(err as Error).message}). Run 'docker context ls', or set DOCKER_HOST.`, {
        cause: err,
      });
    }
    const host = docker?.Host;
    const skipTls = docker?.SkipTLSVerify === true;
    if (!host) throw new Error(`The Docker context '${context}' has no docker endpoint. Run 'docker context inspect ${context}', or set DOCKER_HOST.`);
    const tlsDir = path.join(configDir, 'contexts', 'tls', id, 'docker');
    return { ...fromHost(host, existsSync(tlsDir) ? { dir: tlsDir, verify: !skipTls } : undefined), source: `context ${context}` };
  }
  return { options: {}, address: 'unix:///var/run/docker.sock', source: 'the default socket' };
}

function currentContext(configDir: string): string | undefined {
  try {
    const config = JSON.parse(readFileSync(path.join(configDir, 'config.json'), 'utf8')) as { currentContext?: unknown };
    return typeof config.currentContext === 'string' ? config.currentContext : undefined;
  } catch {
    return undefined;
  }
}

/** dockerode options for an endpoint URL (`unix://`, `tcp://`, `ssh://`), with a context's TLS files. */
function fromHost(host: string, tls: { dir: string; verify: boolean } | undefined): Omit<EngineEndpoint, 'source'> {
  const url = new URL(host);
  switch (url.protocol) {
    case 'unix:':
      return { options: { socketPath: url.pathname }, address: `unix://${url.pathname}` };
    case 'tcp:':
    case 'http:':
    case 'https:': {
      const files = tls ? readTls(tls.dir) : {};
      const secure = url.protocol === 'https:' || tls !== undefined;
      const port = url.port || (secure ? '2376' : '2375');
      return {
        options: {
          protocol: secure ? 'https' : 'http',
          host: url.hostname,
          port,
          ...files,
          ...(tls && !tls.verify ? { rejectUnauthorized: false } : {}),
        },
        address: `tcp://${url.hostname}:${port}${secure ? ' (TLS)' : ''}`,
      };
    }
    case 'ssh:':
      return {
        options: { protocol: 'ssh', host: url.hostname, port: url.port || '22', ...(url.username ? { username: decodeURIComponent(url.username) } : {}) },
        address: `ssh://${url.username ? `${url.username}@` : ''}${url.hostname}${url.port ? `:${url.port}` : ''}`,
      };
    default:
      throw new Error(`The Docker endpoint '${host}' has a scheme Warren does not speak (unix, tcp, ssh).`);
  }
}

function readTls(dir: string): { ca?: Buffer; cert?: Buffer; key?: Buffer } {
  const read = (name: string) => (existsSync(path.join(dir, name)) ? readFileSync(path.join(dir, name)) : undefined);
  const [ca, cert, key] = [read('ca.pem'), read('cert.pem'), read('key.pem')];
  return { ...(ca ? { ca } : {}), ...(cert ? { cert } : {}), ...(key ? { key } : {}) };
}
