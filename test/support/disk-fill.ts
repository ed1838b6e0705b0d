/** What one attempt to fill a workspace did. */
export interface FillOutcome {
  /** dd's exit code: 0 when it wrote everything it was asked to. */
  exitCode: number;
  /** dd stopped on "No space left on device" (ENOSPC) or "Disk quota exceeded" (EDQUOT). */
  diskFull: boolean;
  /** The size of the file dd left behind. */
  bytesWritten: number;
  /** What dd printed, for failure messages. */
  output: string;
}

/** Runs a shell script where sandbox code runs, e.g. `(s) => sandbox.commands.run(s)` in e2e tests. */
export type ScriptRunner = (script: string) => Promise<{ exitCode: number; stdout: string; stderr: string }>;

/**
 * Writes zeros to `file` with `dd` (synced, so nothing waits in a cache) until `maxMb` MiB are
 * written or the disk refuses. Works through any runner: the SDK's `commands.run` inside a real
 * container, or a process on the host started as the sandbox user in its workspace.
 *
 * @example
 * const outcome = await fillWorkspace((s) => sandbox.commands.run(s), 'fill.bin', 200);
 * expect(outcome.diskFull).toBe(true);
 */
export async function fillWorkspace(run: ScriptRunner, file: string, maxMb: number): Promise<FillOutcome> {
  if (!/^[\w./-]+$/.test(file) || !Number.isInteger(maxMb) || maxMb < 1)
    throw new Error(`fillWorkspace: a plain file name and a whole number of MiB, got '${file}' and ${maxMb}`);
  const script = [
    `dd if=/dev/zero of='${file}' bs=1048576 count=${maxMb} conv=fsync 2>&1`,
    'code=$?',
    'echo',
    'echo "dd-exit=$code"',
    `echo "size=$(stat -c %s '${file}' 2>/dev/null || echo 0)"`,
  ].join('\n');
  const { stdout, stderr } = await run(script);
  const output = `${stdout}${stderr}`;
  const exitCode = Number(/dd-exit=(\d+)/.exec(output)?.[1] ?? -1);
  return {
    exitCode,
    diskFull: exitCode !== 0 && /No space left on device|Disk quota exceeded/.test(output),
    bytesWritten: Number(/size=(\d+)/.exec(output)?.[1] ?? 0),
    output,
  };
}
