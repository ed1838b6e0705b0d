import { describe, expect, it } from '@jest/globals';
import { checkOnBuildTriggers, dockerfileNeeds } from '../src/dockerfile-check.js';

const refused = expect.objectContaining({ code: 'INVALID_PARAMS' });
const URL = 'http://169.254.169.254/latest/meta-data';

describe('dockerfileNeeds: the images a build starts from and copies from', () => {
  it('lists base and --from images, not stages, scratch or stage numbers', () => {
    const text = [
      'ARG X=1',
      'FROM --platform=linux/amd64 golang:1.22 AS build',
      'RUN go build \\',
      '  ./...',
      'FROM scratch',
      'COPY --from=build /out /out',
      'COPY --from=0 /a /a',
      'COPY --from=busybox:1 /bin/sh /sh',
      'FROM build AS again',
    ].join('\n');
    expect(dockerfileNeeds(text)).toEqual({ images: ['golang:1.22', 'busybox:1'], bases: ['golang:1.22'] });
  });

  it('reads names as the engine resolves them: a stage is known once finished, a FROM of a number is an image', () => {
    // Inside stage `a`, `--from=a` is an image the engine would pull; so is a stage named only later.
    expect(dockerfileNeeds('FROM alpine AS a\nCOPY --from=a /x /x\nCOPY --from=later /y /y\nFROM alpine AS later').images).toEqual(['alpine', 'a', 'later']);
    expect(dockerfileNeeds('FROM 0').bases).toEqual(['0']);
    expect(dockerfileNeeds('FROM alpine AS Base\nFROM BASE').bases).toEqual(['alpine']);
  });

  it('takes the bytes of the file, and refuses bytes that are not UTF-8', () => {
    expect(dockerfileNeeds(Buffer.from('\ufeffFROM alpine\n')).images).toEqual(['alpine']);
    expect(() => dockerfileNeeds(Buffer.from([0x46, 0x52, 0x4f, 0x4d, 0x20, 0xff, 0x0a]))).toThrow(refused);
  });
});

