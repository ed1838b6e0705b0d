import { describe, expect, it } from '@jest/globals';
import { buildTag, checkAllowed, isAllowed, parseAllowList, parseImageRef } from '../src/image-ref.js';

const HEX = 'a'.repeat(64);
const hubOnly = parseAllowList(['docker.io']);

describe('parseImageRef reads references as the engine does', () => {
  it.each([
    ['alpine', 'docker.io', 'library/alpine', 'docker.io/library/alpine:latest'],
    ['alpine:3.20', 'docker.io', 'library/alpine', 'docker.io/library/alpine:3.20'],
    ['warren/sandbox:latest', 'docker.io', 'warren/sandbox', 'docker.io/warren/sandbox:latest'],
    ['docker.io/alpine', 'docker.io', 'library/alpine', 'docker.io/library/alpine:latest'],
    ['index.docker.io/library/alpine', 'docker.io', 'library/alpine', 'docker.io/library/alpine:latest'],
    ['DOCKER.IO/library/alpine', 'docker.io', 'library/alpine', 'docker.io/library/alpine:latest'],
    ['ghcr.io/org/tool:v1', 'ghcr.io', 'org/tool', 'ghcr.io/org/tool:v1'],
    ['localhost:5000/x', 'localhost:5000', 'x', 'localhost:5000/x:latest'],
    ['localhost/x', 'localhost', 'x', 'localhost/x:latest'],
    ['127.0.0.1:5000/a/b', '127.0.0.1:5000', 'a/b', '127.0.0.1:5000/a/b:latest'],
    ['[::1]:5000/x', '[::1]:5000', 'x', '[::1]:5000/x:latest'],
    [`alpine@sha256:${HEX}`, 'docker.io', 'library/alpine', `docker.io/library/alpine@sha256:${HEX}`],
    [`alpine:3@sha256:${HEX}`, 'docker.io', 'library/alpine', `docker.io/library/alpine:3@sha256:${HEX}`],
    ['a__b/c-d.e_f:T.1-x', 'docker.io', 'a__b/c-d.e_f', 'docker.io/a__b/c-d.e_f:T.1-x'],
  ])('%s is %s / %s', (reference, registry, path, canonical) => {
    expect(parseImageRef(reference)).toMatchObject({ registry, path, canonical });
  });

  it.each([
    ['empty', ''],
    ['upper case in the path', 'Alpine'],
    ['upper case below a registry', 'ghcr.io/Org/tool'],
    ['a URL', 'https://evil.com/x'],
    ['user info', 'user@evil.com/x'],
    ['whitespace', 'alpine latest'],
    ['a newline', 'alpine\nevil.com/x'],
    ['a NUL byte', 'alpine\0'],
    ['a leading dash (an option to a command line)', '-alpine'],
    ['a double slash', 'docker.io//alpine'],
    ['a trailing slash', 'alpine/'],
    ['a .. part', 'docker.io/../x'],
    ['a double separator', 'a..b'],
    ['a short digest', 'alpine@sha256:abc'],
    ['an upper-case digest', `alpine@sha256:${'A'.repeat(64)}`],
    ['an unknown digest algorithm', `alpine@md5:${HEX}`],
    ['two digests', `alpine@sha256:${HEX}@sha256:${HEX}`],
    ['a tag starting with a dot', 'alpine:.x'],
    ['a tag of 129 characters', `alpine:${'t'.repeat(129)}`],
    ['a port of 0', 'localhost:0/x'],
    ['a port over 65535', 'localhost:65536/x'],
    ['a port with a leading zero', 'localhost:05000/x'],
    ['a host with a trailing dot', 'docker.io./x'],
    ['a host starting with a dash', '-evil.com/x'],
    ['a 64-hex name, which reads as an id', HEX],
    ['a name over 255 characters', `a/${'b'.repeat(260)}`],
    ['only a tag', ':latest'],
    ['a backslash', 'docker.io\\evil/x'],
  ])('refuses %s with IMAGE_NOT_ALLOWED', (_why, reference) => {
    expect(() => parseImageRef(reference)).toThrow(expect.objectContaining({ code: 'IMAGE_NOT_ALLOWED' }));
  });
});

