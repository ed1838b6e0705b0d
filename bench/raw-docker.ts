import { createReadStream, createWriteStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import Docker from 'dockerode';
import { pack, extract } from 'tar-stream';

/**
 * The hand-rolled baseline Warren competes with: plain dockerode calls against a container of
 * the same image, with the same hardening where it does not change the measurement.
 */
export class RawDocker {
  constructor(readonly docker = new Docker()) {}

  async createAndStart(image: string): Promise<Docker.Container> {
    const container = await this.docker.createContainer({
      Image: image,
      Entrypoint: ['sleep', 'infinity'],
      Cmd: [],
      User: '1000:1000',
      Labels: { 'warren.bench': 'raw' },
      HostConfig: { NetworkMode: 'none', CapDrop: ['ALL'], SecurityOpt: ['no-new-privileges=true'], Init: true },
    });
    await container.start();
    return container;
  }

  /** `docker exec`: create + start (attached, output drained) + inspect for the exit code. */
  async exec(container: Docker.Container, cmd: string[]): Promise<number | null> {
    const exec = await container.exec({ Cmd: cmd, AttachStdout: true, AttachStderr: true });
    const stream = await exec.start({ hijack: true, stdin: false });
    await new Promise<void>((resolve, reject) => {
      stream.on('end', () => resolve());
      stream.on('close', () => resolve());
      stream.on('error', reject);
      stream.resume();
    });
    return (await exec.inspect()).ExitCode;
  }

  /** `putArchive` of one file. */
  async putFile(container: Docker.Container, folder: string, name: string, content: Buffer): Promise<void> {
    const tar = pack();
    tar.entry({ name, mode: 0o644, uid: 1000, gid: 1000 }, content);
    tar.finalize();
    await container.putArchive(tar as unknown as NodeJS.ReadableStream, { path: folder });
  }

  /** `getArchive` of one file, untarred into memory. */
  async getFile(container: Docker.Container, path: string): Promise<Buffer> {
    const archive = await container.getArchive({ path });
    const chunks: Buffer[] = [];
    const untar = extract();
    untar.on('entry', (_header, stream, next) => {
      stream.on('data', (c: unknown) => chunks.push(c as Buffer));
      stream.on('end', next);
    });
    await new Promise<void>((resolve, reject) => {
      untar.on('finish', resolve);
      untar.on('error', reject);
      archive.pipe(untar);
    });
    return Buffer.concat(chunks);
  }

  /** What `docker cp FILE CONTAINER:FOLDER` does: one file streamed from disk into `putArchive`. */
  async copyIn(container: Docker.Container, folder: string, local: string, name: string): Promise<void> {
    const { size } = await stat(local);
    const tar = pack();
    const entry = tar.entry({ name, size, mode: 0o644, uid: 1000, gid: 1000 });
    const sent = pipeline(createReadStream(local), entry as unknown as NodeJS.WritableStream).then(() => tar.finalize());
    await Promise.all([container.putArchive(tar as unknown as NodeJS.ReadableStream, { path: folder }), sent]);
  }

  /** What `docker cp CONTAINER:FILE LOCAL` does: `getArchive` streamed, its one file written to disk. */
  async copyOut(container: Docker.Container, path: string, local: string): Promise<void> {
    const archive = await container.getArchive({ path });
    const untar = extract();
    untar.on('entry', (_header, stream, next) => {
      pipeline(stream, createWriteStream(local)).then(() => next(), next);
    });
    await pipeline(archive, untar);
  }

  async remove(container: Docker.Container): Promise<void> {
    await container.remove({ force: true }).catch(() => undefined);
  }
}
