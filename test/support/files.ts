import { pack, type Header } from 'tar-stream';
import { WarrenError } from '@warren/sdk';

/** The code of the typed error a call fails with, or 'OK': one assertion covers both outcomes. */
export async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return 'OK';
  } catch (err) {
    if (err instanceof WarrenError) return err.code;
    throw err;
  }
}

/** Builds a tar archive from raw headers, hostile ones included (links, devices, `..` names). */
export async function tar(entries: { header: Partial<Header> & { name: string }; data?: string }[]): Promise<Buffer> {
  const p = pack();
  const chunks: Buffer[] = [];
  p.on('data', (c: unknown) => chunks.push(c as Buffer));
  const done = new Promise<void>((resolve) => p.on('end', () => resolve()));
  for (const { header, data } of entries) {
    await new Promise<void>((resolve, reject) => {
      if (data !== undefined) p.entry(header, data, (err) => (err ? reject(err) : resolve()));
      else p.entry(header, (err) => (err ? reject(err) : resolve()));
    });
  }
  p.finalize();
  await done;
  return Buffer.concat(chunks);
}
