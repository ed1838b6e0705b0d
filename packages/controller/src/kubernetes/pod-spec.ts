import { createHash } from 'node:crypto';
import type { V1Pod } from '@kubernetes/client-node';
import { CodedError, DEFAULT_ROOT, type SandboxSettings } from '@warren/protocol';
import { DAEMON_CAPABILITIES, SECRET_VARIABLE, SOCKET_DIR_IN_SANDBOX } from '../docker.js';
import { LABELS } from '../labels.js';
import { agentCommand, RUNTIME_DIR } from '../runtime.js';

/** Where the init container finds the runtime in Warren's runtime image (see `runtimeImageTar`). */
export const RUNTIME_IN_IMAGE = '/warren-runtime';
/** The annotation that holds every Warren label of a sandbox as JSON (label values cannot hold JSON or dates). */
export const LABELS_ANNOTATION = 'warren.dev/labels';
/** Selects Warren's sandbox pods; set on every pod this provider makes. */
export const MANAGED_BY = { key: 'app.kubernetes.io/managed-by', value: 'warren' } as const;
/** The sandbox's expiry as Unix seconds, a label so that operators and other controllers can select expired pods. */
export const EXPIRES_LABEL = 'warren.dev/expires-at';
/** On a warm-pool member: {@link UNCLAIMED} until a controller claims it, then the claiming sandbox's public id. */
export const CLAIM_ANNOTATION = 'warren.dev/claim';
/** The claim annotation's value on a member nobody claimed. */
export const UNCLAIMED = 'none';
/** What the sandbox container may write besides the workspace (its writable layer, its logs), in MiB. */
export const EPHEMERAL_MARGIN_MB = 256;
/** The name of the container that runs the daemon and every command of the sandbox. */
export const SANDBOX_CONTAINER = 'sandbox';

/** What a sandbox pod is made from: the provider's spec plus the cluster-side choices. */
export interface SandboxPodInput {
  agentId: string;
  image: string;
  env: Record<string, string>;
  labels: Record<string, string>;
  settings: SandboxSettings;
  daemonSecret: string;
  /** The image holding Warren's runtime under {@link RUNTIME_IN_IMAGE}, copied in by the init container. */
  runtimeImage: string;
  /** `runtimeClassName` per Warren runtime (`runsc` -> `gvisor`); `runc` needs none. */
  runtimeClasses: Record<string, string>;
  imagePullPolicy: 'Always' | 'IfNotPresent' | 'Never';
  /** Extra node selection for every sandbox (e.g. a node pool). */
  nodeSelector?: Record<string, string> | undefined;
  /** The daemon's TLS port (`--tcp-port`, keyed by the secret), where the controller reaches it over TCP; absent: socket only. */
  daemonPort?: number | undefined;
}

/**
 * The pod name of a sandbox: Kubernetes names are lowercase, Warren ids are not, so a short hash
 * of the exact id keeps two ids that differ only in case apart. Deterministic, so the daemon's
 * pod is found from the id alone.
 *
 * @example
 * podName('AbC123'); // 'warren-abc123-<8 hex>'
 */
export function podName(agentId: string): string {
  const hash = createHash('sha256').update(agentId).digest('hex').slice(0, 8);
  return `warren-${agentId
    .toLowerCase()
    .replace(/[^a-z0-9-]/g, '-')
    .slice(0, 40)}-${hash}`;
}

