/**
 * POSIX path arithmetic as text, for the sandbox's paths (always `/`-separated), written here so
 * the protocol's root needs no `node:path` and loads in a browser. Each function answers as
 * `path.posix` of the same name does (`test/posix-path.test.ts` compares them), except that
 * {@link resolvePosix} resolves a relative path against `/`, since a sandbox path has no
 * working folder of the caller's process to lean on.
 */

/** The segments of `path` with `.` and empty ones dropped and `..` applied; `..` kept at the front when `aboveRoot`. */
function segments(path: string, aboveRoot: boolean): string[] {
  const out: string[] = [];
  for (const segment of path.split('/')) {
    if (segment === '' || segment === '.') continue;
    if (segment !== '..') out.push(segment);
    else if (out.length > 0 && out[out.length - 1] !== '..') out.pop();
    else if (aboveRoot) out.push('..');
  }
  return out;
}

/**
 * `path.posix.normalize`: `.` and `..` applied and repeated slashes collapsed; a trailing slash kept.
 *
 * @example
 * normalizePosix('/a//b/../c/'); // '/a/c/'
 */
export function normalizePosix(path: string): string {
  if (path.length === 0) return '.';
  const absolute = path.startsWith('/');
  let body = segments(path, !absolute).join('/');
  if (body.length === 0 && !absolute) body = '.';
  if (body.length > 0 && path.endsWith('/')) body += '/';
  return absolute ? `/${body}` : body;
}

/**
 * `path.posix.join`: the non-empty parts joined with `/`, then normalised.
 *
 * @example
 * joinPosix('a', '../b', 'c'); // 'b/c'
 */
export function joinPosix(...parts: string[]): string {
  const joined = parts.filter((part) => part.length > 0).join('/');
  return joined.length === 0 ? '.' : normalizePosix(joined);
}

/**
 * `path.posix.resolve`: the parts from the right until one is absolute, normalised, with no
 * trailing slash; a result that is still relative is taken from `/`.
 *
 * @example
 * resolvePosix('/workspace', 'src/../a.py'); // '/workspace/a.py'
 */
export function resolvePosix(...parts: string[]): string {
  let resolved = '';
  for (let i = parts.length - 1; i >= 0 && !resolved.startsWith('/'); i--) {
    const part = parts[i]!;
    if (part.length === 0) continue;
    resolved = resolved.length === 0 ? part : `${part}/${resolved}`;
  }
  return `/${segments(resolved, false).join('/')}`;
}

/**
 * `path.posix.dirname`: the path without its last segment (trailing slashes ignored).
 *
 * @example
 * dirnamePosix('a/b/c.txt'); // 'a/b'
 */
export function dirnamePosix(path: string): string {
  if (path.length === 0) return '.';
  const rooted = path.startsWith('/');
  let end = -1;
  let matchedSlash = true;
  for (let i = path.length - 1; i >= 1; --i) {
    if (path[i] === '/') {
      if (!matchedSlash) {
        end = i;
        break;
      }
    } else matchedSlash = false;
  }
  if (end === -1) return rooted ? '/' : '.';
  if (rooted && end === 1) return '//';
  return path.slice(0, end);
}
