import { describe, expect, it } from '@jest/globals';
import { dockerfileNeeds } from '../src/dockerfile-check.js';
import { E2bHttpError } from '../src/e2b/errors.js';
import { dockerfileFor, filesFolder } from '../src/e2b/template-builds/dockerfile.js';
import { parseTemplateName, templateImage } from '../src/e2b/template-builds/names.js';

const base = { image: 'warren/e2b-base:latest', user: 'user' };
const hash = 'a'.repeat(64);

function refusal(fn: () => unknown): E2bHttpError {
  try {
    fn();
  } catch (err) {
    if (err instanceof E2bHttpError) return err;
    throw err;
  }
  throw new Error('not refused');
}

describe("E2B's template steps as a Dockerfile", () => {
  it("maps RUN (as a user and back), COPY from the uploaded files, ENV, WORKDIR and USER, and passes Warren's Dockerfile check", () => {
    const { text, steps, copies } = dockerfileFor(
      {
        steps: [
          { type: 'RUN', args: ['apt-get update && echo "$HOME" > /tmp/x', 'root'] },
          { type: 'COPY', args: ['app/*.txt', '/opt/app/', 'user', ''], filesHash: hash },
          { type: 'ENV', args: ['GREETING', 'say "hi" \\ $HOME', 'B', ''] },
          { type: 'WORKDIR', args: ['/opt/app'] },
          { type: 'USER', args: ['root'] },
          { type: 'RUN', args: ['line one\nline two'] },
        ],
      },
      base,
      { 'warren.e2b-build': 'b1' },
    );
    expect(text.split('\n')).toEqual([
      'FROM warren/e2b-base:latest',
      'USER user',
      'USER root',
      'RUN ["/bin/sh","-c","apt-get update && echo \\"$HOME\\" > /tmp/x"]',
      'USER user',
      `COPY --chown=user ["${filesFolder(hash)}/app/*.txt","/opt/app/"]`,
      'ENV GREETING="say \\"hi\\" \\\\ $HOME" B=""',
      'WORKDIR /opt/app',
      'USER root',
      'RUN ["/bin/sh","-c","line one\\nline two"]',
      'LABEL warren.e2b-build="b1"',
      '',
    ]);
    // The engine's "Step n/m" points back at the E2B step that wrote the instruction.
    expect(steps).toEqual(['base', 'base', '1', '1', '1', '2', '3', '4', '5', '6', 'finalize']);
    expect(copies).toEqual([hash]);
    expect(dockerfileFor({ steps: [] }, base).warnings).toEqual([]);
    expect(dockerfileNeeds(text).images).toEqual(['warren/e2b-base:latest']);
  });

  it.each([
    ['an unknown step type', { type: 'ADD', args: ['x', 'y'] }, /RUN, COPY, ENV, WORKDIR and USER/],
    ['a copy source outside the context', { type: 'COPY', args: ['../../etc/passwd', '/x'], filesHash: hash }, /inside it/],
    ['an absolute copy source', { type: 'COPY', args: ['/etc/passwd', '/x'], filesHash: hash }, /relative/],
    ['a copy without its files hash', { type: 'COPY', args: ['a', '/x'] }, /filesHash/],
    ['a copy mode', { type: 'COPY', args: ['a', '/x', '', '0755'], filesHash: hash }, /chmod/],
    ['a hostile user', { type: 'USER', args: ['root\nRUN curl evil'] }, /user name/],
    ['a RUN as a hostile user', { type: 'RUN', args: ['id', 'x --from=evil/img'] }, /user name/],
    ['an env value with a newline', { type: 'ENV', args: ['A', 'x\nRUN curl evil'] }, /control character/],
    ['an env name with a space', { type: 'ENV', args: ['A B', 'x'] }, /variable name/],
    ['a workdir with a newline', { type: 'WORKDIR', args: ['/x\nRUN id'] }, /control characters/],
  ])('refuses %s with 400 naming the step', (_what, step, message) => {
    const err = refusal(() => dockerfileFor({ steps: [{ type: 'RUN', args: ['true'] }, step] }, base));
    expect(err.status).toBe(400);
    expect(err.message).toMatch(/^Template step 2: /);
    expect(err.message).toMatch(message);
  });
});

it('warns of files copied into the home, which a quota disk hides, and not of others', () => {
  const copy = (dest: string) => ({ type: 'COPY', args: ['a.txt', dest], filesHash: hash });
  const { warnings } = dockerfileFor({ steps: [copy('/opt/app/'), copy('notes/'), { type: 'WORKDIR', args: ['/srv'] }, copy('x/'), copy('/home/user')] }, base);
  expect(warnings).toEqual([
    expect.stringMatching(/^Step 2 copies a.txt into \/home\/user\/notes/),
    expect.stringMatching(/^Step 5 copies a.txt into \/home\/user: /),
  ]);
});

describe('template names', () => {
  it('reads name[:tag] (default tag "default") and namespaces the image by tenant', () => {
    expect(parseTemplateName('my-tpl')).toEqual({ name: 'my-tpl', tag: 'default' });
    expect(parseTemplateName('my-tpl:v1.2')).toEqual({ name: 'my-tpl', tag: 'v1.2' });
    expect(templateImage('acme', 'my-tpl', 'v1')).toBe('e2b/acme/my-tpl:v1');
  });

  it.each(['../x', 'a/b', 'UPPER', 'x:../y', 'x:', '', 'a'.repeat(64), 'e2b/acme/x', 'x y'])('refuses %j', (name) => {
    expect(refusal(() => parseTemplateName(name)).status).toBe(400);
  });
});
