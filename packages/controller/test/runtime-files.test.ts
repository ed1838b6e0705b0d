import { describe, expect, it } from '@jest/globals';
import { extract } from 'tar-stream';
import { EGRESS_TRANSPARENT_ADDRESS } from '@warren/protocol';
import { RUNTIME_RESOLV_CONF, resolvConfText, runtimeTar, type AgentRuntime } from '../src/runtime.js';

async function entries(tar: Buffer): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const reader = extract();
  const done = new Promise<void>((resolve, reject) => {
    reader.on('entry', (header, stream, next) => {
      const chunks: Buffer[] = [];
      stream.on('data', (c: unknown) => chunks.push(c as Buffer));
      stream.on('end', () => {
        out.set(header.name, Buffer.concat(chunks).toString());
        next();
      });
    });
    reader.on('finish', resolve);
    reader.on('error', reject);
  });
  reader.end(tar);
  await done;
  return out;
}

describe('the runtime volume', () => {
  it("carries the egress resolver file (the exec channel binds it over /etc/resolv.conf), naming only the relay's address", async () => {
    const runtime: AgentRuntime = {
      hash: 'h',
      files: [{ name: RUNTIME_RESOLV_CONF, content: resolvConfText(EGRESS_TRANSPARENT_ADDRESS), mode: 0o644 }],
    };
    const files = await entries(await runtimeTar(runtime));
    expect(files.get('egress/')).toBe('');
    expect(files.get('egress/resolv.conf')).toMatch(new RegExp(`^(#.*\\n)?nameserver ${EGRESS_TRANSPARENT_ADDRESS.replaceAll('.', '\\.')}\\n`, 'm'));
    expect(files.get('egress/resolv.conf')?.match(/nameserver/g)).toHaveLength(1);
    expect(files.get('.complete')).toBe('h');
  });
});
