import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it, jest } from '@jest/globals';
import { CommanderError, type Command } from 'commander';
import { NotFoundError } from '@warren/sdk';
import {
  CLI_VERSION,
  CliError,
  collectKeyValue,
  exitCodeOf,
  formatBytes,
  formatError,
  languageOf,
  parseDuration,
  parseRemote,
  progressLine,
  table,
  timeLeft,
} from '../src/index.js';
import { buildProgram } from '../src/program.js';
import { checkMcpOptions } from '../src/mcp.js';

describe('formatError', () => {
  it('prints an SDK error as one line with its code and suggestion', () => {
    const err = new NotFoundError("No file at 'a.py'.\nList the folder.");
    expect(formatError(err)).toBe(`warren: NOT_FOUND: No file at 'a.py'. List the folder. (${err.suggestion})`);
  });

  it('prints a CLI error without a code, and a plain error as its message', () => {
    expect(formatError(new CliError('Neither side names a sandbox.', 'Write one side as ID:/path.'))).toBe(
      'warren: Neither side names a sandbox. (Write one side as ID:/path.)',
    );
    expect(formatError(new Error('boom'))).toBe('warren: boom');
    expect(formatError('text')).toBe('warren: text');
  });
});

describe('table', () => {
  it('aligns every column to its widest cell, with no trailing spaces', () => {
    expect(
      table(
        ['ID', 'STATE', 'LABELS'],
        [
          ['abc', 'running', ''],
          ['a', 'gone', 'x=1'],
        ],
      ),
    ).toBe('ID   STATE    LABELS\nabc  running\na    gone     x=1\n');
  });

  it('prints the header alone when there are no rows', () => {
    expect(table(['ID', 'STATE'], [])).toBe('ID  STATE\n');
  });
});

describe('argument parsers', () => {
  it.each([
    ['600', 600],
    ['30s', 30],
    ['10m', 600],
    ['2h', 7200],
    ['1d', 86_400],
  ])('parses the duration %s as %d seconds', (text, seconds) => {
    expect(parseDuration(text)).toBe(seconds);
  });

  it.each(['soon', '10x', '-5', '1.5h', ''])('refuses the duration %j with what to write instead', (text) => {
    expect(() => parseDuration(text)).toThrow(/seconds \(600\) or a number with s, m, h or d/);
  });

  it('collects repeated KEY=VALUE options, keeping = inside values', () => {
    expect(collectKeyValue('B=x=y', collectKeyValue('A=1'))).toEqual({ A: '1', B: 'x=y' });
    expect(() => collectKeyValue('novalue')).toThrow(/not KEY=VALUE/);
    expect(() => collectKeyValue('=v')).toThrow(/not KEY=VALUE/);
  });

  it('tells a sandbox path from a local one', () => {
    expect(parseRemote('sb_123:/workspace/a.py')).toEqual({ id: 'sb_123', path: '/workspace/a.py' });
    expect(parseRemote('sb_123:')).toEqual({ id: 'sb_123', path: '.' });
    expect(parseRemote('./a:b')).toBeUndefined();
    expect(parseRemote('/tmp/x')).toBeUndefined();
    expect(parseRemote('a.py')).toBeUndefined();
  });
});

describe('exitCodeOf', () => {
  it("passes the command's code through, 128+N for a signal, 124 for a timeout", () => {
    expect(exitCodeOf({ exitCode: 3, signal: null, timedOut: false })).toBe(3);
    expect(exitCodeOf({ exitCode: null, signal: 'SIGKILL', timedOut: false })).toBe(137);
    expect(exitCodeOf({ exitCode: null, signal: 'SIGTERM', timedOut: false })).toBe(143);
    expect(exitCodeOf({ exitCode: null, signal: 'SIGKILL', timedOut: true })).toBe(124);
    expect(exitCodeOf({ exitCode: null, signal: null, timedOut: false })).toBe(1);
  });
});