describe('the registry allow-list', () => {
  it.each([
    'evil.com/library/alpine',
    'evil.com/alpine',
    'localhost:5000/x',
    'localhost/x',
    '127.0.0.1/x',
    '[::1]:5000/x',
    'docker.io:443/library/alpine',
    'registry-1.docker.io/library/alpine',
    'docker.io.evil.com/library/alpine',
    'evil.docker.io/library/alpine',
    'Evil/alpine', // upper case in the first part makes it a registry host, as for the engine
    `evil.com/library/alpine@sha256:${HEX}`,
  ])('with docker.io only, %s is refused before any pull', (reference) => {
    const ref = parseImageRef(reference);
    expect(isAllowed(ref, hubOnly)).toBe(false);
    expect(() => checkAllowed(ref, hubOnly, reference)).toThrow(expect.objectContaining({ code: 'IMAGE_NOT_ALLOWED' }));
  });

  it.each(['alpine', 'docker.io/library/alpine', 'index.docker.io/library/alpine:3', 'DOCKER.IO/someone/tool', `python@sha256:${HEX}`])(
    'with docker.io only, %s is allowed',
    (reference) => {
      expect(isAllowed(parseImageRef(reference), hubOnly)).toBe(true);
    },
  );

  it('matches a path prefix on whole path parts only', () => {
    const allowed = parseAllowList(['ghcr.io/acme', 'docker.io/library']);
    expect(isAllowed(parseImageRef('ghcr.io/acme/tool'), allowed)).toBe(true);
    expect(isAllowed(parseImageRef('ghcr.io/acme-evil/tool'), allowed)).toBe(false);
    expect(isAllowed(parseImageRef('ghcr.io/acme'), allowed)).toBe(true);
    expect(isAllowed(parseImageRef('alpine'), allowed)).toBe(true);
    expect(isAllowed(parseImageRef('someone/alpine'), allowed)).toBe(false);
  });

  it('compares a registry with its port, so 127.0.0.1:5000 allows no other port', () => {
    const allowed = parseAllowList(['127.0.0.1:5000']);
    expect(isAllowed(parseImageRef('127.0.0.1:5000/x'), allowed)).toBe(true);
    expect(isAllowed(parseImageRef('127.0.0.1:5001/x'), allowed)).toBe(false);
    expect(isAllowed(parseImageRef('127.0.0.1/x'), allowed)).toBe(false);
  });

  it("never pulls Warren's own image names from Docker Hub, whatever the list allows (a missing one is built, not fetched)", () => {
    const hub = parseAllowList(['docker.io']);
    for (const name of ['warren/sandbox:latest', 'warren/e2b-base', 'docker.io/warren/sandbox', 'index.docker.io/warren/test-busybox:latest'])
      expect(() => checkAllowed(parseImageRef(name), hub, name)).toThrow(/Warren's own, which are built on the engine and never pulled/);
    expect(() => checkAllowed(parseImageRef('ghcr.io/warren/sandbox'), parseAllowList(['ghcr.io']), 'ghcr.io/warren/sandbox')).not.toThrow();
    expect(() => checkAllowed(parseImageRef('warrenx/sandbox'), hub, 'warrenx/sandbox')).not.toThrow();
  });

  it('an empty list allows no pull, and says so', () => {
    expect(() => checkAllowed(parseImageRef('alpine'), [], 'alpine')).toThrow(/pulls nothing \(allowedRegistries is empty\)/);
  });

  it('names what is allowed in the refusal', () => {
    expect(() => checkAllowed(parseImageRef('evil.com/x'), parseAllowList(['docker.io', 'ghcr.io/acme']), 'evil.com/x')).toThrow(
      /pulls only from: docker\.io, ghcr\.io\/acme/,
    );
  });

  it.each(['https://docker.io', 'docker.io/Library', '', 'docker.io/', 'evil com'])('refuses the configuration entry %j', (entry) => {
    expect(() => parseAllowList([entry])).toThrow(/allowedRegistries/);
  });

  it('folds Docker Hub aliases in the configuration', () => {
    expect(parseAllowList(['INDEX.docker.io'])).toEqual([{ registry: 'docker.io', pathPrefix: undefined }]);
  });
});

describe('buildTag', () => {
  it('adds :latest and keeps a tag', () => {
    expect(buildTag('my-template')).toBe('my-template:latest');
    expect(buildTag('team/tools:1')).toBe('team/tools:1');
  });

  it.each(['ghcr.io/acme/x', 'docker.io/library/alpine', 'localhost:5000/x', `x@sha256:${HEX}`, 'My-Template', '../x', 'x y'])(
    'refuses %j with INVALID_PARAMS',
    (name) => {
      expect(() => buildTag(name)).toThrow(expect.objectContaining({ code: 'INVALID_PARAMS' }));
    },
  );
});
