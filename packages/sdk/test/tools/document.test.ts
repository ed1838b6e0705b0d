import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from '@jest/globals';
import { builtinTools, toolSetsDocument } from '../../src/index.js';
import { fakeContext } from './fakes.js';

const repo = path.resolve(import.meta.dirname, '..', '..', '..', '..');

describe('the tool sets as a document', () => {
  it('is checked in as generated (run pnpm openapi after changing a tool)', () => {
    const text = `${JSON.stringify(toolSetsDocument(), null, 2)}\n`;
    expect(readFileSync(path.join(repo, 'docs', 'toolsets.json'), 'utf8') === text).toBe(true);
  });

  it('describes each set in its seed order with the schemas the tools check with', () => {
    const document = toolSetsDocument();
    expect(Object.keys(document)).toEqual(['builtin', 'codin', 'filesystem', 'partialRead', 'toolsmith']);
    const tools = builtinTools(fakeContext());
    expect(document.builtin).toEqual(tools.map((t) => ({ name: t.name, description: t.description, output: t.output, inputSchema: t.jsonSchema })));
  });
});
