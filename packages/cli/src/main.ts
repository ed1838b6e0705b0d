import { formatError } from './output.js';
import { buildProgram } from './program.js';

buildProgram()
  .parseAsync()
  .catch((err: unknown) => {
    process.stderr.write(`${formatError(err)}\n`);
    const code = (err as { exitCode?: unknown }).exitCode;
    process.exit(typeof code === 'number' && code > 0 ? code : 1);
  });
