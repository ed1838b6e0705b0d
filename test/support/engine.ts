// Restarting the Docker engine, for the engine tier (test/engine) and `scripts/soak --restart-docker`.
// Only an engine that Warren's own scripts started (scripts/lib/common.sh marks it) and that runs
// nothing but Warren sandboxes may be restarted: never an engine the machine's owner runs.
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import Docker from 'dockerode';
import { detectEngine, type EngineKind } from '@warren/controller';

const run = promisify(execFile);

function readPid(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8').trim();
  } catch {
    return undefined;
  }
}

/** Why this engine may not be restarted, or undefined when it may. */
export async function reasonNotToRestartEngine(): Promise<string | undefined> {
  const enginePid = readPid('/var/run/docker.pid');
  if (enginePid === undefined || enginePid !== readPid('/var/run/warren-dockerd.pid')) {
    return 'this Docker engine was not started by scripts/lib/common.sh, and Warren never restarts an engine it does not own';
  }
  const { stdout } = await run('docker', ['ps', '--format', '{{.Names}} {{.Label "warren.sandbox"}}']);
  const others = stdout.split('\n').filter((line) => line.trim() !== '' && line.trim().split(' ').length < 2);
  if (others.length > 0) return `containers other than Warren sandboxes run on this engine (${others.join(', ')}), and a restart would stop them`;
  return undefined;
}

/** Stops dockerd (its containers stop with it: no live-restore) and waits until it has exited. */
export async function stopEngine(): Promise<void> {
  const pid = Number(readPid('/var/run/docker.pid'));
  process.kill(pid, 'SIGTERM');
  for (const deadline = Date.now() + 60_000; ;) {
    try {
      process.kill(pid, 0);
    } catch {
      return;
    }
    if (Date.now() > deadline) throw new Error(`dockerd (pid ${pid}) did not exit within 60 s of SIGTERM`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Starts dockerd the way scripts/test does (which marks it as Warren's again), and waits until it answers. */
export async function startEngine(repoRoot: string): Promise<void> {
  await run('bash', ['-c', `source ${path.join(repoRoot, 'scripts/lib/common.sh')} && ensure_docker`]);
}

let engineKind: Promise<EngineKind> | undefined;

/**
 * The engine the e2e tier runs against (DOCKER_HOST): Docker, or Podman in the Podman pass of
 * scripts/test. Tests use it to skip, with the reason, exactly what an engine cannot do.
 */
export function testEngine(): Promise<EngineKind> {
  engineKind ??= new Docker().version().then(detectEngine);
  return engineKind;
}
