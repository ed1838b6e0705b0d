import { randomBytes } from 'node:crypto';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';

/**
 * Where the key document is kept: a file of the state folder, or what controller replicas share (a
 * Secret on Kubernetes). `update` replaces it atomically against every other writer, calling
 * `change` again on the newest document after a conflict, so replicas never lose each other's keys.
 */
export interface KeyStorage {
  read(): Promise<string | undefined>;
  update(change: (current: string | undefined) => string): Promise<void>;
}

/** The key document in `<stateDir>/keys.json` (mode 0600): written to a temporary file, then renamed over the old one, one write at a time. */
export class FileKeyStorage implements KeyStorage {
  private writing: Promise<void> = Promise.resolve();

  constructor(private readonly file: string) {}

  read(): Promise<string | undefined> {
    return readFile(this.file, 'utf8').catch(() => undefined);
  }

  update(change: (current: string | undefined) => string): Promise<void> {
    const run = this.writing.then(async () => {
      const text = change(await this.read());
      await mkdir(path.dirname(this.file), { recursive: true, mode: 0o700 });
      const temp = `${this.file}.${randomBytes(4).toString('hex')}.tmp`;
      await writeFile(temp, text, { mode: 0o600 });
      await rename(temp, this.file);
    });
    this.writing = run.catch(() => undefined);
    return run;
  }
}

/** The key document in memory only (tests, embedding). */
export class MemoryKeyStorage implements KeyStorage {
  private text: string | undefined;
  async read(): Promise<string | undefined> {
    return this.text;
  }
  async update(change: (current: string | undefined) => string): Promise<void> {
    this.text = change(this.text);
  }
}
