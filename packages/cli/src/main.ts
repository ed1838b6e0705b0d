import { CommanderError } from 'commander';
import { formatError } from './output.js';
import { buildProgram } from './program.js';

buildProgram()
  .parseAsync()
  .catch((err: unknown) => {
    // Commander printed its usage error (or the help, or the version) already; only its code is left.
    if (err instanceof CommanderError) process.exit(err.exitCode);
    process.stderr.write(`${formatError(err)}\n`);
    const code = (err as { exitCode?: unknown }).exitCode;
    process.exit(typeof code === 'number' && code > 0 ? code : 1);
  });
