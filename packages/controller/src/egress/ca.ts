import { webcrypto } from 'node:crypto';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import tls from 'node:tls';
import type * as X509 from '@peculiar/x509';

type CryptoKey = webcrypto.CryptoKey;
type CryptoKeyPair = webcrypto.CryptoKeyPair;
const crypto = webcrypto;
let x509Module: Promise<typeof X509> | undefined;

/**
 * @peculiar/x509, loaded on first use (making a CA, or the first intercepted host's leaf): it
 * costs a process about 23 MiB of RSS, which a controller whose sandboxes never have TLS
 * intercepted would carry for nothing. It resolves its parts through tsyringe, which needs the
 * Reflect metadata API loaded first.
 */
function loadX509(): Promise<typeof X509> {
  x509Module ??= (async () => {
    await import('reflect-metadata');
    const x509 = await import('@peculiar/x509');
    x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);
    return x509;
  })();
  return x509Module;
}
const EC = { name: 'ECDSA', namedCurve: 'P-256' } as const;
const SIGN = { name: 'ECDSA', hash: 'SHA-256' } as const;
/** File names in the CA folder. */
export const EGRESS_CA_KEY_FILE = 'egress-ca.key';
export const EGRESS_CA_CERT_FILE = 'egress-ca.pem';
const LEAF_HOURS = 24;
const MAX_CACHED_LEAVES = 1000;

function pem(label: string, der: ArrayBuffer): string {
  const b64 = Buffer.from(der).toString('base64');
  return `-----BEGIN ${label}-----\n${b64.replace(/.{64}/g, '$&\n').replace(/\n?$/, '\n')}-----END ${label}-----\n`;
}

function derOf(text: string): Buffer {
  return Buffer.from(text.replace(/-----[^-]+-----/g, '').replace(/\s+/g, ''), 'base64');
}

/**
 * The controller's own certificate authority for TLS interception: one ECDSA P-256 key and a
 * self-signed certificate, kept in the state folder (the key mode 0600) and never put in a
 * sandbox; sandboxes get only {@link EgressCa.certPem} for their trust stores. Leaf certificates
 * are minted per host on first use, valid for a day, and cached.
 *
 * @example
 * const ca = await EgressCa.loadOrCreate('/var/lib/warren');
 * const context = await ca.contextFor('api.example.com'); // a tls.SecureContext for the sandbox side
 */
export class EgressCa {
  readonly #leaves = new Map<string, { context: tls.SecureContext; expires: number }>();
  #leafKey: Promise<{ keys: CryptoKeyPair; pem: string }> | undefined;

  /** The certificate parsed, on the first leaf (a loaded CA is kept as its PEM until then). */
  #cert: X509.X509Certificate | undefined;
  readonly #key: CryptoKey;

  private constructor(
    readonly certPem: string,
    cert: X509.X509Certificate | undefined,
    key: CryptoKey,
  ) {
    this.#cert = cert;
    this.#key = key;
  }

  /** Reads the CA from `dir`, or makes one there (10 years) when there is none. */
  static async loadOrCreate(dir: string): Promise<EgressCa> {
    const keyFile = path.join(dir, EGRESS_CA_KEY_FILE);
    const certFile = path.join(dir, EGRESS_CA_CERT_FILE);
    let keyPem: string | undefined;
    try {
      keyPem = await readFile(keyFile, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    if (keyPem !== undefined) {
      return EgressCa.fromPem(keyPem, await readFile(certFile, 'utf8'));
    }
    const ca = await EgressCa.create();
    await mkdir(dir, { recursive: true, mode: 0o700 });
    await writeFile(keyFile, ca.keyPem, { mode: 0o600, flag: 'wx' });
    await chmod(keyFile, 0o600);
    await writeFile(certFile, ca.ca.certPem, { mode: 0o644 });
    return ca.ca;
  }

  /**
   * The CA shared by controller replicas: the stored one, or a new one stored first-writer-wins
   * (the replica whose write loses uses the winner's).
   */
  static async shared(store: {
    egressCa(make: () => Promise<{ keyPem: string; certPem: string }>): Promise<{ keyPem: string; certPem: string }>;
  }): Promise<EgressCa> {
    const { keyPem, certPem } = await store.egressCa(async () => {
      const made = await EgressCa.create();
      return { keyPem: made.keyPem, certPem: made.ca.certPem };
    });
    return EgressCa.fromPem(keyPem, certPem);
  }

  /** A CA from its PKCS#8 key and certificate (PEM). */
  static async fromPem(keyPem: string, certPem: string): Promise<EgressCa> {
    const key = await crypto.subtle.importKey('pkcs8', derOf(keyPem), EC, false, ['sign']);
    return new EgressCa(certPem, undefined, key);
  }

  /** A fresh CA in memory (tests; `loadOrCreate` for the controller). */
  static async create(): Promise<{ ca: EgressCa; keyPem: string }> {
    const x509 = await loadX509();
    const keys = await crypto.subtle.generateKey(EC, true, ['sign', 'verify']);
    const now = Date.now();
    const cert = await x509.X509CertificateGenerator.createSelfSigned({
      name: 'CN=Warren egress CA',
      keys,
      signingAlgorithm: SIGN,
      notBefore: new Date(now - 3600_000),
      notAfter: new Date(now + 10 * 365 * 24 * 3600_000),
      extensions: [
        new x509.BasicConstraintsExtension(true, 0, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      ],
    });
    const keyPem = pem('PRIVATE KEY', await crypto.subtle.exportKey('pkcs8', keys.privateKey));
    return { ca: new EgressCa(cert.toString('pem'), cert, keys.privateKey), keyPem };
  }

  /** A TLS context presenting a leaf for `host` signed by this CA (cached until an hour before it expires). */
  async contextFor(host: string, now = Date.now()): Promise<tls.SecureContext> {
    const cached = this.#leaves.get(host);
    if (cached && cached.expires > now + 3600_000) return cached.context;
    this.#leafKey ??= (async () => {
      const keys = await crypto.subtle.generateKey(EC, true, ['sign', 'verify']);
      return { keys, pem: pem('PRIVATE KEY', await crypto.subtle.exportKey('pkcs8', keys.privateKey)) };
    })();
    const leafKey = await this.#leafKey;
    const x509 = await loadX509();
    const cert = (this.#cert ??= new x509.X509Certificate(this.certPem));
    const expires = now + LEAF_HOURS * 3600_000;
    const leaf = await x509.X509CertificateGenerator.create({
      subject: `CN=${host}`,
      issuer: cert.subject,
      publicKey: leafKey.keys.publicKey,
      signingKey: this.#key,
      signingAlgorithm: SIGN,
      notBefore: new Date(now - 3600_000),
      notAfter: new Date(expires),
      extensions: [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
        new x509.SubjectAlternativeNameExtension([{ type: 'dns', value: host }]),
        await x509.AuthorityKeyIdentifierExtension.create(cert.publicKey),
      ],
    });
    const context = tls.createSecureContext({ key: leafKey.pem, cert: `${leaf.toString('pem').trim()}\n${this.certPem}`, minVersion: 'TLSv1.2' });
    if (this.#leaves.size >= MAX_CACHED_LEAVES) this.#leaves.delete(this.#leaves.keys().next().value as string);
    this.#leaves.set(host, { context, expires });
    return context;
  }
}