describe('progressLine: the one-line bar of warren cp', () => {
  const MiB = 2 ** 20;
  it('draws a bar, a percentage, the amounts and the rate when the total is known', () => {
    expect(progressLine('Uploading ./data', { bytes: 50 * MiB, totalBytes: 200 * MiB }, 1000)).toBe(
      'Uploading ./data [█████░░░░░░░░░░░░░░░]  25% 50.0/200.0 MiB 52.4 MB/s',
    );
    expect(progressLine('x', { bytes: 3 * 2 ** 30, totalBytes: 3 * 2 ** 30 }, 2000, 4)).toBe('x [████] 100% 3.0/3.0 GiB 1610.6 MB/s');
  });
  it('never overflows the bar, and shows only bytes without a total', () => {
    expect(progressLine('x', { bytes: 300, totalBytes: 100 }, 0, 4)).toBe('x [████] 100% 0.3/0.1 KiB');
    expect(progressLine('Downloading', { bytes: 1536 }, 0)).toBe('Downloading 1.5 KiB');
    expect(formatBytes(512)).toBe('512 B');
    expect(formatBytes(5 * MiB)).toBe('5.0 MiB');
  });
});

describe('timeLeft', () => {
  it('writes the time until an expiry compactly', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(timeLeft('2026-01-01T00:00:42Z', now)).toBe('42s');
    expect(timeLeft('2026-01-01T00:05:07Z', now)).toBe('5m07s');
    expect(timeLeft('2026-01-01T02:03:00Z', now)).toBe('2h03m');
    expect(timeLeft('2026-01-03T05:00:00Z', now)).toBe('2d05h');
    expect(timeLeft('2025-12-31T23:00:00Z', now)).toBe('expired');
  });
});

describe('warren --help', () => {
  const program = buildProgram();
  const commands = (cmd: Command): Command[] => cmd.commands.flatMap((c) => [c, ...commands(c)]);
  const help = (cmd: Command): string => {
    let text = '';
    cmd.configureOutput({ writeOut: (s) => (text += s), writeErr: (s) => (text += s) });
    cmd.outputHelp();
    return text;
  };

  it("prints the package's own version, so a published release reports what was installed", () => {
    const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };
    expect(CLI_VERSION).toBe(version);
    expect(program.version()).toBe(version);
  });

  it('lists every command the issue names, with the global options and examples', () => {
    const text = help(program);
    for (const name of ['serve', 'create', 'ls', 'info', 'exec', 'run', 'shell', 'cp', 'rm', 'logs', 'images', 'mcp'])
      expect(text).toMatch(new RegExp(`^  ${name}\\b`, 'm'));
    expect(text).toContain('--url <url>');
    expect(text).toContain('--api-key <key>');
    expect(text).toContain('Examples:');
  });

  it.each(commands(program).map((c) => [c.name(), c] as const))('warren %s --help has a description and examples', (_name, cmd) => {
    const text = help(cmd);
    expect(cmd.description().length).toBeGreaterThan(20);
    if (cmd.commands.length === 0) expect(text).toContain('Examples:');
  });

  it('takes --json on every listing', () => {
    const byName = Object.fromEntries(commands(program).map((c) => [`${c.parent?.name()} ${c.name()}`, c]));
    for (const name of ['warren create', 'warren ls', 'warren info', 'warren rm', 'warren logs', 'warren cp', 'images ls', 'own ls']) {
      expect(byName[name]!.options.map((o) => o.long)).toContain('--json');
    }
  });

  it('shows how to register warren mcp with an MCP client', () => {
    const mcp = program.commands.find((c) => c.name() === 'mcp')!;
    const text = help(mcp);
    expect(text).toContain('"mcpServers"');
    const json = text.slice(text.indexOf('{'), text.lastIndexOf('}') + 1);
    expect(JSON.parse(json)).toEqual({
      mcpServers: {
        warren: { command: 'warren', args: ['mcp', '--toolset', 'codin'], env: { WARREN_URL: 'http://127.0.0.1:7420', WARREN_API_KEY: 'wk_...' } },
      },
    });
    for (const toolset of ['codin', 'filesystem', 'toolsmith', 'partial_read', 'builtin']) expect(text).toContain(toolset);
  });
});

