import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Docker from 'dockerode';
import { Sandbox, Template } from 'e2b';
import { startTestController, type TestController, tenantCredentials } from '../support/fixtures.js';
import { archive, file, header } from '../support/tar-bytes.js';

const docker = new Docker();
const run = randomBytes(3).toString('hex');

/**
 * E2B's template API as a door between tenants (docs/e2b.md#templates): another tenant's builds,
 * upload links, templates and images must read as absent, and hostile names, copy sources,
 * uploaded archives and step text must be refused or stay inert.
 */
describe('E2B template builds as a door', () => {
  let warren: TestController;
  let context: string;
  type Opts = { apiKey: string; apiUrl: string; sandboxUrl: string };
  let victim: Opts;
  let attacker: Opts;
  const attackerKey = `wk_attacker_${randomBytes(16).toString('hex')}`;
  const secretName = `secret-${run}`;

  beforeAll(async () => {
    const apiKey = `wk_victim_${randomBytes(16).toString('hex')}`;
    warren = await startTestController({ credentials: await tenantCredentials(apiKey, [attackerKey]) });
    const gateway = `${warren.url}/e2b`;
    victim = { apiKey, apiUrl: gateway, sandboxUrl: gateway };
    attacker = { ...victim, apiKey: attackerKey };
    context = await mkdtemp(path.join(os.tmpdir(), 'warren-redteam-template-'));
    await mkdir(path.join(context, 'data'));
    await writeFile(path.join(context, 'data', 'secret.txt'), 'victim-only\n');
    // The victim's private template, holding a file no other tenant may read.
    await Template.build(Template({ fileContextPath: context }).fromBaseImage().copy('data/secret.txt', '/opt/secret/'), secretName, victim);
  }, 180_000);
  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
    await rm(context, { recursive: true, force: true });
    for (const image of await docker.listImages({ filters: { label: ['warren.build'] } }))
      if ((image.RepoTags ?? []).some((t) => t.includes(run)))
        await docker
          .getImage(image.Id)
          .remove({ force: true })
          .catch(() => undefined);
  }, 60_000);

  const call = async (who: Opts, method: string, route: string, body?: unknown) => {
    const res = await fetch(`${victim.apiUrl}${route}`, {
      method,
      headers: { 'x-api-key': who.apiKey, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, body: text === '' ? undefined : (JSON.parse(text) as { message?: string } & Record<string, unknown>) };
  };

  /** A build of `name` for `who`, waiting for its files: its ids and upload link. */
  async function requestBuild(who: Opts, name: string, hash = 'b'.repeat(64)): Promise<{ buildID: string; url: string }> {
    const made = await call(who, 'POST', '/v3/templates', { name });
    expect(made.status).toBe(202);
    const buildID = made.body!.buildID as string;
    const link = await call(who, 'GET', `/templates/${name}/files/${hash}`);
    expect(link.status).toBe(201);
    return { buildID, url: link.body!.url as string };
  }

  it("reads another tenant's template, build, logs and upload link as absent, and its images as no base", async () => {
    const { buildID, url } = await requestBuild(victim, `pending-${run}`);
    // The victim's build: its status, its upload link, its start, its files, all 404 to the attacker.
    expect((await call(attacker, 'GET', `/templates/pending-${run}/builds/${buildID}/status`)).status).toBe(404);
    expect((await call(attacker, 'GET', `/templates/pending-${run}/files/${'b'.repeat(64)}`)).status).toBe(404);
    expect((await call(attacker, 'POST', `/v2/templates/pending-${run}/builds/${buildID}`, { steps: [] })).status).toBe(404);
    // The upload link works only with its own secret, for its own build.
    const forged = new URL(url);
    forged.searchParams.set('token', 'x'.repeat(32));
    expect((await fetch(forged, { method: 'PUT', body: 'x' })).status).toBe(403);
    const otherBuild = new URL(url);
    otherBuild.pathname = otherBuild.pathname.replace(`pending-${run}`, secretName);
    expect((await fetch(otherBuild, { method: 'PUT', body: 'x' })).status).toBe(403);

    // The victim's finished template: not listed, described, tagged, used or deleted by the attacker.
    expect(((await call(attacker, 'GET', '/templates')).body as unknown as { templateID: string }[]).map((t) => t.templateID)).not.toContain(secretName);
    for (const route of [`/templates/${secretName}`, `/templates/aliases/${secretName}`, `/templates/${secretName}/tags`])
      expect([route, (await call(attacker, 'GET', route)).status]).toEqual([route, 404]);
    await expect(Sandbox.create(secretName, attacker)).rejects.toThrow(/not found/i);
    expect((await call(attacker, 'DELETE', `/templates/${secretName}`)).status).toBe(404);
    expect((await call(victim, 'GET', `/templates/${secretName}`)).status).toBe(200);

    // Nor a base for the attacker's own build: by template name, by image name, by image id or its prefix.
    const image = `e2b/default/${secretName}:default`;
    const id = (await docker.getImage(image).inspect()).Id;
    for (const base of [{ fromTemplate: secretName }, { fromImage: image }, { fromImage: id }, { fromImage: id.slice(7, 19) }]) {
      const { buildID: theirs } = await requestBuild(attacker, `steal-${run}`);
      const started = await call(attacker, 'POST', `/v2/templates/steal-${run}/builds/${theirs}`, {
        ...base,
        steps: [{ type: 'RUN', args: ['cat /opt/secret/secret.txt'] }],
      });
      expect([base, started.status]).toEqual([base, 400]);
      expect(started.body?.message).toMatch(/no such template|not on the engine for this tenant/);
    }
    // The same name is the attacker's own template, in its own namespace: it never meets the victim's.
    const own = await call(attacker, 'POST', '/v3/templates', { name: secretName });
    expect(own.status).toBe(202);
    expect((await call(attacker, 'GET', `/templates/${secretName}/builds/${own.body!.buildID as string}/status`)).body).toMatchObject({ status: 'waiting' });
  }, 180_000);

  it('refuses hostile names, copy sources and uploaded archives, and keeps step text out of the Dockerfile', async () => {
    for (const name of ['../../etc', 'e2b/default/x', 'Base', 'base', `x:${'../'.repeat(3)}`, 'a b'])
      expect([name, (await call(attacker, 'POST', '/v3/templates', { name })).status]).toEqual([name, name === 'base' ? 409 : 400]);
    expect((await call(attacker, 'GET', `/templates/${encodeURIComponent('../../x')}/files/${'a'.repeat(64)}`)).status).toBe(404);

    // A copy source that leaves the file context.
    const { buildID: escape } = await requestBuild(attacker, `escape-${run}`);
    const copied = await call(attacker, 'POST', `/v2/templates/escape-${run}/builds/${escape}`, {
      steps: [{ type: 'COPY', args: ['../../../etc/shadow', '/x'], filesHash: 'b'.repeat(64) }],
    });
    expect(copied.status).toBe(400);

    // Uploaded archives with an absolute name, a `..` name, and a link out of the context: refused before any step runs.
    const hostile: [string, Buffer][] = [
      ['absolute', archive(file('/etc/cron.d/evil', 'x'))],
      ['dot-dot', archive(file('../../evil', 'x'))],
      ['link out', archive(header({ name: 'link', flag: '2', linkname: '/etc/shadow' }))],
    ];
    for (const [what, tar] of hostile) {
      const { buildID, url } = await requestBuild(attacker, `archive-${run}`);
      const put = await fetch(url, { method: 'PUT', body: gzipSync(tar) });
      expect(put.status).toBe(200);
      const started = await call(attacker, 'POST', `/v2/templates/archive-${run}/builds/${buildID}`, {
        steps: [{ type: 'COPY', args: ['.', '/opt/x/'], filesHash: 'b'.repeat(64) }],
      });
      expect([what, started.status]).toEqual([what, 400]);
      expect(started.body?.message).toMatch(/not an archive Warren takes/);
      // The link died with the refused build.
      expect((await fetch(url, { method: 'PUT', body: 'x' })).status).toBe(403);
    }

    // Dockerfile text inside a command (a newline, then ADD of a URL) stays the shell's text: no ADD step exists.
    const { buildID: inert } = await requestBuild(attacker, `inert-${run}`);
    const line = 'echo one > /tmp/inert\nADD http://169.254.169.254/latest/meta-data /meta';
    expect((await call(attacker, 'POST', `/v2/templates/inert-${run}/builds/${inert}`, { steps: [{ type: 'RUN', args: [line, 'root'] }] })).status).toBe(202);
    let status: Record<string, unknown> | undefined;
    for (let i = 0; i < 600 && (status?.status === undefined || status.status === 'building'); i++) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      status = (await call(attacker, 'GET', `/templates/inert-${run}/builds/${inert}/status`)).body;
    }
    // The shell runs `ADD` as a command, which does not exist: the build fails in that RUN, and the engine fetched nothing.
    expect(status).toMatchObject({ status: 'error', reason: { step: '1' } });
    const logs = (status!.logEntries as { message: string }[]).map((e) => e.message).join('\n');
    expect(logs).not.toMatch(/Step \d+\/\d+ : ADD/);
    expect(logs).toMatch(/ADD: not found/);
  }, 180_000);

  it("builds and starts the template of a tenant whose name ends in '-' (no image name may end a part with it), apart from its neighbour's", async () => {
    const keyOf = async (tenant: string) => {
      const res = await fetch(`${warren.url}/v1/keys`, {
        method: 'POST',
        headers: { authorization: `Bearer ${victim.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ tenant, role: 'member' }),
      });
      expect(res.status).toBe(201);
      return ((await res.json()) as { key: string }).key;
    };
    const trailing = { ...victim, apiKey: await keyOf(`trail-${run}-`) };
    const neighbour = { ...victim, apiKey: await keyOf(`trail-${run}`) };
    const name = `dash-${run}`;
    await Template.build(Template().fromBaseImage().runCmd('echo trailing > /opt/who', { user: 'root' }), name, trailing);
    expect((await docker.listImages({ filters: { reference: [`e2b/trail-${run}_1/${name}:default`] } })).length).toBe(1);
    // The tenant without the dash has no template of that name: its namespace is another.
    expect((await call(neighbour, 'GET', `/templates/${name}`)).status).toBe(404);
    const sandbox = await Sandbox.create(name, trailing);
    try {
      expect((await sandbox.commands.run('cat /opt/who')).stdout).toBe('trailing\n');
    } finally {
      await sandbox.kill();
    }
  }, 180_000);
});
