import os from 'node:os';
import { describe, expect, it } from '@jest/globals';
import { Kernel, type RunSink } from '../src/services/code-kernel.js';

/** A scripted stand-in for the bridge: `script` is sh that answers the daemon's lines. */
function fake(script: string): Promise<Kernel> {
  return Kernel.start({ language: 'python', cwd: os.tmpdir(), home: os.tmpdir(), command: ['/bin/sh', '-c', script] }, 5_000);
}

function recorder(): RunSink & { seen: string[] } {
  const seen: string[] = [];
  return {
    seen,
    stream: (name, bytes, omitted) => seen.push(`${name}:${bytes.toString('utf8')}:${omitted}`),
    display: (data, main) => seen.push(`display:${String(data['text/plain'])}:${main}`),
    error: (name) => seen.push(`error:${name}`),
  };
}

describe('Kernel (the daemon side of a bridge)', () => {
  it('ignores forged and off-contract messages, takes other lines as the cell output, and ends on its own done', async () => {
    const kernel = await fake(
      [
        `echo '{"t":"ready"}'`,
        'read line',
        `echo '{"t":"done","id":"r9","count":1,"status":"ok"}'`,
        `echo '{"t":"display","id":1}'`,
        'echo not json',
        `echo '{"t":"stream","id":"r1","name":"stdout","text":"hi","omitted":5}'`,
        `echo '{"t":"display","id":"r1","main":true,"data":{"text/plain":"7"},"clipped":false}'`,
        `echo '{"t":"done","id":"r1","count":3,"status":"ok"}'`,
        'read line',
      ].join('\n'),
    );
    try {
      const sink = recorder();
      expect(await kernel.run('x', sink)).toEqual({ executionCount: 3, status: 'ok' });
      expect(sink.seen).toEqual(['stdout:{"t":"display","id":1}\n:0', 'stdout:not json\n:0', 'stdout:hi:5', 'display:7:true']);
    } finally {
      await kernel.stop();
    }
  });

  it('rejects the running cell with KERNEL_DIED when the kernel exits, and refuses later runs', async () => {
    const kernel = await fake(`echo '{"t":"ready"}'; read line; kill -9 $$`);
    await expect(kernel.run('x', recorder())).rejects.toMatchObject({ code: 'KERNEL_DIED', message: expect.stringContaining('SIGKILL') });
    expect(kernel.alive).toBe(false);
    await expect(kernel.run('y', recorder())).rejects.toMatchObject({ code: 'KERNEL_DIED' });
  });

  it('says why a kernel could not start, from its fatal message or its silence', async () => {
    await expect(fake(`echo '{"t":"fatal","message":"no ipykernel here"}'; sleep 1`)).rejects.toMatchObject({
      code: 'KERNEL_DIED',
      message: expect.stringContaining('no ipykernel here'),
    });
    await expect(Kernel.start({ language: 'python', cwd: os.tmpdir(), home: os.tmpdir(), command: ['/bin/sh', '-c', 'sleep 30'] }, 300)).rejects.toMatchObject({
      code: 'KERNEL_DIED',
      message: expect.stringContaining('did not become ready within 300 ms'),
    });
  });
});
