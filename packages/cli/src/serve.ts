import { API_KEY_HASH_FILE, readConfigFile, startController, type Controller } from '@warren/controller';

/**
 * The SDK example the README and `warren serve` print: plain JavaScript that Node 20 runs as
 * `node hello.mjs` from the repository (TypeScript users can write `await using` instead of
 * try/finally).
 */
export function sdkExample(url: string): string {
  return [
    `import { Sandbox } from '@warren/sdk';`,
    `const sandbox = await Sandbox.create({ baseUrl: '${url}', apiKey: process.env.WARREN_API_KEY });`,
    `try {`,
    `  await sandbox.files.write('hello.py', 'print("hello from the sandbox")');`,
    `  const { stdout, exitCode } = await sandbox.commands.run('python3 hello.py');`,
    `  console.log(exitCode, stdout);`,
    `} finally {`,
    `  await sandbox.kill();`,
    `}`,
  ].join('\n');
}

/**
 * `warren serve`: starts the controller in the foreground and prints how to use it. Stopping it
 * (Ctrl-C, SIGTERM) leaves the sandboxes running; the next start picks them up again.
 */
export async function serve(options: { host?: string; port?: number; config?: string }): Promise<Controller> {
  if (options.config !== undefined) {
    readConfigFile(options.config); // a bad file fails here, naming the setting
    process.env.WARREN_CONFIG = options.config;
  }
  const config: { host?: string; port?: number } = {};
  if (options.host !== undefined) config.host = options.host;
  if (options.port !== undefined) config.port = options.port;
  const controller = await startController({ config });
  const hashFile = `${controller.config.stateDir}/${API_KEY_HASH_FILE}`;
  const keyLines = controller.generatedApiKey
    ? [`API key:    ${controller.generatedApiKey}`, `            shown this once: only its SHA-256 digest is kept (${hashFile}). Save it now.`]
    : process.env.WARREN_API_KEY
      ? ['API key:    the value of WARREN_API_KEY']
      : [
          'API key:    the one printed when Warren first started (only its digest is kept).',
          `            Lost it? Stop Warren, delete ${hashFile}, and start again for a new one, or set WARREN_API_KEY.`,
        ];
  process.stdout.write(
    [
      '',
      `Warren is listening on ${controller.url}`,
      ...keyLines,
      '',
      'Try it: save this as hello.mjs in the repository, set WARREN_API_KEY to the key above, run node hello.mjs',
      '',
      sdkExample(controller.url),
      '',
    ].join('\n') + '\n',
  );
  const stop = () => void controller.close().then(() => process.exit(0));
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  return controller;
}
