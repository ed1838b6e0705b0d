import { CodedError } from '@warren/protocol';

/**
 * Glob matching in time linear in the path for each pattern alternative, whatever the pattern.
 * Globs arrive from clients (a read-only, exec-less handle may send one), and the usual way of
 * matching them, compiling to a backtracking regular expression, lets a pattern such as
 * `**\/*a*a*a*a*a*a*b` hold the daemon's event loop for minutes. Here a pattern is split into
 * path segments; segments are matched against a path's segments with a table (`**` spans any
 * number of them), and within a segment `*` is matched by the two-pointer method that never
 * backtracks further than the last star. Cost: O(alternatives x pattern segments x path segments
 * x segment length), bounded by the limits below.
 *
 * Syntax (what picomatch calls bash globbing, without extglobs): `*` any run of characters but
 * `/` (dot files included), `?` one character but `/`, `[abc]`, `[a-z]`, `[!abc]` / `[^abc]`
 * classes, `**` as a whole segment for any number of folders, `{a,b}` alternatives (nested,
 * and numeric ranges `{1..5}`), `\` to take the next character literally, and a leading `!` that
 * negates the whole pattern.
 */

/** Limits on what one pattern may ask for. */
export const GLOB_PATTERN_LIMITS = { maxWildcards: 32, maxBraces: 16, maxAlternatives: 256, maxRange: 1000 } as const;

type Token = { kind: 'literal'; char: string } | { kind: 'any' } | { kind: 'star' } | { kind: 'class'; negated: boolean; ranges: [number, number][] };
/** A segment of a pattern: `**`, or tokens matched against one path segment. */
type Segment = { kind: 'globstar' } | { kind: 'tokens'; tokens: Token[] };

/**
 * Compiles a glob into a matcher of relative paths (`src/a.py`), after refusing what would let it
 * leave the folder or grow without bound: absolute patterns, `..` segments, NUL bytes, too many
 * wildcards, brace groups or alternatives.
 *
 * @example
 * const isMatch = compileGlob('src/**\/*.{ts,tsx}');
 * isMatch('src/app/x.tsx'); // true
 */
export function compileGlob(pattern: string): (rel: string) => boolean {
  const bad = (why: string) =>
    new CodedError('INVALID_PARAMS', `The glob pattern is refused: ${why}. Use a pattern relative to the folder, like '**/*.py'.`, {
      pattern: pattern.slice(0, 200),
    });
  let negated = false;
  let body = pattern;
  while (body.startsWith('!')) {
    negated = !negated;
    body = body.slice(1);
  }
  if (body.startsWith('/')) throw bad('it is absolute');
  if (body.includes('\0')) throw bad('it has a NUL byte');
  if ((body.match(/[*?]/g)?.length ?? 0) > GLOB_PATTERN_LIMITS.maxWildcards) throw bad(`it has more than ${GLOB_PATTERN_LIMITS.maxWildcards} wildcards`);
  if ((body.match(/\{/g)?.length ?? 0) > GLOB_PATTERN_LIMITS.maxBraces) throw bad(`it has more than ${GLOB_PATTERN_LIMITS.maxBraces} brace groups`);
  const alternatives = expandBraces(body, bad);
  const compiled = alternatives.map((alternative) => {
    const segments = alternative.split('/');
    if (segments.some((s) => s === '..')) throw bad('it has a .. segment');
    return compressGlobstars(segments.filter((s, i) => s !== '' || i === segments.length - 1).map((s) => parseSegment(s, bad)));
  });
  return (rel: string) => {
    const parts = rel.split('/');
    const hit = compiled.some((segments) => matchSegments(segments, parts));
    return negated ? !hit : hit;
  };
}

/** Expands `{a,b}` and `{1..3}` groups (nested) into plain alternatives, at most `maxAlternatives`. */
function expandBraces(pattern: string, bad: (why: string) => CodedError): string[] {
  const open = findUnescaped(pattern, '{', 0);
  if (open === -1) return [pattern];
  let depth = 0;
  let close = -1;
  const commas: number[] = [];
  for (let i = open; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === '\\') {
      i++;
      continue;
    }
    if (c === '{') depth++;
    else if (c === '}' && --depth === 0) {
      close = i;
      break;
    } else if (c === ',' && depth === 1) commas.push(i);
  }
  // An unclosed brace is a literal brace.
  if (close === -1) return [pattern];
  const before = pattern.slice(0, open);
  const after = pattern.slice(close + 1);
  const inner = pattern.slice(open + 1, close);
  let options: string[];
  const range = /^(-?\d+)\.\.(-?\d+)$/.exec(inner);
  if (commas.length > 0) {
    options = [];
    let start = open + 1;
    for (const comma of [...commas, close]) {
      options.push(pattern.slice(start, comma));
      start = comma + 1;
    }
  } else if (range) {
    const [from, to] = [Number(range[1]), Number(range[2])];
    if (Math.abs(to - from) > GLOB_PATTERN_LIMITS.maxRange) throw bad(`the range {${inner}} has more than ${GLOB_PATTERN_LIMITS.maxRange} numbers`);
    options = [];
    for (let n = from; from <= to ? n <= to : n >= to; n += from <= to ? 1 : -1) options.push(String(n));
  } else {
    // `{x}` with no comma or range is literal, as in bash.
    return expandBraces(`${before}\\{${inner}\\}${after}`, bad);
  }
  const out: string[] = [];
  for (const option of options) {
    for (const expanded of expandBraces(`${before}${option}${after}`, bad)) {
      out.push(expanded);
      if (out.length > GLOB_PATTERN_LIMITS.maxAlternatives) throw bad(`its braces expand to more than ${GLOB_PATTERN_LIMITS.maxAlternatives} patterns`);
    }
  }
  return out;
}