describe('warren run', () => {
  it('takes the language from --lang, else from the file suffix, else python, and refuses an unknown one', () => {
    expect(languageOf('a.ts', undefined)).toBe('typescript');
    expect(languageOf('a.mjs', undefined)).toBe('javascript');
    expect(languageOf('-', undefined)).toBe('python');
    expect(languageOf('a.py', 'javascript')).toBe('javascript');
    expect(() => languageOf('a.rb', 'ruby')).toThrow(
      expect.objectContaining({ message: "Unknown language 'ruby'.", suggestion: expect.stringContaining('--lang python') }),
    );
  });
});

describe('exit codes', () => {
  let stderr: string;
  beforeEach(() => {
    stderr = '';
    jest.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => ((stderr += String(chunk)), true));
    jest.spyOn(process.stdout, 'write').mockImplementation(() => true);
  });
  afterEach(() => {
    jest.restoreAllMocks();
  });

  /** The exit code `warren ARGS` ends with (main.ts exits with the error's `exitCode`), or 0. */
  async function exitCodeOfRun(args: string[]): Promise<number> {
    try {
      await buildProgram().parseAsync(['node', 'warren', ...args]);
      return 0;
    } catch (err) {
      return (err as { exitCode: number }).exitCode;
    }
  }

  it.each([
    ['an unknown command', ['frobnicate']],
    ['an unknown subcommand', ['snapshot', 'frobnicate']],
    ['an unknown option', ['ls', '--frobnicate']],
    ['a missing argument', ['info']],
    ['a missing option value', ['create', '--ttl']],
    ['a malformed option value', ['create', '--ttl', 'soon']],
    ['a value outside the choices', ['ls', '--state', 'sleepy']],
    ['a missing required option', ['fork', 'sb1']],
    ['a group without its subcommand', ['network']],
  ])('exits 2 on %s, with the one-line reason', async (_what, args) => {
    expect(await exitCodeOfRun(args)).toBe(2);
    expect(stderr).toMatch(/^warren: .*\(run warren --help, or warren COMMAND --help, for the options\)\n$|^Usage: warren/m);
  });

  it('says a usage error in one line, the suggestion of a near name included', async () => {
    expect(await exitCodeOfRun(['frok'])).toBe(2);
    expect(stderr).toBe("warren: unknown command 'frok' (Did you mean fork?) (run warren --help, or warren COMMAND --help, for the options)\n");
  });

  it('exits 2 on arguments the command refuses after parsing (both sides of cp local, an unknown --lang)', async () => {
    expect(await exitCodeOfRun(['cp', './a', './b'])).toBe(2);
    await expect(buildProgram().parseAsync(['node', 'warren', 'run', 'sb1', 'x.rb', '--lang', 'ruby'])).rejects.toMatchObject({
      name: 'CliError',
      exitCode: 2,
    });
  });

  it('keeps 1 for a command that ran and failed, and 0 for --help and --version', async () => {
    expect(await exitCodeOfRun(['cp', '/no/such/file/anywhere', 'sb1:/workspace/x'])).toBe(1);
    expect(await exitCodeOfRun(['--version'])).toBe(0);
    expect(await exitCodeOfRun(['--help'])).toBe(0);
    expect(await exitCodeOfRun(['snapshot', '--help'])).toBe(0);
  });

  it('throws commander errors rather than exiting, so main.ts sets the code', async () => {
    await expect(buildProgram().parseAsync(['node', 'warren', 'info'])).rejects.toBeInstanceOf(CommanderError);
  });
});

