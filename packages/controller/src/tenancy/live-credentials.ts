import type { Caller } from '../grants.js';
import type { KeyStore } from './principals.js';

/** What can be ended: an open WebSocket, or a daemon session a port tunnel or an E2B stream rides. */
export interface Closable {
  close(code: number, reason: string): void;
}

/**
 * The open connections by the credentials they depend on (the API key, the key that minted a
 * derived token or created the sandbox whose token it is, the derived token itself), so that
 * revoking or rotating a key, or revoking a token, closes what they opened at once (1008): the
 * WebSockets of clients, and the daemon sessions under port tunnels and E2B streams.
 *
 * @example
 * const live = new LiveCredentials(credentials.keys);
 * const forget = live.track(client, caller, record);
 * client.once('close', forget);
 */
export class LiveCredentials {
  private readonly open = new Map<string, Set<Closable>>();
  private readonly stop: () => void;

  constructor(private readonly keys: KeyStore) {
    this.stop = keys.onEnd((id, why) => {
      for (const connection of this.open.get(id) ?? [])
        connection.close(
          1008,
          why === 'token-revoked' ? 'The token of this connection was revoked.' : 'The API key of this connection was revoked or rotated.',
        );
      this.open.delete(id);
    });
  }

  /** Remembers a connection under every credential it depends on; returns what forgets it. */
  track(connection: Closable, caller: Caller, record: SandboxOwner): () => void {
    const ids = dependsOn(caller, record, this.keys);
    for (const id of ids) {
      const set = this.open.get(id) ?? new Set();
      set.add(connection);
      this.open.set(id, set);
    }
    return () => {
      for (const id of ids) {
        const set = this.open.get(id);
        set?.delete(connection);
        if (set?.size === 0) this.open.delete(id);
      }
    };
  }

  close(): void {
    this.stop();
  }
}

/** What of a sandbox's record a connection's credentials depend on: its id (its own token's) and the key that created it. */
export interface SandboxOwner {
  id: string;
  creatorKeyId?: string | undefined;
}

function dependsOn(caller: Caller, record: SandboxOwner, keys: KeyStore): string[] {
  if (caller.kind === 'operator') return [caller.keyId];
  if (caller.kind === 'sandbox') return [keys.sandboxTokenId(record.id), ...(record.creatorKeyId === undefined ? [] : [record.creatorKeyId])];
  return [caller.keyId, caller.tokenId, ...(caller.ancestors ?? [])].filter((id): id is string => id !== undefined);
}
