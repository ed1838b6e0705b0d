import { PassThrough } from 'node:stream';
import Docker from 'dockerode';

/**
 * Runs a command inside a sandbox's container as root, from the host (`docker exec -u 0`): how a
 * test looks at what sandbox code must not see, such as the daemon's own `/proc` entries.
 *
 * @example
 * const { stdout } = await execAsRoot(containerId, ['cat', '/proc/1/status']);
 */
export async function execAsRoot(containerId: string, cmd: string[]): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  const docker = new Docker();
  const exec = await docker.getContainer(containerId).exec({ Cmd: cmd, User: '0', AttachStdout: true, AttachStderr: true });
  const stream = await exec.start({ hijack: true, stdin: false });
  const out = new PassThrough();
  const err = new PassThrough();
  const stdout: Buffer[] = [];
  const stderr: Buffer[] = [];
  out.on('data', (chunk: Buffer) => stdout.push(chunk));
  err.on('data', (chunk: Buffer) => stderr.push(chunk));
  docker.modem.demuxStream(stream, out, err);
  await new Promise<void>((resolve, reject) => {
    stream.once('end', resolve);
    stream.once('close', resolve);
    stream.once('error', reject);
  });
  const { ExitCode } = await exec.inspect();
  return { exitCode: ExitCode ?? -1, stdout: Buffer.concat(stdout).toString('utf8'), stderr: Buffer.concat(stderr).toString('utf8') };
}
