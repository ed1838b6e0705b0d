import { Command, InvalidArgumentError } from 'commander';
import { serve } from './serve.js';

const program = new Command()
  .name('warren')
  .description('Self-hosted sandboxes for AI agents: one Docker container per task.')
  .version('0.1.0');

program
  .command('serve')
  .description('Start the controller on this Docker host (sandboxes survive a restart).')
  .option('--host <address>', 'address to bind (default 127.0.0.1, or WARREN_HOST)')
  .option('--port <port>', 'port to listen on (default 7420, or WARREN_PORT)', (value) => {
    const port = Number(value);
    if (!Number.isInteger(port) || port < 0 || port > 65535) throw new InvalidArgumentError('a port is a whole number from 0 to 65535');
    return port;
  })
  .action(async (options: { host?: string; port?: number }) => {
    await serve(options);
  });

program.parseAsync().catch((err: unknown) => {
  const suggestion = (err as { suggestion?: string }).suggestion;
  process.stderr.write(`warren: ${err instanceof Error ? err.message : String(err)}${suggestion ? `\n  ${suggestion}` : ''}\n`);
  process.exit(1);
});
