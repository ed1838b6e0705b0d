import { lstat } from 'node:fs/promises';
import path from 'node:path';
import type { Command } from 'commander';
import type { TransferProgress } from '@warren/sdk';
import { parseRemote, wantsJson } from './args.js';
import { CliError, UsageError, printJson, progressLine, withSpinner } from './output.js';
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
 * `warren cp SRC DST`: copies a file or a folder of any size between this machine and a sandbox
 * (one side is `ID:/path`). Both travel streamed, as a tar archive in pieces, with a progress bar
 * on a terminal. A folder lands as DST itself: its contents go into DST, which is created when
 * missing. A file replaces an existing DST file; a folder's files replace existing ones only with
 * `--overwrite`.
 */
export async function copyCommand(source: string, destination: string, options: { overwrite?: boolean }, command: Command): Promise<void> {
  const from = parseRemote(source);
  const to = parseRemote(destination);
  if (from && to)
    throw new UsageError('Both sides name a sandbox; copy from a sandbox to here, or from here to a sandbox.', 'Copy in two steps through a local folder.');
  if (!from && !to) throw new UsageError('Neither side names a sandbox.', 'Write one side as ID:/path, e.g. warren cp ./src ID:/workspace/src.');
  const report = to ? await upload(source, to, options.overwrite === true, command) : await download(from!, destination, command);
  if (wantsJson(command)) printJson(report);
  else
    process.stdout.write(
      `${report.from} -> ${report.to}: ${report.kind === 'file' ? `${report.bytes} bytes` : `${report.files} files, ${report.bytes} bytes`}\n`,
    );
}

/** Runs a transfer under the terminal's spinner, its text a progress bar (nothing when not a terminal). */
function withProgress<T>(label: string, work: (onProgress: (progress: TransferProgress) => void) => Promise<T>, doneText: string): Promise<T> {
  const started = performance.now();
  return withSpinner(label, (update) => work((progress) => update(progressLine(label, progress, performance.now() - started))), doneText);
}

async function upload(local: string, remote: { id: string; path: string }, overwrite: boolean, command: Command): Promise<CopyReport> {
  const stats = await lstat(local).catch(() => {
    throw new CliError(`No file or folder at '${local}' on this machine.`, 'Check the local path.');
  });
  if (!stats.isDirectory() && !stats.isFile()) throw new CliError(`'${local}' is neither a file nor a folder.`, 'Copy regular files and folders only.');
  const sandbox = await connectSandbox(command, remote.id);
  try {
    const remotePath = stats.isFile() && remote.path.endsWith('/') ? `${remote.path}${path.basename(local)}` : remote.path;
    const result = await withProgress(
      `Uploading ${local}`,
      // A file replaces the one it lands on, as cp does; a folder's files only with --overwrite.
      (onProgress) => sandbox.files.uploadFrom(local, remotePath, { overwrite: stats.isFile() || overwrite, onProgress }),
      `Uploaded ${local}`,
    );
    return { from: local, to: `${remote.id}:${remotePath}`, kind: result.kind, bytes: result.bytes, files: result.files };
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
      const result = await withProgress(
        `Downloading ${from}`,
        (onProgress) => sandbox.files.downloadTo(remote.path, local, { onProgress }),
        `Downloaded ${from}`,
      );
      for (const skipped of result.skipped) process.stderr.write(`warren: skipped ${skipped.path}: ${skipped.reason}\n`);
      return { from, to: local, kind: 'directory', bytes: result.bytes, files: result.files };
    }
    const target = (await isDirectory(local)) ? path.join(local, path.posix.basename(remote.path)) : local;
    const result = await withProgress(
      `Downloading ${from}`,
      (onProgress) => sandbox.files.downloadFile(remote.path, target, { overwrite: true, onProgress }),
      `Downloaded ${from}`,
    );
    return { from, to: target, kind: 'file', bytes: stat.size ?? result.bytes, files: 1 };
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
