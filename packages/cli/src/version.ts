import { readFileSync } from 'node:fs';

/**
 * This package's version, read from its package.json (one level above both `src/` and `dist/`), so
 * `warren --version` and the MCP server's announced version follow the published package.
 *
 * @example
 * console.log(CLI_VERSION); // '0.1.0'
 */
export const CLI_VERSION: string = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;
