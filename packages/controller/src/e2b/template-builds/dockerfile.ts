import path from 'node:path';
import { z } from 'zod';
import { E2bHttpError } from '../errors.js';

/** One step of E2B's template build (`TemplateStep`): `RUN`, `COPY`, `ENV`, `WORKDIR` or `USER` with its arguments. */
export const TemplateStep = z.looseObject({
  type: z.string().min(1).max(32),
  args: z
    .array(z.string().max(64 * 1024))
    .max(256)
    .default([]),
  filesHash: z.string().max(128).optional(),
  force: z.boolean().optional(),
});
export type TemplateStep = z.infer<typeof TemplateStep>;

/** The body of `POST /v2/templates/{id}/builds/{buildID}` (`TemplateBuildStartV2`), as the SDK's `Template.build` sends it. */
export const TemplateBuildStart = z.looseObject({
  fromImage: z.string().min(1).max(512).optional(),
  fromTemplate: z.string().min(1).max(256).optional(),
  fromImageRegistry: z.unknown().optional(),
  force: z.boolean().optional(),
  steps: z.array(TemplateStep).max(512).default([]),
  startCmd: z
    .string()
    .max(64 * 1024)
    .nullish(),
  readyCmd: z
    .string()
    .max(64 * 1024)
    .nullish(),
});
export type TemplateBuildStart = z.infer<typeof TemplateBuildStart>;

/** The image a build starts from, and the user its steps start as. */
export interface TemplateBase {
  image: string;
  user: string;
}

/** A generated Dockerfile and, for each of its instructions in order, the E2B step it came from (`base` or the step's 1-based number). */
export interface TemplateDockerfile {
  text: string;
  /** `steps[i]` is the E2B step of the Dockerfile's instruction i+1 (the engine's "Step i+1/n"). */
  steps: string[];
  /** The context folder each COPY step's files are unpacked into, by files hash. */
  copies: string[];
  /** What the build should tell its caller before it starts (files copied where a quota disk will hide them). */
  warnings: string[];
}

/** The home E2B programs use; a sandbox's own disk is mounted over it. */
const HOME = '/home/user';

/** Where the files of a COPY step with this hash sit in the build context. */
export function filesFolder(hash: string): string {
  return `files-${hash}`;
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,255}$/;
const USER = /^(?:[a-z_][a-z0-9_-]{0,31}|\d{1,10})(?::(?:[a-z_][a-z0-9_-]{0,31}|\d{1,10}))?$/;
const FILES_HASH = /^[a-f0-9]{64}$/;
// eslint-disable-next-line no-control-regex
const CONTROL = /[\x00-\x1f\x7f]/;

function refuse(step: number, what: string): E2bHttpError {
  return new E2bHttpError(400, `Template step ${step}: ${what}`);
}

function checkUser(step: number, user: string): string {
  if (!USER.test(user))
    throw refuse(
      step,
      `the user '${user.slice(0, 64)}' is not a user name or uid (letters, digits, _ and -, optionally :group), as setUser and the user option take.`,
    );
  return user;
}

