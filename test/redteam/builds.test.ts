import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Docker from 'dockerode';
import { Images, Sandbox } from '@warren/sdk';
import { codeOf } from '../support/files.js';
import { startTestController, type TestController } from '../support/fixtures.js';
import { imagePresent } from '../support/registry.js';

const docker = new Docker();
const run = randomBytes(4).toString('hex');
/** Every image this file makes is named below this, so afterAll removes them all. */
const PREFIX = 'warren-redteam-build/';

/** An HTTP server the test made, on one address of this host, that records every connection and request it gets. */
interface Recorder {
  host: string;
  port: number;
  connections: number;
  requests: string[];
  close(): Promise<void>;
}

async function startRecorder(host: string): Promise<Recorder> {
  const server: Server = createServer((req, res) => {
    recorder.requests.push(`${req.method} ${req.url}`);
    res.end('fetched\n');
  });
  server.on('connection', () => void recorder.connections++);
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(0, host, resolve));
  const recorder: Recorder = {
    host,
    port: (server.address() as AddressInfo).port,
    connections: 0,
    requests: [],
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
  return recorder;
}

/**
 * Builds as a door: Dockerfiles that make the engine fetch on its own, from the host's network,
 * whatever the build's network is (ADD of a URL in every spelling the old check missed, ONBUILD
 * triggers of a stage or of a base image, a registry pull behind a flag the engine splits where
 * the check did not), each against a recorder on this host's loopback that the engine reaches.
 * Each must be refused with a typed error before any step runs, and the recorder must see
 * nothing. `RUN` steps reach only what `images.buildNetwork` gives them.
 */
