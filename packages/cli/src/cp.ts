import { lstat, readdir, readFile, readlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Command } from 'commander';
import { pack } from 'tar-stream';
import { parseRemote, wantsJson } from './args.js';
import { CliError, printJson, withSpinner } from './output.js';
import { connectSandbox } from './sandbox-commands.js';

/** What one `warren cp` moved. */
export interface CopyReport {
  from: string;
  to: string;
  kind: 'file' | 'directory';
  bytes: number;
  files: number;
}

/**
 * `warren cp SRC DST`: copies a file or a folder between this machine and a sandbox (one side is
 * `ID:/path`). A folder travels as one tar archive (at most 32 MiB) and lands as DST itself:
 * its contents go into DST, which is created when missing.
 */
export async function copyCommand(source: string, destination: string, options: { overwrite?: boolean }, command: Command): Promise<void> {
  const from = parseRemote(source);
  const to = parseRemote(destination);
  if (from && to)
    throw new CliError('Both sides name a sandbox; copy from a sandbox to here, or from here to a sandbox.', 'Copy in two steps through a local folder.');
  if (!from && !to) throw new CliError('Neither side names a sandbox.', 'Write one side as ID:/path, e.g. warren cp ./src ID:/workspace/src.');
  const report = to ? await upload(source, to, options.overwrite === true, command) : await download(from!, destination, command);
  if (wantsJson(command)) printJson(report);
  else
    process.stdout.write(
      `${report.from} -> ${report.to}: ${report.kind === 'file' ? `${report.bytes} bytes` : `${report.files} files, ${report.bytes} bytes`}\n`,
    );
}

async function upload(local: string, remote: { id: string; path: string }, overwrite: boolean, command: Command): Promise<CopyReport> {
  const stats = await lstat(local).catch(() => {
    throw new CliError(`No file or folder at '${local}' on this machine.`, 'Check the local path.');
  });
  const sandbox = await connectSandbox(command, remote.id);
  try {
    const to = `${remote.id}:${remote.path}`;
    if (stats.isDirectory()) {
      const { archive, files } = await tarFolder(local);
      const result = await withSpinner(
        `Uploading ${local} (${archive.length} bytes)`,
        () => sandbox.files.upload(remote.path, archive, { overwrite, timeoutMs: 300_000 }),
        `Uploaded ${local}`,
      );
      return { from: local, to, kind: 'directory', bytes: result.bytes, files: files };
    }
    if (!stats.isFile()) throw new CliError(`'${local}' is neither a file nor a folder.`, 'Copy regular files and folders only.');
    const remotePath = remote.path.endsWith('/') ? `${remote.path}${path.basename(local)}` : remote.path;
    const content = await readFile(local);
    await withSpinner(`Uploading ${local}`, () => sandbox.files.write(remotePath, content, { timeoutMs: 300_000 }), `Uploaded ${local}`);
    return { from: local, to: `${remote.id}:${remotePath}`, kind: 'file', bytes: content.length, files: 1 };
  } finally {
    sandbox.close();
  }
}

async function download(remote: { id: string; path: string }, local: string, command: Command): Promise<CopyReport> {
  const sandbox = await connectSandbox(command, remote.id);
  try {
    const from = `${remote.id}:${remote.path}`;
    const stat = await sandbox.files.stat(remote.path);
    if (stat.type === 'directory') {
      const result = await withSpinner(`Downloading ${from}`, () => sandbox.files.downloadTo(remote.path, local, { timeoutMs: 300_000 }), `Downloaded ${from}`);
      for (const skipped of result.skipped) process.stderr.write(`warren: skipped ${skipped.path}: ${skipped.reason}\n`);
      return { from, to: local, kind: 'directory', bytes: result.bytes, files: result.files };
    }
    const target = (await isDirectory(local)) ? path.join(local, path.posix.basename(remote.path)) : local;
    const content = await withSpinner(
      `Downloading ${from}`,
      () => sandbox.files.read(remote.path, { format: 'bytes', timeoutMs: 300_000 }),
      `Downloaded ${from}`,
    );
    await writeFile(target, content);
    return { from, to: target, kind: 'file', bytes: content.length, files: 1 };
  } finally {
    sandbox.close();
  }
}

async function isDirectory(local: string): Promise<boolean> {
  return lstat(local).then(
    (s) => s.isDirectory(),
    () => false,
  );
}

/**
 * Packs a local folder's contents (names relative to it) into a tar archive: files, folders and
 * symbolic links as they are (links are not followed; the sandbox refuses ones that leave).
 */
export async function tarFolder(folder: string): Promise<{ archive: Buffer; files: number }> {
  const tar = pack();
  const chunks: Buffer[] = [];
  tar.on('data', (chunk: unknown) => chunks.push(chunk as Buffer));
  const done = new Promise<void>((resolve, reject) => {
    tar.on('end', resolve);
    tar.on('error', reject);
  });
  let files = 0;
  const walk = async (dir: string, rel: string): Promise<void> => {
    for (const entry of (await readdir(dir, { withFileTypes: true })).sort((a, b) => a.name.localeCompare(b.name))) {
      const absolute = path.join(dir, entry.name);
      const name = rel ? `${rel}/${entry.name}` : entry.name;
      const stats = await lstat(absolute);
      if (stats.isDirectory()) {
        tar.entry({ name: `${name}/`, type: 'directory', mode: stats.mode & 0o777, mtime: stats.mtime });
        await walk(absolute, name);
      } else if (stats.isFile()) {
        tar.entry({ name, mode: stats.mode & 0o777, mtime: stats.mtime }, await readFile(absolute));
        files += 1;
      } else if (stats.isSymbolicLink()) {
        tar.entry({ name, type: 'symlink', linkname: await readlink(absolute), mode: 0o777, mtime: stats.mtime });
      }
    }
  };
  await walk(folder, '');
  tar.finalize();
  await done;
  return { archive: Buffer.concat(chunks), files };
}
