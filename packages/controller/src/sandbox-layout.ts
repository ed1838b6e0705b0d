/**
 * Where the daemon lives inside every sandbox, and what it may do there, whichever provider runs
 * it: the Docker provider's container spec and the Kubernetes provider's pod spec both build on
 * these, so a sandbox looks the same from inside on either.
 */

/**
 * Where the daemon listens. On Docker's `socket` channel it is the sandbox's host folder, bound in,
 * where the daemon also finds its secret; elsewhere it is a tmpfs of the sandbox's own (mode 0700,
 * root's), reached through the backend's API.
 */
export const SOCKET_DIR_IN_SANDBOX = '/run/warren';

/**
 * The daemon's capabilities, and nothing else: it runs as the sandbox's root so that sandbox
 * code (the sandbox user) cannot signal, trace or read it, and it needs exactly these to act for
 * that user: CHOWN, DAC_OVERRIDE and FOWNER to create and hand over the user's files, SETUID and
 * SETGID to start commands as the user, KILL to signal the user's processes, and SYS_PTRACE to
 * read their `/proc/<pid>/environ`, where the tree-kill marker is. Commands lose all of them when
 * they drop to the sandbox user, and no-new-privileges keeps them from coming back.
 */
export const DAEMON_CAPABILITIES = ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'SETUID', 'SETGID', 'KILL', 'SYS_PTRACE', 'NET_BIND_SERVICE'] as const;

/**
 * What a root sandbox's container holds besides {@link DAEMON_CAPABILITIES}: what package managers
 * and `sudo` use as root (set file capabilities and setuid bits, chroot, write the audit log,
 * change capability sets). Docker's default set without NET_RAW (no forged packets) and MKNOD (no
 * device nodes). Root sandboxes run only where the container's root is not the host's, so these
 * act within the container's own user namespace or gVisor's kernel.
 */
export const ROOT_CAPABILITIES = ['FSETID', 'SETFCAP', 'SETPCAP', 'SYS_CHROOT', 'AUDIT_WRITE'] as const;
