// The reference MCP client (@modelcontextprotocol/sdk) driving `python3 -m warren.mcp` over stdio,
// for tests/test_adapters.py: it lists the tools, makes the calls given as JSON in argv[3], and
// prints one JSON line with what it got.
//
//   node tests/mcp_client.mjs PYTHON '["--sandbox", ID, ...]' '[{"name": "bash", "arguments": {...}}]'
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const [python, serverArgs, calls] = process.argv.slice(2);
const transport = new StdioClientTransport({ command: python, args: ['-m', 'warren.mcp', ...JSON.parse(serverArgs)], env: process.env, stderr: 'inherit' });
const client = new Client({ name: 'warren-python-test', version: '0' });
await client.connect(transport);
try {
  const { tools } = await client.listTools();
  const results = [];
  for (const call of JSON.parse(calls)) results.push(await client.callTool(call));
  process.stdout.write(`${JSON.stringify({ server: client.getServerVersion(), tools, results })}\n`);
} finally {
  await client.close();
}
