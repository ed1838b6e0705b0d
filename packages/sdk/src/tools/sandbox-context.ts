import type { Commands } from '../commands.js';
import { Files } from '../files.js';
import type { ToolContext } from './context.js';

/** Anything with Warren's `files` and `commands` namespaces: a `Sandbox`, or a test agent. */
export interface SandboxLike {
  files: Files;
  commands: Commands;
}

/** What a tool set is built on: a sandbox (or anything with its `files` and `commands`), or a {@link ToolContext}. */
export type ToolTarget = SandboxLike | ToolContext;

/**
 * The tool context of a target: a sandbox is wrapped with {@link toolContext}, a context is used as it is.
 *
 * @example
 * const { files, commands } = asToolContext(sandbox);
 */
export function asToolContext(target: ToolTarget): ToolContext {
  return target.files instanceof Files ? toolContext(target as SandboxLike) : target;
}

/**
 * The primitives of a sandbox, as the tool sets use them: `sandbox.files` itself and
 * `sandbox.commands`, so every check (policy, clamping, anchors) happens in the sandbox.
 *
 * @example
 * await using sandbox = await Sandbox.create();
 * const tools = builtinTools(toolContext(sandbox));
 */
export function toolContext(sandbox: SandboxLike): ToolContext {
  const { files, commands } = sandbox;
  return {
    files,
    commands: {
      run: (cmd, options = {}) => commands.run(cmd, options),
    },
  };
}
