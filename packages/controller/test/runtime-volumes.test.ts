import { describe, expect, it } from '@jest/globals';
import type Docker from 'dockerode';
import { DockerProvider } from '../src/docker/provider.js';

/** A dockerode stand-in with volumes only: which exist, which are mounted (removal refused). */
function fakeEngine(volumes: { Name: string; CreatedAt: string; inUse?: boolean }[]) {
  const removed: string[] = [];
  const engine = {
    listVolumes: async () => ({ Volumes: volumes, Warnings: [] }),
    getVolume: (name: string) => ({
      remove: async () => {
        if (volumes.find((v) => v.Name === name)?.inUse) throw Object.assign(new Error('volume is in use'), { statusCode: 409 });
        removed.push(name);
      },
    }),
  };
  return { docker: new DockerProvider({ docker: engine as unknown as Docker }), removed };
}

const hoursAgo = (h: number) => new Date(Date.now() - h * 3_600_000).toISOString();

describe('removeOldRuntimeVolumes', () => {
  it('removes earlier builds an hour old or more, never the current one, a young one or one still mounted', async () => {
    const { docker, removed } = fakeEngine([
      { Name: 'warren-runtime-current', CreatedAt: hoursAgo(5) },
      { Name: 'warren-runtime-old', CreatedAt: hoursAgo(2) },
      { Name: 'warren-runtime-young', CreatedAt: hoursAgo(0.1) },
      { Name: 'warren-runtime-mounted', CreatedAt: hoursAgo(3), inUse: true },
      { Name: 'warren-runtime-undated', CreatedAt: '' },
    ]);
    expect(await docker.runtimeVolumes.removeOld('warren-runtime-current')).toEqual(['warren-runtime-old']);
    expect(removed).toEqual(['warren-runtime-old']);
  });
});
