import { CodedError } from '@warren/protocol';

/** Maps the errno values a file call can meet to wire codes that say what to do. */
export function mapFsError(err: unknown, display: string): unknown {
  if (err instanceof CodedError) return err;
  const code = (err as NodeJS.ErrnoException).code;
  switch (code) {
    case 'ENOENT':
      return new CodedError('NOT_FOUND', `No such file or folder: '${display}'.`, { path: display });
    case 'EISDIR':
      return new CodedError('IS_A_DIRECTORY', `'${display}' is a folder, not a file.`, { path: display });
    case 'ENOTDIR':
      return new CodedError('NOT_A_DIRECTORY', `'${display}' or a parent of it is a file, not a folder.`, { path: display });
    case 'EEXIST':
      return new CodedError('ALREADY_EXISTS', `'${display}' already exists.`, { path: display });
    case 'ENOTEMPTY':
      return new CodedError('DIRECTORY_NOT_EMPTY', `'${display}' is a folder that is not empty; pass recursive: true to delete it with its contents.`, {
        path: display,
      });
    case 'ELOOP':
      return new CodedError('SYMLINK_LOOP', `'${display}' is or goes through a symbolic link that file calls do not follow here.`, { path: display });
    case 'EFBIG':
      return new CodedError('FILE_TOO_LARGE', `'${display}' would grow past this sandbox's file size limit (its create option fileSizeMb).`, { path: display });
    // A full workspace file system (ENOSPC) and a reached quota (EDQUOT) are the same to the caller.
    case 'ENOSPC':
    case 'EDQUOT':
      return new CodedError(
        'RESOURCE_EXHAUSTED',
        `The sandbox's disk is full, so '${display}' was not written. Delete files you no longer need, or create the sandbox with a larger disk (diskMb).`,
        { path: display, reason: 'disk-full' },
      );
    case 'EACCES':
    case 'EPERM':
    case 'EROFS':
      return new CodedError('PATH_NOT_WRITABLE', `The sandbox user may not do that to '${display}' (${code}): the container's own permissions refuse it.`, {
        path: display,
      });
    case 'ENAMETOOLONG':
      return new CodedError('INVALID_PARAMS', `A name in '${display.slice(0, 200)}' is too long.`, { path: display.slice(0, 200) });
    default:
      return err;
  }
}
