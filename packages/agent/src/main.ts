import { readFile, unlink } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { startAgentServer } from './server.js';

/**
 * The daemon's entry point inside a sandbox. The secret arrives in a file that is deleted once
 * read, so it is in no environment and no argv, of this process or of any it starts.
 */
async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      socket: { type: 'string' },
      'secret-file': { type: 'string' },
      root: { type: 'string', default: '/workspace' },
      home: { type: 'string', default: process.env.HOME ?? '/tmp' },
    },
  });
  if (!values.socket || !values['secret-file']) throw new Error('usage: warren-agent --socket PATH --secret-file PATH [--root DIR]');
  const secret = (await readFile(values['secret-file'], 'utf8')).trim();
  await unlink(values['secret-file']).catch(() => undefined);
  if (secret.length < 32) throw new Error('the secret file must hold at least 32 characters');

  // The container's environment is the sandbox's (the image's ENV, the create request's env);
  // the controller puts nothing of its own there, so commands inherit it as their base.
  const sandboxEnv = Object.fromEntries(Object.entries(process.env).filter((entry): entry is [string, string] => entry[1] !== undefined && entry[0] !== 'HOME'));
  const server = await startAgentServer({ socketPath: values.socket, secret, policy: { root: values.root, readOnly: false }, home: values.home, sandboxEnv });
  process.stdout.write(`warren-agent listening on ${server.socketPath}\n`);
  const stop = () => void server.close().then(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((err: unknown) => {
  process.stderr.write(`warren-agent: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
