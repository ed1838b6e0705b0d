import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Docker from 'dockerode';
import { BuildError, Sandbox, Template } from 'e2b';
import { startTestController, type TestController, tenantCredentials } from '../support/fixtures.js';

const docker = new Docker();
const run = randomBytes(3).toString('hex');

/**
 * The real `e2b` SDK's `Template.build` against a real controller and engine: E2B's template
 * steps become a Warren image build of the calling key's tenant, which only that tenant lists,
 * describes, starts sandboxes from and deletes (docs/e2b.md#templates).
 */
describe('the e2b SDK: templates built through Warren', () => {
  let warren: TestController;
  let context: string;
  type Opts = { apiKey: string; apiUrl: string; sandboxUrl: string };
  let opts: Opts;
  let other: Opts;
  let narrow: Opts;
  const otherKey = `wk_other_${randomBytes(16).toString('hex')}`;
  const narrowKey = `wk_narrow_${randomBytes(16).toString('hex')}`;

  beforeAll(async () => {
    const apiKey = `wk_test_${randomBytes(16).toString('hex')}`;
    const credentials = await tenantCredentials(apiKey, [otherKey]);
    await credentials.keys.add(narrowKey, { tenant: 'narrow', role: 'member', scopes: ['sandboxes:create', 'exec'] });
    warren = await startTestController({ credentials });
    const gateway = `${warren.url}/e2b`;
    opts = { apiKey, apiUrl: gateway, sandboxUrl: gateway };
    other = { ...opts, apiKey: otherKey };
    narrow = { ...opts, apiKey: narrowKey };
    context = await mkdtemp(path.join(os.tmpdir(), 'warren-e2b-template-'));
    await mkdir(path.join(context, 'app'));
    await writeFile(path.join(context, 'app', 'hello.txt'), 'hello from a template file\n');
  }, 60_000);
  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
    await rm(context, { recursive: true, force: true });
    for (const image of await docker.listImages({ filters: { label: ['warren.build'] } }))
      if ((image.RepoTags ?? []).some((t) => t.includes(`tpl-${run}`)))
        await docker
          .getImage(image.Id)
          .remove({ force: true })
          .catch(() => undefined);
  }, 60_000);

  const call = (method: string, route: string, key: Opts = opts) => fetch(`${opts.apiUrl}${route}`, { method, headers: { 'x-api-key': key.apiKey } });

  it('builds a template with a copied file and a command, shows its logs, starts sandboxes from it; lists, describes and deletes it; another tenant reaches none of it', async () => {
    const name = `tpl-${run}`;
    const template = Template({ fileContextPath: context })
      .fromBaseImage()
      .copy('app/hello.txt', '/opt/app/')
      .runCmd('echo "ran as $(id -un)" > /opt/app/ran.txt', { user: 'root' })
      .setEnvs({ GREETING: 'hi from the template' });
    const logs: string[] = [];
    const built = await Template.build(template, name, { ...opts, onBuildLogs: (entry) => logs.push(entry.message) });
    expect(built).toMatchObject({ name, templateId: name, buildId: expect.stringMatching(/^[0-9a-f-]{36}$/) });
    // The engine's own output, step by step, through the SDK's log callback.
    expect(logs.some((line) => /Step \d+\/\d+ : RUN/.test(line))).toBe(true);
    expect(logs.some((line) => /Uploaded 'app\/hello.txt'/.test(line))).toBe(true);
    expect(logs.some((line) => /Built e2b\/default\/tpl-/.test(line))).toBe(true);

    const sandbox = await Sandbox.create(name, opts);
    try {
      expect((await sandbox.commands.run('cat /opt/app/hello.txt')).stdout).toBe('hello from a template file\n');
      expect((await sandbox.commands.run('cat /opt/app/ran.txt')).stdout).toBe('ran as root\n');
      expect((await sandbox.commands.run('echo "$GREETING"')).stdout).toBe('hi from the template\n');
      // E2B's user and home, as on the base template it starts from.
      expect((await sandbox.commands.run('whoami && pwd')).stdout).toBe('user\n/home/user\n');
      await sandbox.files.write('note.txt', 'relative to the home');
      expect((await sandbox.commands.run('cat /home/user/note.txt')).stdout).toBe('relative to the home');
      expect((await Sandbox.list(opts).nextItems()).find((s) => s.sandboxId === sandbox.sandboxId)?.templateId).toBe(name);

      // Listed and described for its tenant, with the configured templates every tenant sees.
      const listed = (await (await call('GET', '/templates')).json()) as { templateID: string; public: boolean; buildStatus: string }[];
      expect(listed).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ templateID: 'base', public: true }),
          expect.objectContaining({ templateID: name, public: false, buildStatus: 'ready' }),
        ]),
      );
      const described = await call('GET', `/templates/${name}`);
      expect(described.status).toBe(200);
      expect(await described.json()).toMatchObject({ templateID: name, builds: [expect.objectContaining({ status: 'ready' })] });
      expect(await Template.exists(name, opts)).toBe(true);
      expect((await Template.getTags(name, opts)).map((t) => t.tag)).toEqual(['default']);

      // Another tenant: not listed, not described, not usable, not deletable, as if it did not exist.
      const theirs = (await (await call('GET', '/templates', other)).json()) as { templateID: string }[];
      expect(theirs.map((t) => t.templateID)).toContain('base');
      expect(theirs.map((t) => t.templateID)).not.toContain(name);
      expect((await call('GET', `/templates/${name}`, other)).status).toBe(404);
      expect(await Template.exists(name, other)).toBe(false);
      await expect(Sandbox.create(name, other)).rejects.toThrow(/not found/i);
      expect(await Sandbox.deleteSnapshot(name, other)).toBe(false);

      // In use by a sandbox: not deleted.
      expect((await call('DELETE', `/templates/${name}`)).status).toBe(409);
    } finally {
      await sandbox.kill();
    }
    expect((await call('DELETE', `/templates/${name}`)).status).toBe(204);
    expect(await Template.exists(name, opts)).toBe(false);
    expect((await call('GET', `/templates/${name}`)).status).toBe(404);
    await expect(Sandbox.create(name, opts)).rejects.toThrow(/not found/i);
  });

  it('installs Debian packages with aptInstall where the operator gives builds a network (images.buildNetwork: bridge)', async () => {
    await using networked = await startTestController({
      credentials: await tenantCredentials(opts.apiKey, []),
      config: { images: { allowedRegistries: [], pull: 'never', maxPullMb: 64, maxBuildContextMb: 16, buildNetwork: 'bridge', timeoutMs: 600_000 } },
    });
    const here = { ...opts, apiUrl: `${networked.url}/e2b`, sandboxUrl: `${networked.url}/e2b` };
    const name = `tpl-${run}-apt`;
    const template = Template({ fileContextPath: context })
      .fromBaseImage()
      .aptInstall(['jq'], { noInstallRecommends: true })
      .copy('app/hello.txt', '/home/user/');
    const failed = await Template.build(template, name, here).then(
      () => undefined,
      (err: unknown) => (err as Error).message,
    );
    // An engine whose default bridge has no interface (docker0) cannot give builds a network at all.
    if (failed !== undefined && /could not find bridge docker0/.test(failed)) {
      console.warn(`skipped: this engine's bridge network has no docker0 interface, so no build can reach Debian's archive (${failed.split('\n')[0]})`);
      return;
    }
    expect(failed).toBeUndefined();
    const sandbox = await Sandbox.create(name, here);
    try {
      expect((await sandbox.commands.run(`echo '{"a":{"b":42}}' | jq .a.b`)).stdout).toBe('42\n');
      // What the image holds in the home shows in a sandbox whose disk is a Docker volume (copied in), not over a host disk.
      const home = await sandbox.commands.run('cat /home/user/hello.txt || true');
      expect(['hello from a template file\n', '']).toContain(home.stdout);
    } finally {
      await sandbox.kill();
    }
  }, 600_000);

  it('builds from a Dockerfile, which the SDK reads into the same steps', async () => {
    const name = `tpl-${run}-df`;
    const template = Template().fromDockerfile('FROM e2bdev/base\nRUN echo "from a Dockerfile" > /opt/df.txt\nENV DF_MODE=yes\nWORKDIR /opt\n');
    await Template.build(template, name, opts);
    const sandbox = await Sandbox.create(name, opts);
    try {
      expect((await sandbox.commands.run('cat /opt/df.txt && echo "$DF_MODE" && whoami')).stdout).toBe('from a Dockerfile\nyes\nuser\n');
    } finally {
      await sandbox.kill();
    }
    expect((await call('DELETE', `/templates/${name}`)).status).toBe(204);
  });

  it('reports a failing step as a BuildError with its output, and refuses what Warren does not build with a reason', async () => {
    const logs: string[] = [];
    const failing = Template().fromBaseImage().runCmd('echo about-to-fail && exit 3');
    const err = await Template.build(failing, `tpl-${run}-fail`, { ...opts, onBuildLogs: (entry) => logs.push(entry.message) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BuildError);
    expect((err as Error).message).toMatch(/non-zero code: 3|exit/i);
    expect(logs.some((line) => line.includes('about-to-fail'))).toBe(true);

    await expect(Template.build(Template().fromBaseImage().setStartCmd('sleep infinity', 'true'), `tpl-${run}-start`, opts)).rejects.toThrow(
      /Start and ready commands/,
    );
    await expect(Template.build(Template(), 'base', opts)).rejects.toThrow(/configured on this controller/);
    await expect(Template.build(Template(), `Bad/Name`, opts)).rejects.toThrow(/not a template name/);
    // Building needs the images scope, as Warren's own builds do.
    await expect(Template.build(Template(), `tpl-${run}-narrow`, narrow)).rejects.toThrow(/'images' scope/);
  });
});
