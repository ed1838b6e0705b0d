import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { CodedError, type CodeLanguage } from '@warren/protocol';

/**
 * Where the runtimes' programs are: `runtimes/` beside the daemon's bundle (build.mjs copies them
 * there, and the controller puts them in the runtime volume beside it), or `../runtimes/` from this
 * module in a checkout (`src/runtimes` for the sources, `dist/runtimes` for tsc's output).
 */
const PROGRAMS_DIR = typeof WARREN_AGENT_BUNDLE === 'undefined' ? fileURLToPath(new URL('../runtimes/', import.meta.url)) : path.join(__dirname, 'runtimes');

/** Set to `true` by build.mjs in the daemon's bundle, which is CommonJS (no `import.meta`). */
declare const WARREN_AGENT_BUNDLE: true | undefined;

const programs = new Map<string, string>();

/**
 * The text of one of the runtimes' programs, read once. A context's child gets it as `-c`/`-e`
 * text, so it runs exactly as it did when it lived in a string here (run by path, Python's
 * `sys.argv[0]` and Node's global scope would differ), and the sandbox user needs no access to the
 * runtime's files.
 *
 * - `python-bridge.py`: the Python side of a code context, a bridge that starts a real Jupyter
 *   kernel (ipykernel, through jupyter_client's KernelManager) and speaks JSON lines over its
 *   stdin and stdout. It runs as the sandbox user, like the kernel it starts, so the daemon never
 *   runs sandbox code. It applies the first caps (a stream message over 1 MiB keeps its head and
 *   tail, a display value over 4 MiB is left out, ZeroMQ refuses a message over 64 MiB before it
 *   is read) so a giant output costs the sandbox's memory, not the daemon's; the daemon checks and
 *   caps everything again.
 * - `node-repl.cjs`: the JavaScript side, a Node process that runs each cell with
 *   `vm.Script.runInThisContext`, so declarations persist between cells of one context (one
 *   process per context), answers the last expression's value (awaited when it is a promise) and
 *   stops a running cell on SIGINT (`breakOnSigint`).
 *
 * - `python-charts.py`: given to the bridge as its argument and run in each Python kernel at its
 *   start: display formats with a matplotlib figure's chart data and a DataFrame's columns
 *   (ported from E2B's e2b_charts, Apache-2.0), which the E2B gateway passes on as
 *   `@e2b/code-interpreter`'s `chart` and `data`.
 *
 * Both speak the same JSON lines. In: `{"op":"run","id","code"}`, `{"op":"interrupt"}`. Out:
 * `ready`, `fatal`, `stream`, `display`, `error`, `done`, `died` (see `BridgeMessage` in
 * code-kernel.ts).
 *
 * @example
 * runtimeProgram('python-bridge.py').startsWith('"""'); // true
 */
export function runtimeProgram(name: 'python-bridge.py' | 'python-charts.py' | 'node-repl.cjs'): string {
  let text = programs.get(name);
  if (text === undefined) {
    const file = path.join(PROGRAMS_DIR, name);
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      throw new CodedError(
        'INTERNAL',
        `The code interpreter's program ${file} could not be read (${(err as Error).message}); the daemon's runtime is incomplete: rebuild it ('pnpm build').`,
      );
    }
    programs.set(name, text);
  }
  return text;
}

/**
 * The command that starts Node inside the sandbox: the daemon's own runtime. In a container the
 * daemon runs through the runtime's loader (`/opt/warren/ld-linux.so --library-path ... node`), so
 * its `execPath` is the loader and the same prefix is needed.
 *
 * @example
 * nodeCommand('/opt/warren/ld-linux.so'); // ['/opt/warren/ld-linux.so', '--library-path', '/opt/warren/lib', '/opt/warren/node']
 */
export function nodeCommand(execPath = process.execPath): string[] {
  if (!path.basename(execPath).startsWith('ld-linux')) return [execPath];
  const dir = path.dirname(execPath);
  return [execPath, '--library-path', path.join(dir, 'lib'), path.join(dir, 'node')];
}

/** The argv of a context's child: the Python bridge, or the Node REPL for JavaScript and TypeScript. */
export function runtimeCommand(language: CodeLanguage): string[] {
  // -I: the bridge's imports come from the system, not from files in the working folder.
  // Its argument: the chart and table display formats the kernel loads at its start (python-charts.py).
  if (language === 'python') return ['python3', '-I', '-c', runtimeProgram('python-bridge.py'), runtimeProgram('python-charts.py')];
  return [...nodeCommand(), '-e', runtimeProgram('node-repl.cjs')];
}
