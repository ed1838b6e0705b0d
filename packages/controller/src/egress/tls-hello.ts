/** The largest ClientHello the gateway reads before deciding; a longer one is refused. */
export const MAX_CLIENT_HELLO_BYTES = 16 * 1024 + 5;

/** What the first bytes of a TLS connection say, as far as the gateway needs to know. */
export type ClientHelloResult = { kind: 'incomplete' } | { kind: 'not-tls' } | { kind: 'hello'; serverName: string | undefined };

/**
 * Reads the server name (SNI) from the first TLS record of a connection, without a TLS stack:
 * `incomplete` until the whole first record is in `data`, `not-tls` for anything that is not a
 * ClientHello in one record, else the host name the client asked for (undefined when it sent none).
 *
 * @example
 * const hello = parseClientHello(firstBytes);
 * if (hello.kind === 'hello' && hello.serverName === 'api.example.com') splice();
 */
export function parseClientHello(data: Buffer): ClientHelloResult {
  if (data.length < 1) return { kind: 'incomplete' };
  if (data[0] !== 0x16) return { kind: 'not-tls' };
  if (data.length < 5) return { kind: 'incomplete' };
  const recordLength = data.readUInt16BE(3);
  if (recordLength > 16 * 1024) return { kind: 'not-tls' };
  if (data.length < 5 + recordLength) return { kind: 'incomplete' };
  const record = data.subarray(5, 5 + recordLength);
  try {
    if (record[0] !== 0x01) return { kind: 'not-tls' };
    const helloLength = (record[1]! << 16) | (record[2]! << 8) | record[3]!;
    if (helloLength + 4 > record.length) return { kind: 'not-tls' }; // a hello spread over records
    let at = 4 + 2 + 32; // type+length, client_version, random
    at += 1 + record[at]!; // session id
    at += 2 + record.readUInt16BE(at); // cipher suites
    at += 1 + record[at]!; // compression methods
    if (at >= 4 + helloLength) return { kind: 'hello', serverName: undefined };
    const extensionsEnd = at + 2 + record.readUInt16BE(at);
    at += 2;
    while (at + 4 <= extensionsEnd) {
      const type = record.readUInt16BE(at);
      const length = record.readUInt16BE(at + 2);
      at += 4;
      if (type === 0) {
        const listEnd = at + 2 + record.readUInt16BE(at);
        let p = at + 2;
        while (p + 3 <= listEnd) {
          const nameType = record[p]!;
          const nameLength = record.readUInt16BE(p + 1);
          if (nameType === 0) return { kind: 'hello', serverName: record.subarray(p + 3, p + 3 + nameLength).toString('latin1') };
          p += 3 + nameLength;
        }
        return { kind: 'hello', serverName: undefined };
      }
      at += length;
    }
    return { kind: 'hello', serverName: undefined };
  } catch {
    return { kind: 'not-tls' };
  }
}
