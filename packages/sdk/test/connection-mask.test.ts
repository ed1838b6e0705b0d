import { describe, expect, it } from '@jest/globals';
import { masksNeeded } from '../src/connection.js';

describe('masksNeeded', () => {
  it('skips the mask only where no proxy can read the frames: TLS, unix sockets, loopback', () => {
    for (const url of [
      'wss://sandboxes.example.com/v1/sandboxes/a/connect',
      'ws+unix:///tmp/agent.sock:/',
      'ws://127.0.0.1:8080/x',
      'ws://127.1.2.3/x',
      'ws://localhost:1/x',
      'ws://[::1]:8080/x',
    ]) {
      expect([url, masksNeeded(url)]).toEqual([url, false]);
    }
  });

  it('keeps random masks for plain ws: to any other host, look-alikes and unparsable URLs included', () => {
    for (const url of [
      'ws://sandbox-host:8080/x',
      'ws://10.0.0.5/x',
      'ws://127.0.0.1.example.com/x',
      'ws://localhost.example.com/x',
      'ws://[::2]/x',
      'not a url',
    ]) {
      expect([url, masksNeeded(url)]).toEqual([url, true]);
    }
  });
});
