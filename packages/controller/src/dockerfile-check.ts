import { CodedError } from '@warren/protocol';

/**
 * Reads a Dockerfile for what a build would fetch from outside its context, before the engine
 * sees it: the images named by `FROM` and by `--from=` on `COPY` / `RUN --mount`, and remote
 * sources of `ADD`. Pure, so a unit test can pin it. The engine's classic builder runs the file;
 * its parser directives (`# syntax=`) are not followed.
 */

/** What a Dockerfile needs from outside its context. */
export interface DockerfileNeeds {
  /** Image references the build starts from or copies from, in the order they appear (no stage names, no `scratch`). */
  images: string[];
}

/** Splits a Dockerfile into instructions: comments dropped, `\` continuations joined. */
function instructions(text: string): string[] {
  const out: string[] = [];
  let current = '';
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (current === '' && (line === '' || line.startsWith('#'))) continue;
    if (line.startsWith('#')) continue;
    if (line.endsWith('\\')) {
      current += `${line.slice(0, -1)} `;
      continue;
    }
    out.push(current + line);
    current = '';
  }
  if (current.trim() !== '') out.push(current.trim());
  return out;
}

function refuse(instruction: string, why: string): CodedError {
  return new CodedError('INVALID_PARAMS', `The Dockerfile instruction '${instruction.slice(0, 200)}' is refused: ${why}.`, {
    instruction: instruction.slice(0, 200),
  });
}

/**
 * The images a Dockerfile builds from, and a refusal (`INVALID_PARAMS`) of what Warren does not
 * build: a `FROM` or `--from=` with a variable (`${BASE}`: the image must be known before the
 * build), and `ADD` of a URL or git repository (the engine itself would fetch it, from the host's
 * network, whatever the build's network is).
 *
 * @example
 * dockerfileNeeds('FROM alpine:3.20 AS base\nFROM base\nCOPY --from=busybox /bin/sh /sh').images; // ['alpine:3.20', 'busybox']
 */
export function dockerfileNeeds(text: string): DockerfileNeeds {
  const stages = new Set<string>();
  const images: string[] = [];
  const need = (instruction: string, image: string) => {
    if (image.includes('$')) throw refuse(instruction, 'its image is a variable; name the image itself so it can be checked before the build');
    const lower = image.toLowerCase();
    if (lower === 'scratch' || stages.has(lower) || /^\d+$/.test(image)) return;
    if (!images.includes(image)) images.push(image);
  };
  let sawFrom = false;
  for (const instruction of instructions(text)) {
    const [keyword = '', ...args] = instruction.split(/\s+/);
    const word = keyword.toUpperCase();
    if (word === 'FROM') {
      const rest = args.filter((a) => !a.startsWith('--'));
      const image = rest[0];
      if (image === undefined) throw refuse(instruction, 'it names no image');
      need(instruction, image);
      if (rest.length >= 3 && rest[1]?.toUpperCase() === 'AS') stages.add(rest[2]!.toLowerCase());
      sawFrom = true;
      continue;
    }
    if (!sawFrom && word !== 'ARG') throw refuse(instruction, 'a Dockerfile starts with FROM (only ARG may come before it)');
    for (const arg of args) {
      if (!arg.startsWith('--')) break;
      const from = /^--from=(.+)$/.exec(arg)?.[1];
      if (from !== undefined && (word === 'COPY' || word === 'ADD')) need(instruction, from);
      if (arg.startsWith('--mount=') && word === 'RUN') {
        const mountFrom = /(?:^|,)from=([^,]+)/.exec(arg.slice('--mount='.length))?.[1];
        if (mountFrom !== undefined) need(instruction, mountFrom);
      }
    }
    if (word === 'ADD') {
      const sources = args.filter((a) => !a.startsWith('--')).slice(0, -1);
      const jsonForm = /^\s*\[/.test(args.join(' '));
      const remote = (s: string) => /^[a-z][a-z0-9+.-]*:\/\//i.test(s) || /^git@/i.test(s) || /\.git(?:#.*)?$/i.test(s);
      if (jsonForm ? /"[a-z][a-z0-9+.-]*:\/\//i.test(args.join(' ')) : sources.some(remote))
        throw refuse(
          instruction,
          'ADD of a URL or git repository is fetched by the engine from the host; put the file in the context, or download it in a RUN step',
        );
    }
  }
  if (!sawFrom) throw new CodedError('INVALID_PARAMS', 'The Dockerfile has no FROM instruction; start it with FROM <image>.');
  return { images };
}