describe('red team: builds that fetch', () => {
  let warren: TestController;
  let images: Images;
  let base: string;
  let context: string;
  let loopback: Recorder;

  beforeAll(async () => {
    loopback = await startRecorder('127.0.0.1');
    warren = await startTestController();
    images = new Images({ baseUrl: warren.url, apiKey: warren.apiKey });
    base = (await imagePresent(docker, 'warren/test-busybox:latest')) ? 'warren/test-busybox:latest' : 'warren/sandbox:latest';
    context = await mkdtemp(path.join(os.tmpdir(), 'warren-redteam-build-'));
    // The control: the engine on this host does fetch from the recorder when asked directly (not
    // through Warren), so a silent recorder below means refused, not unreachable.
    await writeFile(path.join(context, 'Dockerfile'), `FROM ${base}\nADD http://127.0.0.1:${loopback.port}/control /control\n`);
    const stream = await docker.buildImage({ context, src: ['Dockerfile'] }, { t: `${PREFIX}control:${run}`, version: '1', networkmode: 'none', rm: true });
    await new Promise((resolve, reject) => docker.modem.followProgress(stream, (err) => (err ? reject(err) : resolve(undefined))));
    expect(loopback.requests).toEqual(['GET /control']);
    loopback.requests.length = 0;
    loopback.connections = 0;
  });

  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
    await loopback?.close();
    const left = await docker.listImages();
    for (const image of left.filter((i) => (i.RepoTags ?? []).some((t) => t.startsWith(PREFIX))))
      await docker
        .getImage(image.Id)
        .remove({ force: true })
        .catch(() => undefined);
    if (context) await rm(context, { recursive: true, force: true });
  });

  /** Builds `dockerfile` through Warren; returns the error code (or OK), what the build printed, and whether the image exists. */
  async function attempt(dockerfile: string, name: string): Promise<{ code: string; output: string; built: boolean }> {
    await writeFile(path.join(context, 'Dockerfile'), dockerfile);
    loopback.requests.length = 0;
    loopback.connections = 0;
    const tag = `${PREFIX}${name}:${run}`;
    const output: string[] = [];
    const code = await codeOf(images.build({ context, tag, onOutput: (text) => output.push(text) }));
    return { code, output: output.join(''), built: await imagePresent(docker, tag) };
  }

  const url = (what: string) => `http://127.0.0.1:${loopback.port}/${what}`;
  const forms: [string, () => string][] = [
    ['ADD of an ARG value', () => `FROM ${base}\nARG U=${url('arg')}\nADD $U /x\n`],
    ['ADD of an ENV value', () => `FROM ${base}\nENV U=${url('env')}\nADD \${U} /x\n`],
    ['ADD of a JSON array with an escaped scheme', () => `FROM ${base}\nADD ["h\\u0074tp://127.0.0.1:${loopback.port}/json", "/x"]\n`],
    ['ADD of a quoted URL', () => `FROM ${base}\nADD "${url('quoted')}" /x\n`],
    ['ADD of a URL with a backslash escape', () => `FROM ${base}\nADD h\\ttp://127.0.0.1:${loopback.port}/escaped /x\n`],
    ['ADD of a URL split by a line continuation', () => `FROM ${base}\nADD http:/\\\n/127.0.0.1:${loopback.port}/continued /x\n`],
    // With the backtick as escape, `\` ends no line: the old check read the ADD as part of the RUN.
    ['the escape directive hiding an ADD', () => `# escape=\`\nFROM ${base}\nRUN echo \\\nADD ${url('escape-directive')} /x\n`],
    ['ONBUILD ADD fired by a later FROM of its stage', () => `FROM ${base} AS parent\nONBUILD ADD ${url('onbuild-stage')} /x\nFROM parent\nRUN true\n`],
    // The engine splits flags byte by byte and takes the 0xA0 inside `à` for a space, so `--from=`
    // became a flag of its own and the engine pulled from a registry the allow-list never saw.
    ['a COPY --from registry pull hidden behind a non-ASCII character', () => `FROM ${base}\nCOPY --chown=0à--from=127.0.0.1:${loopback.port}/img:1 /a /b\n`],
  ];

  it.each(forms)('%s is refused before any step runs, and the engine fetches nothing', async (_form, dockerfile) => {
    const { code, output, built } = await attempt(dockerfile(), 'attempt');
    expect({ code, output, built }).toEqual({ code: 'INVALID_PARAMS', output: '', built: false });
    expect({ connections: loopback.connections, requests: loopback.requests }).toEqual({ connections: 0, requests: [] });
  });

  it('a base image whose ONBUILD trigger fetches is refused before any step runs; the trigger never fires', async () => {
    // Stands for an image from an allowed registry: on the engine already, with a hostile trigger.
    const container = await docker.createContainer({ Image: base, Cmd: ['true'] });
    try {
      await container.commit({ repo: `${PREFIX}onbuild`, tag: run, changes: `ONBUILD ADD ${url('onbuild-base')} /x` });
    } finally {
      await container.remove({ force: true });
    }
    const { code, output, built } = await attempt(`FROM ${PREFIX}onbuild:${run}\nRUN true\n`, 'child');
    expect({ code, output, built }).toEqual({ code: 'INVALID_PARAMS', output: '', built: false });
    expect({ connections: loopback.connections, requests: loopback.requests }).toEqual({ connections: 0, requests: [] });
  });

  it("a tenant's template is its own: another tenant's key neither lists, removes, replaces nor starts it", async () => {
    const key = async (tenant: string) => {
      const res = await fetch(`${warren.url}/v1/keys`, {
        method: 'POST',
        headers: { authorization: `Bearer ${warren.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ tenant, role: 'member' }),
      });
      return ((await res.json()) as { key: string }).key;
    };
    const [keyA, keyB] = [await key('acme'), await key('bravo')];
    const tag = `${PREFIX}tenant-a:${run}`;
    await writeFile(path.join(context, 'Dockerfile'), `FROM ${base}\nUSER root\nLABEL warren.build-tenant=bravo\nRUN echo a > /a.txt\n`);
    const asA = new Images({ baseUrl: warren.url, apiKey: keyA });
    const asB = new Images({ baseUrl: warren.url, apiKey: keyB });
    await asA.build({ context, tag });
    expect((await asA.list()).flatMap((i) => i.tags)).toContain(tag);
    // A Dockerfile's own LABEL of the tenant does not give the image away: Warren's label wins.
    expect((await asB.list()).flatMap((i) => i.tags)).not.toContain(tag);
    expect(await codeOf(asB.remove(tag))).toBe('NOT_FOUND');
    expect(await codeOf(asB.build({ context, tag }))).toBe('CONFLICT');
    expect(await codeOf(Sandbox.create({ baseUrl: warren.url, apiKey: keyB, image: tag }))).toBe('IMAGE_NOT_ALLOWED');
    // Nor is it a base or a source of files for B's own build: its files never reach B's template.
    const theft = path.join(context, 'theft');
    await mkdir(theft, { recursive: true });
    for (const dockerfile of [`FROM ${tag}\n`, `FROM ${base}\nCOPY --from=${tag} /a.txt /stolen.txt\n`]) {
      await writeFile(path.join(theft, 'Dockerfile'), dockerfile);
      expect({ dockerfile, code: await codeOf(asB.build({ context: theft, tag: `${PREFIX}tenant-b:${run}` })) }).toEqual({
        dockerfile,
        code: 'IMAGE_NOT_ALLOWED',
      });
    }
    expect(await imagePresent(docker, `${PREFIX}tenant-b:${run}`)).toBe(false);
    const own = await Sandbox.create({ baseUrl: warren.url, apiKey: keyA, image: tag });
    try {
      expect((await own.commands.run('cat /a.txt')).stdout).toBe('a\n');
    } finally {
      await own.kill();
    }
    expect(await imagePresent(docker, tag)).toBe(true);
  });

  it('RUN steps reach only what images.buildNetwork gives: nothing with none (the default), the host with bridge', async () => {
    // The remap engine runs with no bridge and only the sandbox image: its builds have no network to choose.
    if (process.env.WARREN_TEST_ENGINE === 'userns-remap') {
      console.warn('skipped: the user-namespace-remapped engine has no bridge network (scripts/lib/common.sh ensure_remap_engine)');
      return;
    }
    // A network of the test's own, so the host has an address on it that the test made; the
    // recorder listens there, where a bridged build container could reach it.
    const network = await docker.createNetwork({ Name: `warren-redteam-build-${run}`, Driver: 'bridge' });
    let hostSide: Recorder | undefined;
    let bridged: TestController | undefined;
    try {
      const info = (await network.inspect()) as { IPAM: { Config: { Gateway: string }[] } };
      const gateway = info.IPAM.Config[0]!.Gateway;
      hostSide = await startRecorder(gateway);
      // A nonce in the step, so neither build finds the other's step in the engine's cache.
      const probe = () =>
        `FROM warren/test-debian:latest\nRUN timeout 10 bash -c 'printf "GET /run-${randomBytes(4).toString('hex')} HTTP/1.0\\r\\n\\r\\n" > /dev/tcp/${gateway}/${hostSide!.port}' && echo reached || echo unreachable\n`;
      const offline = await attempt(probe(), 'run-none');
      expect(offline).toMatchObject({ code: 'OK', built: true });
      // The engine ends a step's stderr with a colour reset (ESC [0m) before the next stdout line: drop it to read the lines.
      expect(offline.output.replaceAll(`${String.fromCharCode(27)}[0m`, '')).toMatch(/^unreachable$/m);
      expect(hostSide.connections).toBe(0);

      bridged = await startTestController({
        config: { images: { allowedRegistries: [], pull: 'never', maxPullMb: 64, maxBuildContextMb: 16, buildNetwork: 'bridge', timeoutMs: 120_000 } },
      });
      await writeFile(path.join(context, 'Dockerfile'), probe());
      const online = await new Images({ baseUrl: bridged.url, apiKey: bridged.apiKey }).build({ context, tag: `${PREFIX}run-bridge:${run}` });
      expect(online.image).toBe(`${PREFIX}run-bridge:${run}`);
      expect(hostSide.requests).toEqual([expect.stringMatching(/^GET \/run-/)]);
    } finally {
      await bridged?.[Symbol.asyncDispose]();
      await hostSide?.close();
      await network.remove();
    }
  });
});
