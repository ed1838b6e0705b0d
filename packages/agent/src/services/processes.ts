import type { FilePolicy } from '../policy.js';
import { codeHandlers } from './code.js';
import { CodeContexts } from './code-contexts.js';
import { execHandlers } from './exec.js';
import { ProcessTable, type SandboxUser } from './process-table.js';
import { shellHandlers, ShellSessions } from './shell.js';

export interface ProcessRuntimeOptions {
  policy: FilePolicy;
  home: string;
  /** The sandbox's environment (image `ENV` and create `env`), the base of every command's. */
  sandboxEnv?: Readonly<Record<string, string>> | undefined;
  /** Who commands run as (the sandbox user); absent, the daemon's own identity. */
  user?: SandboxUser | undefined;
  /** Commands may ask to run as root (the sandbox was created with `root`). */
  allowRoot?: boolean | undefined;
  /** The cap on processes Warren runs at once in this sandbox. */
  maxProcesses?: number | undefined;
}

/**
 * Everything process-related one sandbox holds across connections: the process table (with its
 * cap and background processes) and the shell sessions. Closing it kills every tree it started.
 *
 * @example
 * const processes = new ProcessRuntime({ policy, home: '/workspace' });
 * const handlers = { ...processes.handlers() };
 * await processes.close();
 */
export class ProcessRuntime {
  readonly table: ProcessTable;
  readonly shells: ShellSessions;
  /** The code interpreter's contexts and their kernels. */
  readonly code: CodeContexts;

  /** The sandbox's environment, the base of every command's (and every terminal's). */
  get sandboxEnv(): Readonly<Record<string, string>> | undefined {
    return this.options.sandboxEnv;
  }

  /** Who commands run as. */
  get user(): SandboxUser | undefined {
    return this.options.user;
  }

  constructor(private readonly options: ProcessRuntimeOptions) {
    this.table = new ProcessTable(options.maxProcesses);
    this.shells = new ShellSessions({ policy: options.policy, home: options.home, sandboxEnv: options.sandboxEnv, user: options.user, table: this.table });
    this.code = new CodeContexts({ home: options.home, sandboxEnv: options.sandboxEnv, user: options.user, table: this.table });
  }

  /** The process, shell and code handlers; `policy` (the connection's, by default the sandbox's) resolves `cwd`. */
  handlers(policy: FilePolicy = this.options.policy): ReturnType<typeof execHandlers> & ReturnType<typeof shellHandlers> & ReturnType<typeof codeHandlers> {
    return {
      ...execHandlers({
        policy,
        home: this.options.home,
        sandboxEnv: this.options.sandboxEnv,
        user: this.options.user,
        allowRoot: this.options.allowRoot,
        table: this.table,
      }),
      ...shellHandlers(this.shells, policy),
      ...codeHandlers(this.code, policy),
    };
  }

  async close(): Promise<void> {
    await this.code.closeAll();
    await this.shells.closeAll();
    await this.table.close();
  }
}
