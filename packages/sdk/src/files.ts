import type { Result } from '@warren/protocol';
import type { CallOptions, Connection } from './connection.js';

export interface ReadOptions extends CallOptions {
  /** `text` (the default) decodes UTF-8; `bytes` returns the content untouched. */
  format?: 'text' | 'bytes';
}

export interface WriteOptions extends CallOptions {
  /** Permission bits for a new file (an existing file keeps its own). */
  mode?: number;
}

/**
 * `sandbox.files`: the file operations, under the sandbox's file policy. Paths are relative to
 * the sandbox root (`/workspace` by default) or absolute inside it.
 */
export class Files {
  constructor(private readonly connection: () => Connection) {}

  /**
   * Reads a whole file.
   *
   * @example
   * const text = await sandbox.files.read('a.py');
   * const bytes = await sandbox.files.read('logo.png', { format: 'bytes' });
   */
  read(path: string, options?: ReadOptions & { format?: 'text' }): Promise<string>;
  read(path: string, options: ReadOptions & { format: 'bytes' }): Promise<Uint8Array>;
  async read(path: string, options: ReadOptions = {}): Promise<string | Uint8Array> {
    const { payload } = await this.connection().call('fs.read', { path }, options);
    const bytes = payload ?? new Uint8Array(0);
    return options.format === 'bytes' ? new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength) : Buffer.from(bytes).toString('utf8');
  }

  /**
   * Writes a whole file atomically, creating its parent folders.
   *
   * @example
   * await sandbox.files.write('src/main.py', 'print("hi")\n');
   */
  async write(path: string, data: string | Uint8Array, options: WriteOptions = {}): Promise<Result<'fs.write'>> {
    const payload = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
    const params = options.mode === undefined ? { path } : { path, mode: options.mode };
    return (await this.connection().call('fs.write', params, { ...options, payload })).result;
  }
}
