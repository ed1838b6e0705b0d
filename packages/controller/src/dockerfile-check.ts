import { CodedError } from '@warren/protocol';

/**
 * Reads a Dockerfile for what a build could fetch from outside its context, before the engine
 * sees it. Pure, so unit tests pin it.
 *
 * The engine's classic builder (Docker 20.10, the only builder Warren asks for) fetches in three
 * places: the images of `FROM` and `COPY --from=` (pulled from their registry when missing), `ADD`
 * of an `http://` or `https://` source (fetched by the engine itself, on the host's network,
 * whatever the build's network is), and the `ONBUILD` triggers that a `FROM` fires, which can do
 * either. `RUN` steps fetch only through the build's network (`images.buildNetwork`).
 *
 * The check does not try to be Docker's parser. It splits the file into instructions the way the
 * engine does (its line continuation, comment and whitespace rules, which are small), then refuses
 * whatever it cannot read with certainty: parser directives (`# escape=` changes how every line
 * splits, `# syntax=` names a frontend image), flags spelled with quotes, escapes or non-ASCII
 * characters (the engine splits flags byte by byte), flags the classic builder does not know, an
 * `ADD` source holding any character that variable expansion, quoting or escapes could turn into a
 * URL (`$`, `\`, quotes, backticks) or a `:` (every URL and `git@` form has one), and `ONBUILD`
 * triggers whose text expansion would change. What is left can name only context files and the
 * images the caller checks.
 */

/** What a Dockerfile needs from outside its context. */
export interface DockerfileNeeds {
  /** Image references the build starts from or copies from, in the order they appear (no stage names, no `scratch`). */
  images: string[];
  /** The images among those that a `FROM` starts from: their `ONBUILD` triggers run in this build ({@link checkOnBuildTriggers}). */
  bases: string[];
}

/** One instruction as the engine's parser splits it. */
interface Instruction {
  /** The keyword, lower case. */
  keyword: string;
  /** The builder flags before the arguments (`--from=x`), as written. */
  flags: string[];
  /** The arguments after the flags, trimmed. */
  args: string;
  /** The whole logical line (continuations joined), for messages and `ONBUILD`. */
  text: string;
  /** The line of the file it starts on, from 1. */
  line: number;
}

/** What an instruction is checked as: a line of the Dockerfile, or an `ONBUILD` trigger (of the file or of a base image). */
type Place = { kind: 'dockerfile' } | { kind: 'trigger'; of: string; image?: string | undefined };

// Go's unicode.IsSpace, which the engine's parser trims lines with.
const GO_SPACE = '\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';
const IS_GO_SPACE = new RegExp(`^[${GO_SPACE}]$`);
/** The separator of a keyword and of whitespace-delimited arguments (the parser's `[\t\v\f\r ]+`). */
const TOKEN_SPACE = /[\t\v\f\r ]+/;
/** Bytes the engine's flag reader takes for spaces among ASCII (it also takes the bytes 0x85 and 0xA0 inside any UTF-8 character). */
const FLAG_SPACES = /[\t\n\v\f\r ]*/y;
const FLAG_WORD = /[^\t\n\v\f\r ]*/y;
/** A line continuation with the default escape character (the only one Warren reads). */
const CONTINUATION = /\\[ \t]*$/;
/**
 * A parser directive, in a wider form than the engine's (any position, any whitespace, a byte
 * order mark): a line it would take for one is always refused.
 */
