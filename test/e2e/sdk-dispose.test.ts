import { describe, expect, it } from '@jest/globals';
import { Sandbox } from '@warren/sdk';
import { startTestController } from '../support/fixtures.js';

describe('disposal does what the handle owns', () => {
  it('a connected or derived handle only closes its connection; the created one kills the sandbox', async () => {
    await using warren = await startTestController();
    const options = { baseUrl: warren.url, apiKey: warren.apiKey };
    let id: string;
    {
      await using created = await Sandbox.create(options);
      id = created.id;
      {
        await using connected = await Sandbox.connect(id, options);
        await connected.files.write('kept.txt', 'still here');
      }
      {
        await using derived = await created.derive({ readonly: true, inherit: true });
        expect(await derived.files.read('kept.txt')).toBe('still here');
      }
      expect((await created.info()).state).toBe('running');
      expect(await created.files.read('kept.txt')).toBe('still here');
    }
    await expect(Sandbox.connect(id, options).then((s) => s.info())).rejects.toMatchObject({ code: 'SANDBOX_NOT_FOUND' });
  });
});
