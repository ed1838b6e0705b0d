import { accessSync, constants as fsConstants, statSync } from 'node:fs';
import path from 'node:path';

/** True when `program` names an executable file: a path as it is, a bare name through PATH. */
export function findProgram(program: string, searchPath: string, cwd: string): boolean {
  const candidates = program.includes('/')
    ? [path.resolve(cwd, program)]
    : searchPath
        .split(':')
        .filter(Boolean)
        .map((dir) => path.join(dir, program));
  return candidates.some((file) => {
    try {
      accessSync(file, fsConstants.X_OK);
      return statSync(file).isFile();
    } catch {
      return false;
    }
  });
}