/** A Kubernetes label value: at most 63 characters, alphanumerics at both ends, `-_.` between. */
export function isLabelValue(value: string): boolean {
  return value.length <= 63 && /^(|[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$/.test(value);
}

/** The labels Kubernetes selects on: Warren's id, pool mark and owner (when valid as values), and the expiry in seconds. */
export function selectableLabels(labels: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = { [MANAGED_BY.key]: MANAGED_BY.value };
  for (const key of [LABELS.sandbox, LABELS.owner, LABELS.pool]) {
    const value = labels[key];
    if (value !== undefined && isLabelValue(value)) out[key] = value;
  }
  const expires = Date.parse(labels[LABELS.expiresAt] ?? '');
  if (Number.isFinite(expires)) out[EXPIRES_LABEL] = String(Math.floor(expires / 1000));
  return out;
}

/**
 * The exact pod a sandbox runs as: one pod, the daemon as root with only
 * {@link DAEMON_CAPABILITIES} and no privilege escalation, RuntimeDefault seccomp, a read-only
 * root file system with the same writable places as on Docker (a size-capped `/tmp`, the daemon's
 * private socket folder, the workspace), no service-account token, no service links, no host
 * namespaces, requests equal to limits. The runtime arrives through an init container that copies
 * it from the runtime image into an `emptyDir`, mounted read-only at {@link RUNTIME_DIR}. Pure, so a
 * unit test can pin it.
 *
 * Refused with `INVALID_PARAMS`: host mounts (a cluster's nodes are not the controller's host) and
 * a runtime the operator mapped to no RuntimeClass.
 */
export function sandboxPod(input: SandboxPodInput): V1Pod {
  const settings = { readOnlyRootfs: true, tmpMb: 256, ...input.settings };
  if (settings.mounts.length > 0)
    throw new CodedError(
      'INVALID_PARAMS',
      'Host folders cannot be mounted into sandboxes on Kubernetes: the sandbox runs on a node of the cluster, not on the controller\'s host. Leave out "mounts".',
    );
  let runtimeClassName: string | undefined;
  if (settings.runtime !== 'runc') {
    runtimeClassName = input.runtimeClasses[settings.runtime];
    if (runtimeClassName === undefined)
      throw new CodedError(
        'INVALID_PARAMS',
        `The runtime '${settings.runtime}' has no RuntimeClass on this cluster: use runtime 'runc', or ask the operator to map it in kubernetes.runtimeClasses.`,
      );
  }
  const workspace = settings.workspace ?? DEFAULT_ROOT;
  const [uid = 1000, gid = uid] = settings.user.split(':').map(Number);
  const memory = `${settings.memoryMb}Mi`;
  const cpu = `${Math.max(1, Math.round(settings.cpus * 1000))}m`;
  // Disk: the kubelet counts the container's writable layer and logs against its ephemeral-storage
  // limit and the workspace emptyDir against its sizeLimit, and evicts the pod past either. The
  // Docker provider's per-process limits (RLIMIT_NOFILE, RLIMIT_FSIZE) and its pids cgroup limit
  // have no field in a pod: they are the node's (docs/kubernetes.md, "Limits").
  const requests: Record<string, string> = { cpu, memory };
  const limits: Record<string, string> = { cpu, memory };
  if (settings.diskMb !== undefined) {
    requests['ephemeral-storage'] = `${EPHEMERAL_MARGIN_MB}Mi`;
    limits['ephemeral-storage'] = `${settings.diskMb + EPHEMERAL_MARGIN_MB}Mi`;
  }
  const resources = { requests, limits };
  const noPrivileges = { allowPrivilegeEscalation: false, privileged: false, seccompProfile: { type: 'RuntimeDefault' } };
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: podName(input.agentId),
      labels: selectableLabels(input.labels),
      annotations: {
        [LABELS_ANNOTATION]: JSON.stringify(input.labels),
        // A pool member starts unclaimed; the claim is a patch that tests this value (records.ts).
        ...(input.labels[LABELS.pool] === '1' ? { [CLAIM_ANNOTATION]: UNCLAIMED } : {}),
      },
    },
    spec: {
      restartPolicy: 'Never',
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      // The pause container is PID 1 and reaps orphaned processes, as `docker run --init` does.
      shareProcessNamespace: true,
      hostNetwork: false,
      hostPID: false,
      hostIPC: false,
      terminationGracePeriodSeconds: 5,
      ...(runtimeClassName === undefined ? {} : { runtimeClassName }),
      ...(input.nodeSelector ? { nodeSelector: input.nodeSelector } : {}),
      securityContext: { seccompProfile: { type: 'RuntimeDefault' } },
      initContainers: [
        {
          name: 'warren-runtime',
          image: input.runtimeImage,
          imagePullPolicy: input.imagePullPolicy,
          // The runtime's own Node copies it (the runtime image has no shell): files, modes, and `.complete` last.
          command: [
            `${RUNTIME_IN_IMAGE}/ld-linux.so`,
            '--library-path',
            `${RUNTIME_IN_IMAGE}/lib`,
            `${RUNTIME_IN_IMAGE}/node`,
            '-e',
            "const fs=require('fs');fs.cpSync(process.argv[1],process.argv[2],{recursive:true,preserveTimestamps:true})",
            RUNTIME_IN_IMAGE,
            RUNTIME_DIR,
          ],
          securityContext: { ...noPrivileges, capabilities: { drop: ['ALL'] }, readOnlyRootFilesystem: true, runAsNonRoot: true, runAsUser: 65534 },
          resources: { requests: { cpu: '100m', memory: '128Mi' }, limits: { cpu: '1', memory: '256Mi' } },
          volumeMounts: [{ name: 'runtime', mountPath: RUNTIME_DIR }],
        },
      ],
      containers: [
        {
          name: SANDBOX_CONTAINER,
          image: input.image,
          imagePullPolicy: input.imagePullPolicy,
          command: agentCommand([
            '--socket',
            `${SOCKET_DIR_IN_SANDBOX}/agent.sock`,
            '--private-socket-dir',
            '--secret-env',
            SECRET_VARIABLE,
            '--root',
            workspace,
            '--home',
            workspace,
            '--user',
            `${uid}:${gid}`,
            '--own-root',
            ...(input.daemonPort === undefined ? [] : ['--tcp-port', String(input.daemonPort)]),
          ]),
          args: [],
          ...(input.daemonPort === undefined ? {} : { ports: [{ name: 'warren-daemon', containerPort: input.daemonPort, protocol: 'TCP' }] }),
          workingDir: settings.workdir,
          env: [...Object.entries(input.env).map(([name, value]) => ({ name, value })), { name: SECRET_VARIABLE, value: input.daemonSecret }],
          securityContext: {
            ...noPrivileges,
            runAsUser: 0,
            runAsGroup: 0,
            runAsNonRoot: false,
            readOnlyRootFilesystem: settings.readOnlyRootfs,
            capabilities: { drop: ['ALL'], add: [...DAEMON_CAPABILITIES] },
          },
          resources,
          volumeMounts: [
            { name: 'runtime', mountPath: RUNTIME_DIR, readOnly: true },
            { name: 'tmp', mountPath: '/tmp' },
            { name: 'daemon', mountPath: SOCKET_DIR_IN_SANDBOX },
            { name: 'workspace', mountPath: workspace },
          ],
        },
      ],
      volumes: [
        { name: 'runtime', emptyDir: {} },
        // tmpfs like Docker's /tmp; it counts against the pod's memory limit, as it does on Docker.
        { name: 'tmp', emptyDir: { medium: 'Memory', sizeLimit: `${settings.tmpMb}Mi` } },
        { name: 'daemon', emptyDir: { medium: 'Memory', sizeLimit: '1Mi' } },
        { name: 'workspace', emptyDir: settings.diskMb === undefined ? {} : { sizeLimit: `${settings.diskMb}Mi` } },
      ],
    },
  };
}
