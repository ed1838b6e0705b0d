import { describe, expect, it } from '@jest/globals';
import { containerLabels, LABELS, sandboxLabels, UNSET_LABEL, withoutUnset } from '../src/labels.js';
import { recordFromLabels } from '../src/sandbox-table.js';

describe("a sandbox's container labels: only Warren speaks for Warren", () => {
  const own = sandboxLabels({
    id: 'abc',
    owner: 'me',
    image: 'templates/evil:latest',
    createdAt: new Date(0),
    expiresAt: new Date(60_000),
    settings: { cpus: 1, memoryMb: 512, pidsLimit: 64, network: 'none', runtime: 'runc', user: '1000:1000', workdir: '/workspace', ttlSeconds: 60, mounts: [] },
    labels: { team: 'mine' },
  });
  const image = {
    [LABELS.policy]: JSON.stringify({ root: '/', readOnly: false }),
    [LABELS.pool]: '1',
    [LABELS.owner]: 'someone-else',
    [LABELS.expiresAt]: '2999-01-01T00:00:00.000Z',
    'warren.label.team': 'theirs',
    'warren.label.extra': 'planted',
    'warren.snapshot': 'snap-1',
    'warren.anything-later': 'x',
    'org.opencontainers.image.title': 'kept: not under the prefix',
  };

  it("marks every label under Warren's prefix that the image carries and Warren does not set as unset, and keeps Warren's own values", () => {
    const labels = containerLabels(image, own);
    for (const key of [LABELS.policy, LABELS.pool, 'warren.label.extra', 'warren.snapshot', 'warren.anything-later']) expect(labels[key]).toBe(UNSET_LABEL);
    expect(labels[LABELS.owner]).toBe('me');
    expect(labels[LABELS.expiresAt]).toBe(own[LABELS.expiresAt]);
    expect(labels['warren.label.team']).toBe('mine');
    expect(labels).not.toHaveProperty('org.opencontainers.image.title');
  });

  it('a record rebuilt from the merged labels (as the engine merges them) takes nothing from the image', () => {
    const merged = withoutUnset({ ...image, ...containerLabels(image, own) });
    const record = recordFromLabels('abc', 'handle', merged, 'running');
    expect(record.policy).toBeUndefined();
    expect(record.labels).toEqual({ team: 'mine' });
    expect(merged[LABELS.pool]).toBeUndefined();
    expect(merged[LABELS.owner]).toBe('me');
    expect(record.expiresAt).toEqual(new Date(60_000));
  });
});
