import { pack, type Pack } from 'tar-stream';

/** One entry of an archive the controller builds: a folder (no content) or a file. */
export interface TarEntry {
  header: Parameters<Pack['entry']>[0];
  content?: Buffer | string | undefined;
}

/**
 * Packs entries into one in-memory tar archive, for `putArchive`. The controller only packs small
 * things this way (a folder's owner, the agent runtime).
 *
 * @example
 * await container.putArchive(await packTar([{ header: { name: 'workspace/', type: 'directory', mode: 0o755 } }]), { path: '/' });
 */
export async function packTar(entries: Iterable<TarEntry>): Promise<Buffer> {
  const tar = pack();
  const chunks: Buffer[] = [];
  tar.on('data', (chunk: unknown) => chunks.push(chunk as Buffer));
  const done = new Promise<void>((resolve, reject) => {
    tar.on('end', resolve);
    tar.on('error', reject);
  });
  for (const entry of entries) {
    if (entry.content === undefined) tar.entry(entry.header);
    else tar.entry(entry.header, entry.content);
  }
  tar.finalize();
  await done;
  return Buffer.concat(chunks);
}