function findUnescaped(text: string, char: string, from: number): number {
  for (let i = from; i < text.length; i++) {
    if (text[i] === '\\') i++;
    else if (text[i] === char) return i;
  }
  return -1;
}

function parseSegment(segment: string, bad: (why: string) => CodedError): Segment {
  if (segment === '**') return { kind: 'globstar' };
  const tokens: Token[] = [];
  for (let i = 0; i < segment.length; i++) {
    const c = segment[i]!;
    if (c === '\\') {
      if (i + 1 < segment.length) tokens.push({ kind: 'literal', char: segment[++i]! });
      else tokens.push({ kind: 'literal', char: '\\' });
    } else if (c === '*') {
      // `**` inside a segment (`a**b`) is one star; consecutive stars are one.
      if (tokens.at(-1)?.kind !== 'star') tokens.push({ kind: 'star' });
    } else if (c === '?') tokens.push({ kind: 'any' });
    else if (c === '[') {
      const end = classEnd(segment, i);
      if (end === -1) tokens.push({ kind: 'literal', char: '[' });
      else {
        tokens.push(parseClass(segment.slice(i + 1, end), bad));
        i = end;
      }
    } else tokens.push({ kind: 'literal', char: c });
  }
  return { kind: 'tokens', tokens };
}

/** Where a `[...]` class that starts at `open` ends (a `]` right after `[`, `[!` or `[^` is a member). */
function classEnd(segment: string, open: number): number {
  let i = open + 1;
  if (segment[i] === '!' || segment[i] === '^') i++;
  if (segment[i] === ']') i++;
  for (; i < segment.length; i++) {
    if (segment[i] === '\\') i++;
    else if (segment[i] === ']') return i;
  }
  return -1;
}

function parseClass(body: string, bad: (why: string) => CodedError): Token {
  let negated = false;
  let i = 0;
  if (body[0] === '!' || body[0] === '^') {
    negated = true;
    i = 1;
  }
  const ranges: [number, number][] = [];
  const next = () => {
    if (body[i] === '\\' && i + 1 < body.length) i++;
    return body.codePointAt(i++)!;
  };
  while (i < body.length) {
    const from = next();
    if (body[i] === '-' && i + 1 < body.length) {
      i++;
      const to = next();
      if (to < from) throw bad(`the class range [${String.fromCodePoint(from)}-${String.fromCodePoint(to)}] is backwards`);
      ranges.push([from, to]);
    } else ranges.push([from, from]);
  }
  return { kind: 'class', negated, ranges };
}

/** Consecutive `**` segments mean the same as one. */
function compressGlobstars(segments: Segment[]): Segment[] {
  return segments.filter((s, i) => !(s.kind === 'globstar' && segments[i - 1]?.kind === 'globstar'));
}

/** Pattern segments against path segments: a table over (pattern position, path position), no backtracking. */
function matchSegments(segments: Segment[], parts: string[]): boolean {
  // reach[j]: the first `p` pattern segments can match the first `j` path segments.
  let reach = new Uint8Array(parts.length + 1);
  reach[0] = 1;
  for (const [index, segment] of segments.entries()) {
    const next = new Uint8Array(parts.length + 1);
    if (segment.kind === 'globstar') {
      // Zero or more whole segments; a trailing one after others (`src/**`) one or more, as in
      // picomatch: `src/**` matches what is inside `src`, not `src` itself.
      const atLeastOne = index === segments.length - 1 && index > 0;
      let seen = false;
      for (let j = 0; j <= parts.length; j++) {
        if (seen || (reach[j] && !atLeastOne)) next[j] = 1;
        if (reach[j]) seen = true;
      }
    } else {
      for (let j = 0; j < parts.length; j++) if (reach[j] && matchTokens(segment.tokens, parts[j]!)) next[j + 1] = 1;
    }
    reach = next;
  }
  return reach[parts.length] === 1;
}

/**
 * Tokens against one segment with the two-pointer method: on a mismatch, go back to just after
 * the last star and let it take one more character. Never backtracks past the last star, so the
 * cost is at most (segment length x tokens).
 */
function matchTokens(tokens: Token[], text: string): boolean {
  const chars = Array.from(text);
  let t = 0;
  let c = 0;
  let starAt = -1;
  let starText = 0;
  while (c < chars.length) {
    const token = tokens[t];
    if (token && token.kind !== 'star' && matchOne(token, chars[c]!)) {
      t++;
      c++;
    } else if (token?.kind === 'star') {
      starAt = t++;
      starText = c;
    } else if (starAt !== -1) {
      t = starAt + 1;
      c = ++starText;
    } else return false;
  }
  while (tokens[t]?.kind === 'star') t++;
  return t === tokens.length;
}

function matchOne(token: Exclude<Token, { kind: 'star' }>, char: string): boolean {
  if (token.kind === 'literal') return token.char === char;
  if (token.kind === 'any') return true;
  const code = char.codePointAt(0)!;
  const inside = token.ranges.some(([from, to]) => code >= from && code <= to);
  return inside !== token.negated;
}
