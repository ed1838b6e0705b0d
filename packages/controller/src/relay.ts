import type { WebSocket } from 'ws';

/** Hooks of {@link relay}. */
export interface RelayOptions {
  /** Checks each client frame; a returned frame (an error answer) goes back to the client instead of the frame going on. */
  allowFrame?: ((data: Buffer) => Buffer | undefined) | undefined;
}

/**
 * Passes frames both ways exactly as they are: the daemon validates them, and the controller
 * never re-encodes a payload. Either side closing closes the other, which cancels the calls the
 * daemon was running for this client.
 */
export function relay(client: WebSocket, agent: WebSocket, options: RelayOptions = {}): void {
  client.on('message', (data: Buffer, isBinary: boolean) => {
    const refusal = options.allowFrame?.(data);
    if (refusal) {
      if (client.readyState === client.OPEN) client.send(refusal, { binary: true });
      return;
    }
    if (agent.readyState === agent.OPEN) agent.send(data, { binary: isBinary });
  });
  agent.on('message', (data: Buffer, isBinary: boolean) => {
    if (client.readyState === client.OPEN) client.send(data, { binary: isBinary });
  });
  const closeBoth = () => {
    if (client.readyState !== client.CLOSED) client.close();
    if (agent.readyState !== agent.CLOSED) agent.close();
  };
  client.on('close', closeBoth);
  agent.on('close', closeBoth);
  client.on('error', () => client.terminate());
  agent.on('error', () => agent.terminate());
}