describe('dockerfileNeeds: nothing the engine would fetch by itself', () => {
  it.each([
    ['ADD of a URL', `FROM alpine\nADD ${URL} /x`],
    ['ADD of a URL in JSON form', 'FROM alpine\nADD ["https://example.com/a", "/a"]'],
    ['ADD of a git repository', 'FROM alpine\nADD git@github.com:org/repo.git /src'],
    ['ADD of an ARG value', `FROM alpine\nARG U=${URL}\nADD $U /x`],
    ['ADD of an ENV value', `FROM alpine\nENV U=${URL}\nADD \${U} /x`],
    ['ADD of a default value', `FROM alpine\nADD \${NOPE:-${URL}} /x`],
    ['ADD with a JSON-escaped scheme', 'FROM alpine\nADD ["h\\u0074tp://10.0.0.1/x", "/x"]'],
    ['ADD with a JSON-escaped colon', 'FROM alpine\nADD ["http\\u003a//10.0.0.1/x", "/x"]'],
    ['ADD of a quoted URL', `FROM alpine\nADD "${URL}" /x`],
    ['ADD of a single-quoted URL', `FROM alpine\nADD '${URL}' /x`],
    ['ADD with a backslash in the scheme', 'FROM alpine\nADD h\\ttp://10.0.0.1/x /x'],
    ['ADD of a URL split by a continuation', 'FROM alpine\nADD http:/\\\n/10.0.0.1/x /x'],
    ['ADD of a URL split across a comment and a blank line', 'FROM alpine\nADD htt\\\n# note\n\np://10.0.0.1/x /x'],
    ['ADD --checksum of a URL', `FROM alpine\nADD --checksum=sha256:${'0'.repeat(64)} ${URL} /x`],
    ['ADD --keep-git-dir', 'FROM alpine\nADD --keep-git-dir=true repo /x'],
    ['ADD with one argument', 'FROM alpine\nADD onlyone'],
    ['a lower-case add keyword', `FROM alpine\nadd ${URL} /x`],
  ])('refuses %s', (_why, text) => {
    expect(() => dockerfileNeeds(text)).toThrow(refused);
  });

  it('names the instruction and its line in the refusal', () => {
    expect(() => dockerfileNeeds(`FROM alpine\nRUN true\nADD $U /x`)).toThrow(
      expect.objectContaining({ code: 'INVALID_PARAMS', details: { instruction: 'ADD $U /x', line: 3 }, message: expect.stringMatching(/line 3.*plain path/) }),
    );
  });

  it.each([
    ['an escape directive', '# escape=`\nFROM alpine\nRUN echo \\\nADD http://10.0.0.1/x /x'],
    ['an escape directive with a backslash', '# escape=\\\nFROM alpine'],
    ['an escape directive in capitals with spaces', '  #  ESCAPE =  `\nFROM alpine'],
    ['an escape directive after a byte order mark', '\ufeff# escape=`\nFROM alpine'],
    ['a syntax directive (a frontend image)', '# syntax=docker/dockerfile:1\nFROM alpine'],
    ['a syntax directive naming a registry', '#syntax=10.0.0.1:5000/frontend\nFROM alpine'],
  ])('refuses %s', (_why, text) => {
    expect(() => dockerfileNeeds(text)).toThrow(refused);
  });

  it.each([
    ['ONBUILD ADD of a URL (a later FROM of the stage runs it in this build)', `FROM alpine AS a\nONBUILD ADD ${URL} /x\nFROM a`],
    ['ONBUILD with a variable (stored after expansion)', 'FROM alpine\nARG C=true\nONBUILD RUN $C'],
    ['ONBUILD with an escape (stored after expansion)', 'FROM alpine\nONBUILD ADD h\\ttp://10.0.0.1/x /x'],
    ['ONBUILD COPY --from', 'FROM alpine\nONBUILD COPY --from=busybox /bin/sh /sh'],
    ['ONBUILD ONBUILD', 'FROM alpine\nONBUILD ONBUILD RUN true'],
    ['ONBUILD FROM', 'FROM alpine\nONBUILD FROM busybox'],
    ['flags on ONBUILD', 'FROM alpine\nONBUILD --x=1 RUN true'],
  ])('refuses %s', (_why, text) => {
    expect(() => dockerfileNeeds(text)).toThrow(refused);
  });

  it.each([
    ['a variable image', 'ARG BASE=alpine\nFROM ${BASE}'],
    ['a quoted image', 'FROM "alpine"'],
    ['an escaped image', 'FROM al\\pine'],
    ['a variable --from', 'FROM alpine\nCOPY --from=$IMG /a /a'],
    ['a --from with quotes', 'FROM alpine\nCOPY --from="10.0.0.1:5000/x" /a /a'],
    ['a --from with its value as the next word', 'FROM alpine\nCOPY --from 10.0.0.1:5000/x /a /a'],
    // The engine reads flags byte by byte and takes the 0xA0 inside `à` for a space: `--from=` would be a flag of its own.
    ['a flag hidden behind a non-ASCII character', 'FROM alpine\nCOPY --chown=0à--from=10.0.0.1:5000/x /a /b'],
    ['a flag with a backslash', 'FROM alpine\nCOPY --chown=a\\ --from=10.0.0.1:5000/x /a /b'],
    ['FROM --platform of another platform', 'FROM --platform=linux/arm64 alpine'],
    ['RUN --mount (BuildKit only)', 'FROM alpine\nRUN --mount=type=cache,from=node:20,target=/x true'],
    ['RUN --network', 'FROM alpine\nRUN --network=host true'],
    ['COPY --link (BuildKit only)', 'FROM alpine\nCOPY --link a /a'],
    ['an unknown instruction', 'FROM alpine\nFETCH http://10.0.0.1/x'],
    ['a keyword with a non-ASCII letter', `FROM alpine\nONBU\u0130LD ADD ${URL} /x`],
    ['a heredoc, whose body the classic builder reads as instructions', `FROM alpine\nRUN <<EOF\nADD ${URL} /x\nEOF`],
    ['an instruction named like an object property', 'FROM alpine\nCONSTRUCTOR x'],
    ['a flag named like an object property', 'FROM alpine\nCOPY --constructor=x a /b'],
    ['a flag named like an object property, without a value', 'FROM alpine\nCOPY --toString a /b'],
    ['FROM with two words', 'FROM alpine busybox'],
    ['no FROM', 'RUN true'],
    ['an instruction before FROM', 'RUN true\nFROM alpine'],
  ])('refuses %s', (_why, text) => {
    expect(() => dockerfileNeeds(text)).toThrow(refused);
  });

  it('allows what names only context files, and leaves RUN to the build network', () => {
    const text = [
      'FROM alpine AS base',
      'LABEL org.opencontainers.image.source=https://github.com/org/repo',
      'ENV HOME=/home/app',
      'ADD app.tar.gz /app',
      'ADD ./src /src',
      'ADD --chown=1000:1000 --chmod=644 a.txt b.txt $HOME/',
      'ADD ["my file.txt", "/opt/my file.txt"]',
      'FROM base',
      'COPY --from=base --chown=app /etc/hosts /x',
      '# a comment that mentions escape=` is not a directive',
      'RUN curl -fsS https://example.com/x -o /x \\',
      '    && echo "$HOME" \\',
      '',
      '    && true',
      'ONBUILD COPY . /app',
      'ONBUILD RUN make',
      'HEALTHCHECK --interval=30s --retries=3 CMD true',
    ].join('\r\n');
    expect(dockerfileNeeds(text)).toEqual({ images: ['alpine'], bases: ['alpine'] });
  });
});

describe('dockerfileNeeds: long lines', () => {
  it('reads lines with long runs of spaces and backslashes in one pass', () => {
    const spaces = ' '.repeat(200_000);
    const text = `FROM alpine${spaces}\nRUN echo${spaces}x${'\\ '.repeat(50_000)}x\nADD a${spaces}/b${spaces}\n`;
    expect(dockerfileNeeds(text).images).toEqual(['alpine']);
  });
});

describe('checkOnBuildTriggers: the triggers of a base image', () => {
  it('passes triggers that fetch nothing', () => {
    expect(() => checkOnBuildTriggers('base:1', ['COPY . /app', 'RUN make', 'ADD vendor.tar /opt/'])).not.toThrow();
  });

  it.each([
    ['ADD of a URL', [`ADD ${URL} /x`]],
    ['ADD of a variable', ['ADD $U /x']],
    ['COPY --from an image', ['COPY --from=10.0.0.1:5000/x /a /b']],
    ['a directive that changes the escape character', ['# escape=`\nADD http://10.0.0.1/x /x']],
    ['two instructions in one trigger', ['RUN true\nADD http://10.0.0.1/x /x']],
    ['a trigger that is FROM', ['FROM busybox']],
    ['an unknown instruction', ['FETCH http://10.0.0.1/x']],
  ])('refuses %s, naming the image', (_why, triggers) => {
    expect(() => checkOnBuildTriggers('base:1', triggers)).toThrow(
      expect.objectContaining({ code: 'INVALID_PARAMS', details: expect.objectContaining({ image: 'base:1' }) }),
    );
  });
});
