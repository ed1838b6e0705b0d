import type { Readable } from 'node:stream';
import type Docker from 'dockerode';
import { LABELS } from '../labels.js';
import { rethrow } from './engine-errors.js';
import type { EngineKind } from './engine-kind.js';

/**
 * Follows the engine's container events for Warren sandboxes: `onEvent` gets each container's id
 * and action (`die`, `destroy`, ..., as Docker names them); `onEnd` runs once when the stream
 * ends, which is how an engine that stops or restarts shows itself, however briefly it was gone.
 * Resolves with a function that stops following.
 *
 * @example
 * const stop = await followEngineEvents(docker, engine, (id, action) => console.log(id, action), () => undefined);
 */
export async function followEngineEvents(
  docker: Docker,
  engine: EngineKind | undefined,
  onEvent: (handle: string, action: string) => void,
  onEnd: () => void,
): Promise<() => void> {
  // Podman (4.3) answers a label filter with no events at all: there the label is checked here,
  // on the attributes every event carries, and its `remove` is Docker's `destroy`.
  const podman = engine?.name === 'podman';
  const filters: Record<string, string[]> = podman ? { type: ['container'] } : { type: ['container'], label: [LABELS.sandbox] };
  const stream = (await docker.getEvents({ filters }).catch((e: unknown) => rethrow(e, 'follow the Docker engine events'))) as unknown as Readable;
  let buffered = '';
  stream.on('data', (chunk: Buffer) => {
    buffered += chunk.toString('utf8');
    let newline: number;
    while ((newline = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, newline);
      buffered = buffered.slice(newline + 1);
      try {
        const event = JSON.parse(line) as { id?: string; Action?: string; Actor?: { Attributes?: Record<string, string> } };
        if (!event.id || !event.Action || event.Actor?.Attributes?.[LABELS.sandbox] === undefined) continue;
        onEvent(event.id, podman && event.Action === 'remove' ? 'destroy' : event.Action);
      } catch {
        // Not an event line; the engine writes one JSON object per line.
      }
    }
  });
  let ended = false;
  const end = () => {
    if (ended) return;
    ended = true;
    onEnd();
  };
  stream.once('end', end);
  stream.once('close', end);
  stream.once('error', end);
  return () => {
    ended = true;
    stream.destroy();
  };
}
