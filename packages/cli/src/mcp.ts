import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import type { Command } from 'commander';
import { callMCPTool, Sandbox, toMCPTools } from '@warren/sdk';
import { controllerOptions } from './args.js';
import { UsageError } from './output.js';
import { CLI_VERSION } from './version.js';

import { TOOLSETS, type ToolsetName } from './toolsets.js';

export { TOOLSETS, TOOLSET_NAMES, type ToolsetName } from './toolsets.js';

export interface McpOptions {
  toolset: ToolsetName;
  /** Serve this existing sandbox (left running afterwards) instead of creating one. */
  sandbox?: string;
  /** With `sandbox`: its token, or a narrower derived one, instead of the API key. */
  token?: string;
  image?: string;
  ttl?: number;
  label?: Record<string, string>;
}

/**
 * Refuses flags that contradict each other, as python3 -m warren.mcp does: `--token` reaches an
 * existing sandbox only, and `--image`, `--ttl`, `--label` describe one it creates.
 *
 * @example
 * checkMcpOptions({ toolset: 'codin', sandbox: 'sb1', image: 'alpine' }); // throws UsageError
 */
export function checkMcpOptions(options: McpOptions): void {
  if (options.sandbox === undefined && options.token !== undefined)
    throw new UsageError('--token needs --sandbox (a created sandbox is reached with the API key).', 'Add --sandbox ID, or leave --token out.');
  if (options.sandbox !== undefined && (options.image !== undefined || options.ttl !== undefined || options.label !== undefined))
    throw new UsageError('--image, --ttl and --label describe the sandbox warren mcp creates; leave them out with --sandbox.');
}

/**
 * `warren mcp`: a Model Context Protocol server on stdio that exposes one tool set over one
 * sandbox. A sandbox it created is kept alive while the client is connected and killed when the
 * client goes away (stdin closes, or SIGTERM / SIGINT); an existing one (`--sandbox`) is left
 * running. Nothing but JSON-RPC goes to stdout; notes go to stderr.
 */
export async function mcpCommand(options: McpOptions, command: Command): Promise<void> {
  checkMcpOptions(options);
  const controller = controllerOptions(command);
  const owned = options.sandbox === undefined;
  const sandbox = owned
    ? await Sandbox.create({
        ...controller,
        ...(options.image ? { image: options.image } : {}),
        ...(options.ttl ? { ttlSeconds: options.ttl } : {}),
        labels: { 'warren.mcp': options.toolset, ...options.label },
      })
    : await Sandbox.connect(options.sandbox!, { ...controller, ...(options.token !== undefined ? { token: options.token } : {}) });
  const tools = TOOLSETS[options.toolset](sandbox);
  process.stderr.write(
    `warren mcp: serving the ${options.toolset} tool set (${tools.length} tools) on sandbox ${sandbox.id}${owned ? ', removed when this server ends' : ''}\n`,
  );

  let keepalive: NodeJS.Timeout | undefined;
  if (owned) {
    // Keep a created sandbox from expiring while the client is still connected.
    const ttlSeconds = (await sandbox.info()).settings.ttlSeconds;
    keepalive = setInterval(() => void sandbox.keepalive().catch(() => undefined), Math.min(Math.max((ttlSeconds * 1000) / 3, 5_000), 60_000));
    keepalive.unref();
  }

  const server = new Server(
    { name: 'warren', version: CLI_VERSION },
    { capabilities: { tools: {} }, instructions: `Tools of the ${options.toolset} tool set, running in Warren sandbox ${sandbox.id}.` },
  );
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: toMCPTools(tools) }));
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const result = await callMCPTool(tools, request.params.name, request.params.arguments ?? {}, { signal: extra.signal });
    return { ...result };
  });

  let finishing: Promise<void> | undefined;
  const finish = (why: string): Promise<void> =>
    (finishing ??= (async () => {
      clearInterval(keepalive);
      if (owned) {
        await sandbox.kill().catch((err: unknown) => process.stderr.write(`warren mcp: could not remove sandbox ${sandbox.id}: ${(err as Error).message}\n`));
        process.stderr.write(`warren mcp: ${why}; removed sandbox ${sandbox.id}\n`);
      } else sandbox.close();
      await server.close().catch(() => undefined);
      process.exit(0);
    })());
  process.stdin.once('end', () => void finish('the client closed stdin'));
  process.stdin.once('close', () => void finish('the client closed stdin'));
  process.once('SIGTERM', () => void finish('SIGTERM'));
  process.once('SIGINT', () => void finish('SIGINT'));
  process.once('SIGHUP', () => void finish('SIGHUP'));

  const transport = new StdioServerTransport();
  transport.onclose = () => void finish('the transport closed');
  await server.connect(transport);
}
