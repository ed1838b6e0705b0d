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
    // Tenants' builds are named warren-built/<tenant>/<the name asked for>.
    for (const image of left.filter((i) => (i.RepoTags ?? []).some((t) => t.startsWith(PREFIX) || t.includes(`/${PREFIX}`))))
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

  it("two tenants each build one name into their own namespace: neither lists, removes, starts, builds FROM nor learns of the other's; an admin sees both", async () => {
    const key = async (tenant: string) => {
      const res = await fetch(`${warren.url}/v1/keys`, {
        method: 'POST',
        headers: { authorization: `Bearer ${warren.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ tenant, role: 'member' }),
      });
      return ((await res.json()) as { key: string }).key;
    };
    // `trail-` ends in a dash, which the engine takes in no image name: its namespace is trail_1.
    const [keyA, keyB, keyT] = [await key('acme'), await key('bravo'), await key('trail-')];
    const tag = `${PREFIX}same:${run}`;
    const [asA, asB, asT] = [keyA, keyB, keyT].map((apiKey) => new Images({ baseUrl: warren.url, apiKey })) as [Images, Images, Images];
    const build = async (as: Images, content: string, name = tag) => {
      const dir = path.join(context, content);
      await mkdir(dir, { recursive: true });
      // A Dockerfile's own LABEL of the tenant does not give the image away: Warren's label wins.
      await writeFile(path.join(dir, 'Dockerfile'), `FROM ${base}\nUSER root\nLABEL warren.build-tenant=bravo\nRUN echo ${content} > /a.txt\n`);
      return (await as.build({ context: dir, tag: name })).image;
    };
    const ofA = await build(asA, 'a');
    // The same name, built by B: its own image, not a CONFLICT that says A holds the name.
    const ofB = await build(asB, 'b');
    const ofT = await build(asT, 't');
    expect([ofA, ofB, ofT]).toEqual([`warren-built/acme/${tag}`, `warren-built/bravo/${tag}`, `warren-built/trail_1/${tag}`]);
    const tagsOf = async (as: Images) => (await as.list()).flatMap((i) => i.tags);
    expect(await tagsOf(asA)).toContain(ofA);
    expect(await tagsOf(asA)).not.toContain(ofB);
    expect(await tagsOf(asB)).toContain(ofB);
    expect(await tagsOf(asB)).not.toContain(ofA);
    expect(await tagsOf(images)).toEqual(expect.arrayContaining([ofA, ofB, ofT]));

    // Each tenant's name means its own build.
    const cat = async (apiKey: string, image: string) => {
      const sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey, image });
      try {
        return (await sandbox.commands.run('cat /a.txt')).stdout;
      } finally {
        await sandbox.kill();
      }
    };
    expect([await cat(keyA, tag), await cat(keyB, tag), await cat(keyT, tag)]).toEqual(['a\n', 'b\n', 't\n']);

    // A's build, named in full, answers B exactly as a name no tenant built: start, remove, FROM, COPY --from.
    const nothing = `warren-built/acme/${PREFIX}nothing:${run}`;
    const refusal = async (attempt: (image: string) => Promise<unknown>, image: string) =>
      attempt(image).then(
        () => 'OK',
        (err: { code?: string; message?: string }) => ({ code: err.code, message: err.message?.replaceAll(image, '<image>') }),
      );
    const theft = path.join(context, 'theft');
    await mkdir(theft, { recursive: true });
    const attempts: [string, (image: string) => Promise<unknown>][] = [
      ['create', (image) => Sandbox.create({ baseUrl: warren.url, apiKey: keyB, image })],
      ['remove', (image) => asB.remove(image)],
      ['pull', (image) => asB.pull(image)],
      [
        'FROM',
        async (image) => {
          await writeFile(path.join(theft, 'Dockerfile'), `FROM ${image}\n`);
          return asB.build({ context: theft, tag: `${PREFIX}stolen:${run}` });
        },
      ],
      [
        'COPY --from',
        async (image) => {
          await writeFile(path.join(theft, 'Dockerfile'), `FROM ${base}\nCOPY --from=${image} /a.txt /stolen.txt\n`);
          return asB.build({ context: theft, tag: `${PREFIX}stolen:${run}` });
        },
      ],
    ];
    for (const [door, attempt] of attempts) {
      const onA = await refusal(attempt, ofA);
      expect({ door, onA }).toEqual({ door, onA: await refusal(attempt, nothing) });
      expect({ door, onA }).not.toEqual({ door, onA: 'OK' });
    }
    expect(await imagePresent(docker, `warren-built/bravo/${PREFIX}stolen:${run}`)).toBe(false);
    // Nor can B name its build into A's namespace.
    expect(await codeOf(asB.build({ context: theft, tag: ofA }))).toBe('INVALID_PARAMS');
    expect(await cat(keyA, ofA)).toBe('a\n');

    // An admin key's build is an operator's image: named as asked, and every tenant may start it.
    const shared = await build(images, 'shared', `${PREFIX}shared:${run}`);
    expect(shared).toBe(`${PREFIX}shared:${run}`);
    expect(await cat(keyB, shared)).toBe('shared\n');
    expect(await codeOf(asB.remove(shared))).toBe('FORBIDDEN');
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