const DIRECTIVE = new RegExp(`^[${GO_SPACE}\\ufeff]*#[${GO_SPACE}\\ufeff]*(escape|syntax)[${GO_SPACE}\\ufeff]*=`, 'i');
/** Characters that variable expansion, quoting or escapes act on: a word without them means what it says. */
const EXPANDS = /[$\\'"`]/;

/** The instructions of the classic builder, with the flags each takes (`null`: any value, else the values allowed). */
const KEYWORDS: Record<string, Record<string, readonly string[] | null>> = {
  add: { chown: null, chmod: null },
  arg: {},
  cmd: {},
  copy: { from: null, chown: null, chmod: null },
  entrypoint: {},
  env: {},
  expose: {},
  from: { platform: ['linux/amd64'] },
  healthcheck: { interval: null, timeout: null, 'start-period': null, retries: null },
  label: {},
  maintainer: {},
  onbuild: {},
  run: {},
  shell: {},
  stopsignal: {},
  user: {},
  volume: {},
  workdir: {},
};

/** Trims Go's spaces by index (a pattern anchored at the end would be quadratic on a long run of spaces). */
function trimGo(s: string, end = true): string {
  let from = 0;
  let to = s.length;
  while (from < to && IS_GO_SPACE.test(s[from]!)) from++;
  while (end && to > from && IS_GO_SPACE.test(s[to - 1]!)) to--;
  return s.slice(from, to);
}
const trimStartGo = (s: string) => trimGo(s, false);
/** Own keys only, so `constructor` or `toString` is never taken for an instruction or a flag. */
const own = <T>(table: Record<string, T>, key: string): T | undefined => (Object.hasOwn(table, key) ? table[key] : undefined);
const clip = (s: string) => s.slice(0, 200);

function refuse(at: Instruction | { text: string; line: number }, why: string, place: Place = { kind: 'dockerfile' }, noun = 'instruction'): CodedError {
  const where =
    place.kind === 'trigger' ? `The ONBUILD trigger '${clip(at.text)}' of ${place.of}` : `The Dockerfile ${noun} '${clip(at.text)}' (line ${at.line})`;
  return new CodedError('INVALID_PARAMS', `${where} is refused: ${why}.`, {
    instruction: clip(at.text),
    ...(place.kind === 'dockerfile' ? { line: at.line } : place.image !== undefined ? { image: place.image } : { line: at.line }),
  });
}

/** The text of a Dockerfile: UTF-8 only (anything else could be read two ways). */
function decode(text: string | Uint8Array): string {
  if (typeof text === 'string') return text;
  try {
    return new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(text);
  } catch {
    throw new CodedError('INVALID_PARAMS', 'The Dockerfile is not UTF-8 text; save it as UTF-8.');
  }
}

/**
 * The logical lines of a Dockerfile as the engine's parser joins them (default escape `\`):
 * comment lines and blank lines inside a continuation are skipped, a continuation is joined with
 * nothing between, and leading whitespace is dropped from first lines only. Parser directives are
 * refused first, wherever they are.
 */
function logicalLines(text: string, place: Place): { text: string; line: number }[] {
  const physical = text.split('\n').map((l) => (l.endsWith('\r') ? l.slice(0, -1) : l));
  if (physical[0]?.startsWith('\ufeff')) physical[0] = physical[0].slice(1);
  physical.forEach((raw, i) => {
    const directive = DIRECTIVE.exec(raw);
    if (directive)
      throw refuse(
        { text: raw, line: i + 1 },
        directive[1]!.toLowerCase() === 'escape'
          ? 'the escape directive changes how every line is read; remove it (Warren reads Dockerfiles with the default escape character, a backslash)'
          : "Warren builds with the engine's classic builder, which loads no frontend image; remove the syntax line (and the BuildKit-only features it would enable)",
        place,
        'parser directive',
      );
  });
  const out: { text: string; line: number }[] = [];
  let i = 0;
  while (i < physical.length) {
    const start = i + 1;
    const first = trimStartGo(physical[i++]!);
    let line = first.startsWith('#') ? '' : first;
    let ended = !CONTINUATION.test(line);
    line = line.replace(CONTINUATION, '');
    if (ended && line === '') continue;
    while (!ended && i < physical.length) {
      const raw = physical[i++]!;
      if (trimStartGo(raw).startsWith('#') || trimStartGo(raw) === '') continue;
      ended = !CONTINUATION.test(raw);
      line += raw.replace(CONTINUATION, '');
    }
    out.push({ text: line, line: start });
  }
  return out;
}

/** Splits a logical line into keyword, flags and arguments, refusing what the engine could split otherwise. */
function parseInstruction(at: { text: string; line: number }, place: Place): Instruction {
  const trimmed = trimGo(at.text);
  const split = TOKEN_SPACE.exec(trimmed);
  const keyword = split ? trimmed.slice(0, split.index) : trimmed;
  const rest = split ? trimmed.slice(split.index + split[0].length) : '';
  const instruction: Instruction = { keyword: keyword.toLowerCase(), flags: [], args: '', text: trimmed, line: at.line };
  const allowed = /^[A-Za-z]+$/.test(keyword) ? own(KEYWORDS, instruction.keyword) : undefined;
  if (allowed === undefined) throw refuse(instruction, `'${clip(keyword)}' is not an instruction of the engine's classic builder`, place);
  let next = 0;
  for (;;) {
    FLAG_SPACES.lastIndex = next;
    FLAG_SPACES.exec(rest);
    next = FLAG_SPACES.lastIndex;
    if (!rest.startsWith('--', next)) break;
    FLAG_WORD.lastIndex = next;
    const word = FLAG_WORD.exec(rest)![0];
    if (!/^[\x21-\x7e]*$/.test(word) || /['"\\]/.test(word))
      throw refuse(
        instruction,
        `the flag '${clip(word)}' has quotes, a backslash or characters outside printable ASCII; write flags plainly (--name=value)`,
        place,
      );
    instruction.flags.push(word);
    next += word.length;
  }
  instruction.args = trimGo(rest.slice(next));
  for (const flag of instruction.flags) {
    const match = /^--([a-z][a-z-]*)=(.*)$/.exec(flag);
    if (!match && own(allowed, flag.slice(2)) !== undefined)
      throw refuse(instruction, `write the flag's value after an equals sign (${flag}=<value>), as the engine's classic builder reads it`, place);
    const values = match ? own(allowed, match[1]!) : undefined;
    if (!match || values === undefined) {
      const known = Object.keys(allowed).map((f) => `--${f}=`);
      throw refuse(
        instruction,
        `the flag '${clip(flag)}' is not one the engine's classic builder takes on ${keyword.toUpperCase()} (${known.length > 0 ? `it takes ${known.join(', ')}` : 'it takes none'})`,
        place,
      );
    }
    if (values !== null && !values.includes(match[2]!))
      throw refuse(instruction, `--${match[1]} may only be ${values.join(' or ')} (the build pulls nothing the check did not)`, place);
  }
  return instruction;
}

/** The value of a flag, if the instruction has it. */
function flag(instruction: Instruction, name: string): string | undefined {
  const prefix = `--${name}=`;
  return instruction.flags.find((f) => f.startsWith(prefix))?.slice(prefix.length);
}

/** `ADD` sources that can only be context paths: no URL, no git, nothing expansion could turn into one. */
function checkAdd(instruction: Instruction, place: Place): void {
  let words: string[] | undefined;
  if (instruction.args.startsWith('[')) {
    try {
      const parsed: unknown = JSON.parse(instruction.args);
      if (Array.isArray(parsed) && parsed.every((w) => typeof w === 'string')) words = parsed;
    } catch {
      // Not JSON: the engine reads it as words, as below.
    }
  }
  words ??= instruction.args === '' ? [] : instruction.args.split(TOKEN_SPACE);
  if (words.length < 2) throw refuse(instruction, 'ADD takes one or more sources and a destination', place);
  for (const source of words.slice(0, -1)) {
    if (EXPANDS.test(source) || source.includes(':'))
      throw refuse(
        instruction,
        `its source '${clip(source)}' is not a plain path in the context (no ':', '$', '\\', quotes or backticks): ` +
          'the engine itself fetches URLs and git sources, from the host, so ADD takes only files of the context; put the file in the context, or download it in a RUN step',
        place,
      );
  }
}

/** Checks one instruction's own rules (not `FROM`, which needs the stage list). */
function checkInstruction(instruction: Instruction, place: Place): void {
  if (instruction.keyword === 'run' && instruction.flags.length > 0) throw refuse(instruction, 'RUN takes no flags with the classic builder', place);
  if (instruction.keyword === 'add') checkAdd(instruction, place);
  if (place.kind === 'trigger') {
    if (['from', 'onbuild', 'maintainer'].includes(instruction.keyword))
      throw refuse(instruction, `${instruction.keyword.toUpperCase()} cannot be an ONBUILD trigger`, place);
    if (flag(instruction, 'from') !== undefined)
      throw refuse(instruction, 'an ONBUILD trigger may not copy from another image or stage; copy in the Dockerfile that uses it', place);
  }
}

/**
 * One `ONBUILD` trigger as the engine stores and later runs it: its text is parsed as a file of
 * its own and must be one instruction.
 */
function checkTrigger(text: string, place: Place & { kind: 'trigger' }, line = 1): void {
  const lines = logicalLines(text, place);
  if (lines.length !== 1) throw refuse({ text, line }, 'a trigger is one instruction', place);
  checkInstruction(parseInstruction({ text: lines[0]!.text, line }, place), place);
}

/**
 * The images a Dockerfile builds from, and a refusal (`INVALID_PARAMS`, naming the instruction
 * and its line) of anything that would make the engine fetch what was not checked: parser
 * directives, variable or quoted images, `ADD` of anything but context files, unknown instructions
 * and flags, `FROM --platform` other than linux/amd64, and `ONBUILD` triggers that break the same
 * rules (a later `FROM` of their stage runs them in this build). Takes the file's bytes (refused
 * unless UTF-8) or its text.
 *
 * @example
 * dockerfileNeeds('FROM alpine:3.20 AS base\nFROM base\nCOPY --from=busybox /bin/sh /sh').images; // ['alpine:3.20', 'busybox']
 */
export function dockerfileNeeds(text: string | Uint8Array): DockerfileNeeds {
  const place: Place = { kind: 'dockerfile' };
  const stages = new Set<string>();
  const images: string[] = [];
  const bases: string[] = [];
  const need = (instruction: Instruction, image: string, base: boolean) => {
    if (EXPANDS.test(image))
      throw refuse(
        instruction,
        `its image '${clip(image)}' has a variable, quotes or escapes; name the image itself so it can be checked before the build`,
        place,
      );
    const lower = image.toLowerCase();
    if (lower === 'scratch' || stages.has(lower)) return;
    // `--from=<n>` is a stage by number; the engine never pulls it (a FROM has no such form).
    if (!base && /^\d{1,9}$/.test(image)) return;
    if (!images.includes(image)) images.push(image);
    if (base && !bases.includes(image)) bases.push(image);
  };
  let sawFrom = false;
  let stage: string | undefined;
  for (const at of logicalLines(decode(text), place)) {
    const instruction = parseInstruction(at, place);
    const word = instruction.keyword;
    if (word === 'from') {
      const args = instruction.args === '' ? [] : instruction.args.split(TOKEN_SPACE);
      if (args.length !== 1 && !(args.length === 3 && args[1]!.toLowerCase() === 'as'))
        throw refuse(instruction, 'FROM takes an image, optionally followed by AS <stage name>', place);
      // The engine knows a stage by name once it is finished: inside its own stage the name is an image.
      if (stage !== undefined) stages.add(stage);
      need(instruction, args[0]!, true);
      stage = args.length === 3 ? args[2]!.toLowerCase() : undefined;
      sawFrom = true;
      continue;
    }
    if (!sawFrom && word !== 'arg') throw refuse(instruction, 'a Dockerfile starts with FROM (only ARG may come before it)', place);
    const from = flag(instruction, 'from');
    if (from !== undefined) need(instruction, from, false);
    checkInstruction(instruction, place);
    if (word === 'onbuild') {
      // The engine stores the trigger after variable expansion and runs it when a FROM names this
      // stage or image: only a text that expansion leaves as it is can be checked now.
      const expression = instruction.text.replace(/^[\t\n\f\r ]*onbuild[\t\n\f\r ]*/i, '');
      if (EXPANDS.test(expression))
        throw refuse(
          instruction,
          'an ONBUILD trigger is stored after variable expansion, so it may not hold $, backslashes, quotes or backticks; write the trigger plainly',
          place,
        );
      checkTrigger(expression, { kind: 'trigger', of: `this Dockerfile (line ${instruction.line})` }, instruction.line);
    }
  }
  if (!sawFrom) throw new CodedError('INVALID_PARAMS', 'The Dockerfile has no FROM instruction; start it with FROM <image>.');
  return { images, bases };
}

/**
 * Checks the `ONBUILD` triggers of a base image (its `Config.OnBuild`), which the engine parses
 * and runs in a build whose `FROM` names it: each must be one instruction that passes the same
 * rules as the Dockerfile, and none may name another image. Throws `INVALID_PARAMS` naming the
 * image and the trigger.
 *
 * @example
 * checkOnBuildTriggers('base:1', ['COPY . /app', 'RUN make']); // passes
 * checkOnBuildTriggers('base:1', ['ADD http://example.com/x /x']); // throws INVALID_PARAMS
 */
export function checkOnBuildTriggers(image: string, triggers: readonly string[]): void {
  for (const trigger of triggers) checkTrigger(trigger, { kind: 'trigger', of: `the base image ${image}`, image });
}
