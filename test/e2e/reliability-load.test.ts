// Load: several sandboxes, each driven by several SDK clients at once with file and exec calls.
// Every call is answered or fails with a typed WarrenError, every write that succeeded reads back
// byte for byte, and controller and daemon memory stay bounded.
import { createHash, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox } from '@warren/sdk';
import { ControllerProcess, MiB, RawClient, sleep, typedOutcome, until } from '../support/reliability.js';

const SANDBOXES = 10;
const CLIENTS_PER_SANDBOX = 3;
const CALLS = 400;
const IN_FLIGHT = 40;

describe('load', () => {
  let warren: ControllerProcess;
  const owners: Sandbox[] = [];
  const clients: Sandbox[][] = []; // per sandbox: its owner and the extra connections

  beforeAll(async () => {
    warren = await ControllerProcess.start();
    for (let i = 0; i < SANDBOXES; i += 5) {
      owners.push(...(await Promise.all(Array.from({ length: Math.min(5, SANDBOXES - i) }, () => Sandbox.create({ ...warren.options, memoryMb: 256 })))));
    }
    for (const owner of owners) {
      const extra = await Promise.all(
        Array.from({ length: CLIENTS_PER_SANDBOX - 1 }, () => Sandbox.connect(owner.id, { baseUrl: warren.url, token: owner.token })),
      );
      clients.push([owner, ...extra]);
    }
  });
  afterAll(async () => {
    for (const group of clients) for (const c of group.slice(1)) c.close();
    await Promise.all(owners.map((s) => s.kill().catch(() => undefined)));
    await warren?.dispose();
  });

  it(`${CALLS} concurrent file and exec calls over ${SANDBOXES} sandboxes x ${CLIENTS_PER_SANDBOX} clients: all typed, no lost write, bounded memory`, async () => {
    const controllerBefore = await warren.rssBytes();
    const daemonBefore = Math.max(...(await Promise.all(owners.map(async (s) => (await s.daemonInfo()).rssBytes))));
    const outcomes = new Map<string, number>();
    const written = new Map<string, { sandbox: number; content: Buffer }>(); // path -> what a successful write put there
    const mismatches: string[] = [];
    let peakController = controllerBefore;

    const one = async (i: number): Promise<void> => {
      const s = i % SANDBOXES;
      const client = clients[s]![(i >> 3) % CLIENTS_PER_SANDBOX]!;
      const kind = i % 4;
      let call: Promise<unknown>;
      if (kind === 0 || kind === 1) {
        // A write to a path of its own, read back at once through another client of the same sandbox.
        const content = randomBytes(kind === 0 ? 200 : 256 * 1024);
        const file = `load/c${i}.bin`;
        call = (async () => {
          await client.files.write(file, content);
          written.set(file, { sandbox: s, content });
          const back = await clients[s]![(i + 1) % CLIENTS_PER_SANDBOX]!.files.read(file, { format: 'bytes' });
          if (!Buffer.from(back).equals(content)) mismatches.push(`${file}: read back ${back.length} bytes, wrote ${content.length}`);
        })();
      } else if (kind === 2) {
        const word = `w${i}`;
        call = client.commands.run(['echo', word]).then((r) => {
          if (r.stdout !== `${word}\n` || r.exitCode !== 0) mismatches.push(`echo ${word}: got ${JSON.stringify(r.stdout)} exit ${r.exitCode}`);
        });
      } else {
        call = client.commands.run('ls load 2>/dev/null | wc -l; head -c 65536 /dev/urandom | sha256sum').then((r) => {
          if (r.exitCode !== 0) mismatches.push(`exec ${i}: exit ${r.exitCode}`);
        });
      }
      const outcome = await typedOutcome(call);
      outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
    };

    let next = 0;
    const sampler = setInterval(
      () =>
        void warren.rssBytes().then(
          (r) => (peakController = Math.max(peakController, r)),
          () => undefined,
        ),
      250,
    );
    try {
      await Promise.all(
        Array.from({ length: IN_FLIGHT }, async () => {
          while (next < CALLS) await one(next++);
        }),
      );
    } finally {
      clearInterval(sampler);
    }

    // Every write that succeeded is there, byte for byte, read through a fresh connection.
    const lost: string[] = [];
    for (const [s, owner] of owners.entries()) {
      const fresh = await Sandbox.connect(owner.id, { baseUrl: warren.url, token: owner.token });
      try {
        const hashes = (await fresh.commands.run('cd load && sha256sum *')).stdout;
        for (const [file, w] of written) {
          if (w.sandbox !== s) continue;
          const want = createHash('sha256').update(w.content).digest('hex');
          if (!hashes.includes(`${want}  ${file.slice('load/'.length)}`)) lost.push(file);
        }
      } finally {
        fresh.close();
      }
    }

    const daemonAfter = await Promise.all(owners.map(async (s) => (await s.daemonInfo()).rssBytes));
    const peakDaemon = Math.max(...daemonAfter);
    peakController = Math.max(peakController, await warren.rssBytes());
    process.stderr.write(
      `[reliability] load: ${CALLS} calls ${JSON.stringify(Object.fromEntries(outcomes))}, ${written.size} writes, ${lost.length} lost; ` +
        `controller RSS ${(controllerBefore / MiB).toFixed(0)} -> peak ${(peakController / MiB).toFixed(0)} MiB; daemon RSS max ${(daemonBefore / MiB).toFixed(0)} -> ${(peakDaemon / MiB).toFixed(0)} MiB\n`,
    );

    expect([...outcomes.keys()].filter((o) => o.startsWith('UNTYPED'))).toEqual([]);
    // No faults are injected here, so every call succeeds.
    expect(Object.fromEntries(outcomes)).toEqual({ ok: CALLS });
    expect(mismatches).toEqual([]);
    expect(lost).toEqual([]);
    expect(written.size).toBe(CALLS / 2);
    // Bounds, not performance targets: a leak of the payloads (50 MiB written) would show.
    expect(peakDaemon).toBeLessThan(256 * MiB);
    expect(peakController).toBeLessThan(512 * MiB);
  });

  it('a client that stops reading a 1 GB output stream holds bounded memory, neighbours carry on, and the stream resumes when it reads again', async () => {
    const [streamer, other] = [owners[0]!, owners[1]!];
    const controllerBefore = await warren.rssBytes();
    const daemonBefore = (await streamer.daemonInfo()).rssBytes;
    const reader = await RawClient.open(warren.url, streamer.id, streamer.token);
    let peakController = controllerBefore;
    let peakDaemon = daemonBefore;
    try {
      reader.send({
        type: 'req',
        id: 1,
        method: 'process.exec',
        params: { cmd: 'head -c 1073741824 /dev/zero', stream: true, outputCapBytes: 1024, timeoutMs: 300_000 },
      });
      await until('the stream to flow', async () => ((reader.eventBytes.get('1') ?? 0) > MiB ? true : undefined), 30_000, 10);
      reader.ws.pause(); // stops reading the socket; the default 30 s heartbeat leaves it open meanwhile
      const stalledAt = reader.eventBytes.get('1') ?? 0;
      const since = Date.now();
      let round = 0;
      while (Date.now() - since < 5_000) {
        round++;
        for (const s of [streamer, other]) {
          const text = `stall ${round}`;
          await s.files.write(`stall-${round}.txt`, text);
          expect(await s.files.read(`stall-${round}.txt`)).toBe(text);
        }
        peakController = Math.max(peakController, await warren.rssBytes());
        peakDaemon = Math.max(peakDaemon, (await streamer.daemonInfo()).rssBytes);
        await sleep(200);
      }
      process.stderr.write(
        `[reliability] stalled reader (5 s, 30 s heartbeat): controller RSS ${(controllerBefore / MiB).toFixed(0)} -> peak ${(peakController / MiB).toFixed(0)} MiB, ` +
          `daemon RSS ${(daemonBefore / MiB).toFixed(0)} -> peak ${(peakDaemon / MiB).toFixed(0)} MiB, read ${(stalledAt / MiB).toFixed(1)} MiB before stalling\n`,
      );
      expect(peakController - controllerBefore).toBeLessThan(128 * MiB);
      expect(peakDaemon - daemonBefore).toBeLessThan(128 * MiB);
      // Held back, not lost: reading again, the whole gigabyte arrives and the command ends normally.
      reader.ws.resume();
      const answer = await reader.answer(1, 110_000);
      expect(answer).toMatchObject({ type: 'res', result: { exitCode: 0, stdoutBytes: 1024 * MiB } });
      expect(reader.eventBytes.get('1')).toBe(1024 * MiB);
    } finally {
      reader.close();
    }
  });
});
