import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Docker from 'dockerode';
import { BuildFailedError, Images, Sandbox } from '@warren/sdk';
import { runCli } from '../support/cli.js';
import { codeOf } from '../support/files.js';
import { startTestController, type TestController } from '../support/fixtures.js';
import { imagePresent } from '../support/registry.js';

const docker = new Docker();
const run = randomBytes(4).toString('hex');
/** Every image this file builds is named below this, so afterAll removes them all. */
const PREFIX = 'warren-e2e-build/';

// Real builds through a real controller: the context packed by the SDK, the output streamed back.
describe('warren images build, on the engine', () => {
  let warren: TestController;
  let images: Images;
  let base: string;
  let context: string;

  beforeAll(async () => {
    warren = await startTestController();
    images = new Images({ baseUrl: warren.url, apiKey: warren.apiKey });
    base = (await imagePresent(docker, 'warren/test-busybox:latest')) ? 'warren/test-busybox:latest' : 'warren/sandbox:latest';
    context = await mkdtemp(path.join(os.tmpdir(), 'warren-build-'));
  });
  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
    const left = await docker.listImages({ filters: { label: ['warren.build'] } });
    for (const image of left.filter((i) => (i.RepoTags ?? []).some((t) => t.startsWith(PREFIX))))
      await docker
        .getImage(image.Id)
        .remove({ force: true })
        .catch(() => undefined);
    await rm(context, { recursive: true, force: true });
  });

  async function write(files: Record<string, string>): Promise<void> {
    await rm(context, { recursive: true, force: true });
    await mkdir(context);
    for (const [name, text] of Object.entries(files)) {
      await mkdir(path.dirname(path.join(context, name)), { recursive: true });
      await writeFile(path.join(context, name), text);
    }
  }

  it('builds a template with streamed output, on no network, that a sandbox then runs; list and remove it', async () => {
    await write({
      'docker/Dockerfile': [
        `FROM ${base}`,
        'COPY files/ /opt/template/',
        // The build's RUN steps have no network: only the loopback interface.
        'RUN ls /sys/class/net && test "$(ls /sys/class/net)" = lo && echo step-ran-offline',
        'RUN cat /opt/template/hello.txt && cat /opt/template/link.txt',
        '',
      ].join('\n'),
      // A nonce of its own, so a retried test finds no cached steps and runs them again.
      'files/hello.txt': `hello from the context\n`,
      'files/nonce': randomBytes(8).toString('hex'),
    });
    await symlink('hello.txt', path.join(context, 'files', 'link.txt'));
    const output: string[] = [];
    const tag = `${PREFIX}tmpl:${run}`;
    const built = await images.build({ context, tag, dockerfile: 'docker/Dockerfile', onOutput: (t) => output.push(t) });
    expect(built).toMatchObject({ image: tag, id: expect.stringMatching(/^sha256:/) });
    const text = output.join('');
    expect(text).toMatch(/Step 1\/\d+ : FROM/);
    expect(text).toContain('step-ran-offline');
    expect(text).toContain('hello from the context');
    expect((await images.list()).some((i) => i.tags.includes(tag))).toBe(true);
    // A rebuild of the name replaces the image, and the one it replaced is removed rather than left nameless.
    await writeFile(path.join(context, 'files', 'nonce'), randomBytes(8).toString('hex'));
    const rebuilt = await images.build({ context, tag, dockerfile: 'docker/Dockerfile' });
    expect(rebuilt.id).not.toBe(built.id);
    expect(await imagePresent(docker, built.id!)).toBe(false);

    const sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, image: tag });
    try {
      expect(await sandbox.commands.run(['cat', '/opt/template/hello.txt'])).toMatchObject({ exitCode: 0, stdout: 'hello from the context\n' });
    } finally {
      await sandbox.kill();
    }
    await images.remove(tag);
    expect(await imagePresent(docker, tag)).toBe(false);
  });

  it('warren images build prints the output on stderr and only the name on stdout; ls and rm find it', async () => {
    await write({ Dockerfile: `FROM ${base}\nCOPY note /note\nRUN cat /note\n`, note: `cli build ${randomBytes(8).toString('hex')}\n` });
    const env = { WARREN_URL: warren.url, WARREN_API_KEY: warren.apiKey };
    const tag = `${PREFIX}cli:${run}`;
    const built = await runCli(['images', 'build', context, '--tag', tag], { env, timeoutMs: 110_000 });
    expect(built).toMatchObject({ code: 0, stdout: `${tag}\n` });
    expect(built.stderr).toMatch(/Step 3\/\d+ : RUN cat \/note[\s\S]*cli build/);
    const listed = await runCli(['images', 'ls', '--json'], { env });
    expect((JSON.parse(listed.stdout) as { tags: string[] }[]).some((i) => i.tags.includes(tag))).toBe(true);
    const old = await runCli(['image', 'ls', '--json'], { env }); // the deprecated name: the same answer, one notice
    expect(old).toMatchObject({ code: 0, stderr: "warren: 'warren image' is deprecated and goes away in the next minor version; use 'warren images ls'.\n" });
    expect((JSON.parse(old.stdout) as { tags: string[] }[]).some((i) => i.tags.includes(tag))).toBe(true);
    expect(await runCli(['images', 'rm', tag], { env })).toMatchObject({ code: 0 });
    expect(await imagePresent(docker, tag)).toBe(false);
    const refused = await runCli(['images', 'build', context, '--tag', 'ghcr.io/x/y'], { env });
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/INVALID_PARAMS: .*registry host/);
  });

  it('a failing step is BuildFailedError with the end of the output, and leaves no image of that name', async () => {
    await write({ Dockerfile: `FROM ${base}\nRUN echo about-to-fail && exit 3\n` });
    const tag = `${PREFIX}broken:${run}`;
    const err = await images.build({ context, tag }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BuildFailedError);
    expect((err as BuildFailedError).details?.output).toEqual(expect.stringContaining('about-to-fail'));
    expect(await imagePresent(docker, tag)).toBe(false);
  });

  it('refuses, before building, a base image from a registry that is not allowed and a name that would replace an image Warren did not build', async () => {
    await write({ Dockerfile: 'FROM localhost:5999/not-allowed/base:1\nRUN true\n' });
    expect(await codeOf(images.build({ context, tag: `${PREFIX}x:${run}` }))).toBe('IMAGE_NOT_ALLOWED');
    await write({ Dockerfile: `FROM ${base}\n` });
    expect(await codeOf(images.build({ context, tag: base }))).toBe('CONFLICT');
    expect(await imagePresent(docker, `${PREFIX}x:${run}`)).toBe(false);
  });
});