describe('warren images: one tree', () => {
  const program = buildProgram();
  const images = program.commands.find((c) => c.name() === 'images')!;

  it("holds the controller's image commands and Warren's own images under one name", () => {
    expect(images.commands.map((c) => c.name()).sort()).toEqual(['build', 'ls', 'own', 'pull', 'rm']);
    const own = images.commands.find((c) => c.name() === 'own')!;
    expect(own.commands.map((c) => c.name()).sort()).toEqual(['build', 'ls']);
  });

  it('keeps warren image as a hidden, deprecated name with the same subcommands', () => {
    const image = program.commands.find((c) => c.name() === 'image')!;
    expect(image.commands.map((c) => c.name()).sort()).toEqual(['build', 'ls', 'pull', 'rm']);
    let help = '';
    program.configureOutput({ writeOut: (t) => (help += t) });
    program.outputHelp();
    expect(help).not.toMatch(/^ {2}image\b/m);
    expect(help).toMatch(/^ {2}images\b/m);
  });

  it('prints one deprecation line on stderr for warren image, and then runs the command', async () => {
    let stderr = '';
    const err = jest.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => ((stderr += String(chunk)), true));
    const out = jest.spyOn(process.stdout, 'write').mockImplementation(() => true);
    try {
      await expect(buildProgram().parseAsync(['node', 'warren', 'image', 'rm', '--help'])).rejects.toMatchObject({ exitCode: 0 });
    } finally {
      err.mockRestore();
      out.mockRestore();
    }
    expect(stderr).toBe("warren: 'warren image' is deprecated and goes away in the next minor version; use 'warren images rm'.\n");
  });
});

describe('warren mcp: the flags of python3 -m warren.mcp', () => {
  const mcp = buildProgram().commands.find((c) => c.name() === 'mcp')!;
  const longFlags = mcp.options.map((o) => o.long!).sort();

  it('takes --toolset (builtin by default), --sandbox with --token, or --image, --ttl, --label for one it creates', () => {
    expect(longFlags).toEqual(['--api-key', '--image', '--label', '--sandbox', '--token', '--toolset', '--ttl', '--url']);
    expect(mcp.options.find((o) => o.long === '--toolset')!.defaultValue).toBe('builtin');
  });

  it('refuses flags that contradict each other, with exit code 2', () => {
    expect(() => checkMcpOptions({ toolset: 'codin', token: 't' })).toThrow(
      expect.objectContaining({ exitCode: 2, message: expect.stringMatching(/--token needs --sandbox/) }),
    );
    expect(() => checkMcpOptions({ toolset: 'codin', sandbox: 'sb1', ttl: 60 })).toThrow(expect.objectContaining({ exitCode: 2 }));
    expect(() => checkMcpOptions({ toolset: 'codin', sandbox: 'sb1', token: 't' })).not.toThrow();
    expect(() => checkMcpOptions({ toolset: 'codin', image: 'alpine', ttl: 60, label: { a: 'b' } })).not.toThrow();
  });

  // The Python server's flags, read from its argparse parser where Python and the SDK's dependencies are installed.
  const sdkPython = fileURLToPath(new URL('../../sdk-python', import.meta.url));
  const readPythonFlags = (exe: string) =>
    spawnSync(
      exe,
      [
        '-c',
        'import argparse, json; from warren.mcp import parser, TOOL_SETS, DEFAULT_TOOL_SET; ' +
          'print(json.dumps({"flags": sorted(f for a in parser()._actions if a.help != argparse.SUPPRESS for f in a.option_strings if f.startswith("--") and f != "--help"), "toolsets": list(TOOL_SETS), "default": DEFAULT_TOOL_SET}))',
      ],
      { cwd: sdkPython, encoding: 'utf8' },
    );
  // The first Python that has the SDK's dependencies (Debian's, where a pyenv python3 lacks them).
  const python = ['python3', '/usr/bin/python3'].map(readPythonFlags).find((run) => run.status === 0) ?? { status: 1, stdout: '' };
  (python.status === 0 ? it : it.skip)('match the Python server flag for flag, with the same tool set names and default', () => {
    const py = JSON.parse(python.stdout) as { flags: string[]; toolsets: string[]; default: string };
    expect(py.flags).toEqual(longFlags);
    expect(py.toolsets).toEqual(mcp.options.find((o) => o.long === '--toolset')!.argChoices);
    expect(py.default).toBe(mcp.options.find((o) => o.long === '--toolset')!.defaultValue);
  });
});