/** A Dockerfile double-quoted word: the engine reads backslash escapes inside quotes; `$` still expands, as in a Dockerfile. */
function quoted(text: string): string {
  return `"${text.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
}

/**
 * E2B's template steps as a Dockerfile for Warren's builder (docs/e2b.md#templates). `RUN` runs
 * its command with `/bin/sh -c` in JSON form, as the given user when the step names one (and the
 * earlier user again after it); `COPY` copies from the files the SDK uploaded for its hash,
 * unpacked into {@link filesFolder}; `ENV`, `WORKDIR` and `USER` map one to one. What has no
 * equivalent is refused with E2B's 400 naming the step, never dropped.
 *
 * @example
 * dockerfileFor({ steps: [{ type: 'RUN', args: ['echo hi > /opt/hi'] }] }, { image: 'warren/e2b-base:latest', user: 'user' }).text;
 * // FROM warren/e2b-base:latest\nUSER user\nRUN ["/bin/sh","-c","echo hi > /opt/hi"]\n
 */
export function dockerfileFor(spec: Pick<TemplateBuildStart, 'steps'>, base: TemplateBase, labels: Record<string, string> = {}): TemplateDockerfile {
  const lines: string[] = [`FROM ${base.image}`, `USER ${base.user}`];
  const steps = ['base', 'base'];
  const copies: string[] = [];
  const warnings: string[] = [];
  let user = base.user;
  // The base template's working folder is the home; another image's is not known here.
  let workdir: string | undefined = base.user === 'user' ? HOME : undefined;
  const emit = (line: string, step: number) => {
    lines.push(line);
    steps.push(String(step));
  };
  spec.steps.forEach((s, index) => {
    const step = index + 1;
    const args = s.args;
    switch (s.type) {
      case 'RUN': {
        const [command, as] = args;
        if (command === undefined || command.trim() === '') throw refuse(step, 'RUN needs a command.');
        if (as !== undefined && as !== '' && as !== user) {
          emit(`USER ${checkUser(step, as)}`, step);
          emit(`RUN ${JSON.stringify(['/bin/sh', '-c', command])}`, step);
          emit(`USER ${user}`, step);
        } else emit(`RUN ${JSON.stringify(['/bin/sh', '-c', command])}`, step);
        return;
      }
      case 'COPY': {
        const [src, dest, owner, mode] = args;
        if (src === undefined || dest === undefined || dest === '') throw refuse(step, 'COPY needs a source and a destination.');
        if (mode !== undefined && mode !== '')
          throw refuse(
            step,
            `copy with mode ${mode.slice(0, 8)} is not supported by Warren's builder; copy without mode and add runCmd('chmod ${mode.slice(0, 8)} <path>').`,
          );
        const clean = path.posix.normalize(src);
        if (src.startsWith('/') || clean === '..' || clean.startsWith('../') || CONTROL.test(src))
          throw refuse(step, `the copy source '${src.slice(0, 200)}' must be a path relative to the template's file context, inside it.`);
        if (CONTROL.test(dest)) throw refuse(step, 'the copy destination has control characters.');
        if (s.filesHash === undefined || !FILES_HASH.test(s.filesHash))
          throw refuse(step, 'COPY needs the filesHash of its uploaded files (64 hex digits), as Template.build sends.');
        copies.push(s.filesHash);
        const chown = owner === undefined || owner === '' ? '' : `--chown=${checkUser(step, owner)} `;
        emit(`COPY ${chown}${JSON.stringify([`${filesFolder(s.filesHash)}/${clean}`, dest])}`, step);
        const target = dest.startsWith('/') ? dest : workdir === undefined ? undefined : path.posix.join(workdir, dest);
        if (target !== undefined && (target === HOME || target.startsWith(`${HOME}/`)))
          warnings.push(
            `Step ${step} copies ${src} into ${target}: where sandboxes get a disk with a quota, that disk is mounted over ${HOME} and hides it; copy to another folder (e.g. /opt/...) if sandboxes need it there (docs/e2b.md).`,
          );
        return;
      }
      case 'ENV': {
        if (args.length === 0 || args.length % 2 !== 0) throw refuse(step, 'ENV needs name and value pairs.');
        const pairs: string[] = [];
        for (let i = 0; i < args.length; i += 2) {
          const [name, value] = [args[i] as string, args[i + 1] as string];
          if (!ENV_NAME.test(name))
            throw refuse(step, `'${name.slice(0, 64)}' is not an environment variable name (letters, digits and _, not starting with a digit).`);
          if (CONTROL.test(value)) throw refuse(step, `the value of ${name} has a newline or another control character, which a Dockerfile cannot hold.`);
          pairs.push(`${name}=${quoted(value)}`);
        }
        emit(`ENV ${pairs.join(' ')}`, step);
        return;
      }
      case 'WORKDIR': {
        const [dir] = args;
        if (dir === undefined || dir.trim() === '' || CONTROL.test(dir)) throw refuse(step, 'WORKDIR needs a folder without control characters.');
        workdir = dir.startsWith('/') ? dir : workdir === undefined ? undefined : path.posix.join(workdir, dir);
        emit(`WORKDIR ${dir}`, step);
        return;
      }
      case 'USER': {
        const [name] = args;
        user = checkUser(step, name ?? '');
        emit(`USER ${user}`, step);
        return;
      }
      default:
        throw refuse(
          step,
          `the step type '${s.type.slice(0, 32)}' is not supported by Warren's builder; it takes RUN, COPY, ENV, WORKDIR and USER (runCmd, copy, setEnvs, setWorkdir, setUser and the helpers built on them).`,
        );
    }
  });
  const labelLines = Object.entries(labels).map(([key, value]) => `${key}=${quoted(value)}`);
  if (labelLines.length > 0) {
    lines.push(`LABEL ${labelLines.join(' ')}`);
    steps.push('finalize');
  }
  return { text: `${lines.join('\n')}\n`, steps, copies: [...new Set(copies)], warnings };
}
