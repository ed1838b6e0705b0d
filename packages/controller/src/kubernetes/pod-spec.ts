import { createHash } from 'node:crypto';
import type { V1Affinity, V1Pod, V1Secret, V1Toleration } from '@kubernetes/client-node';
import { CodedError, containerEnv, DEFAULT_ROOT, EGRESS_TRUST_DIR, type SandboxSettings } from '@warren/protocol';
import { DAEMON_CAPABILITIES, SOCKET_DIR_IN_SANDBOX } from '../sandbox-layout.js';
import { LABELS } from '../labels.js';
import { agentCommand, PRLIMIT_NAME, RUNTIME_DIR } from '../runtime.js';

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
/** Where the sandbox's Secret is mounted in its container: one file, root's, mode 0400, read by the daemon only. */
export const SECRET_DIR_IN_SANDBOX = '/run/warren-secret';
/** The key of the daemon's secret in the sandbox's Secret object. */
export const SECRET_KEY = 'daemon-secret';
/** How long a sandbox pod stays on a node the cluster marked unreachable or not ready before Kubernetes evicts it (its default is 300 s). */
export const DEFAULT_NODE_LOST_SECONDS = 30;

/** What a sandbox pod is made from: the provider's spec plus the cluster-side choices. */
export interface SandboxPodInput {
  agentId: string;
  image: string;
  env: Record<string, string>;
  labels: Record<string, string>;
  settings: SandboxSettings;
  /** Not put in the pod: it goes in the sandbox's Secret (see {@link sandboxSecret}), which the pod mounts. */
  daemonSecret: string;
  /** The image holding Warren's runtime under {@link RUNTIME_IN_IMAGE}, copied in by the init container. */
  runtimeImage: string;
  /** `runtimeClassName` per Warren runtime (`runsc` -> `gvisor`); `runc` needs none. */
  runtimeClasses: Record<string, string>;
  imagePullPolicy: 'Always' | 'IfNotPresent' | 'Never';
  /** Extra node selection for every sandbox (e.g. a node pool). */
  nodeSelector?: Record<string, string> | undefined;
  /** Added to every sandbox pod's tolerations (e.g. for a tainted node pool). */
  tolerations?: V1Toleration[] | undefined;
  /** Every sandbox pod's affinity (e.g. a preferred node pool), passed as it is. */
  affinity?: V1Affinity | undefined;
  /** Seconds a pod stays on a node Kubernetes marked unreachable or not ready before it is evicted (default {@link DEFAULT_NODE_LOST_SECONDS}). */
  nodeLostSeconds?: number | undefined;
  /**
   * The runtime holds util-linux's `prlimit`: the daemon then starts under it with the sandbox's
   * `openFiles` (RLIMIT_NOFILE) and `fileSizeMb` (RLIMIT_FSIZE) as soft and hard limits, which every
   * process it starts inherits, as Docker's ulimits do. Without it neither limit is applied.
   */
  prlimit?: boolean | undefined;
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
      ...(input.affinity ? { affinity: input.affinity } : {}),
      // A sandbox's files live on its node: once the node is lost, so is the sandbox. Kubernetes
      // evicts it after this many seconds (instead of its default 300), and the provider then
      // removes the pod the lost node can no longer confirm (provider.ts, lostNode).
      tolerations: [
        ...(input.tolerations ?? []),
        ...['node.kubernetes.io/unreachable', 'node.kubernetes.io/not-ready'].map((key) => ({
          key,
          operator: 'Exists',
          effect: 'NoExecute',
          tolerationSeconds: input.nodeLostSeconds ?? DEFAULT_NODE_LOST_SECONDS,
        })),
      ],
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
          command: limited(
            input.prlimit === true,
            settings,
            agentCommand([
              '--socket',
              `${SOCKET_DIR_IN_SANDBOX}/agent.sock`,
              '--private-socket-dir',
              '--secret-file',
              `${SECRET_DIR_IN_SANDBOX}/${SECRET_KEY}`,
              '--root',
              workspace,
              '--home',
              workspace,
              '--user',
              `${uid}:${gid}`,
              '--own-root',
              ...(input.daemonPort === undefined ? [] : ['--tcp-port', String(input.daemonPort)]),
            ]),
          ),
          args: [],
          ...(input.daemonPort === undefined ? {} : { ports: [{ name: 'warren-daemon', containerPort: input.daemonPort, protocol: 'TCP' }] }),
          workingDir: settings.workdir,
          // The sandbox's env only: the daemon's secret is in the mounted Secret, not in the pod spec.
          // What would run code inside the daemon is blanked and handed to it (the image's ENV is
          // the kubelet's to merge, so only the fixed list is blanked from it).
          env: containerEnv(input.env).map((entry) => ({ name: entry.slice(0, entry.indexOf('=')), value: entry.slice(entry.indexOf('=') + 1) })),
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
            { name: 'daemon-secret', mountPath: SECRET_DIR_IN_SANDBOX, readOnly: true },
            // Where the daemon writes the egress CA for the sandbox's trust stores (a small tmpfs, as on Docker; the daemon makes it its own).
            { name: 'egress-trust', mountPath: EGRESS_TRUST_DIR },
          ],
        },
      ],
      volumes: [
        { name: 'runtime', emptyDir: {} },
        // tmpfs like Docker's /tmp; it counts against the pod's memory limit, as it does on Docker.
        { name: 'tmp', emptyDir: { medium: 'Memory', sizeLimit: `${settings.tmpMb}Mi` } },
        { name: 'daemon', emptyDir: { medium: 'Memory', sizeLimit: '1Mi' } },
        { name: 'egress-trust', emptyDir: { medium: 'Memory', sizeLimit: '2Mi' } },
        { name: 'workspace', emptyDir: settings.diskMb === undefined ? {} : { sizeLimit: `${settings.diskMb}Mi` } },
        // Root's file, mode 0400 (no fsGroup): the daemon reads it, sandbox code (the sandbox user,
        // no capabilities) cannot. The kubelet waits for the Secret before it starts any container.
        { name: 'daemon-secret', secret: { secretName: podName(input.agentId), defaultMode: 0o400, items: [{ key: SECRET_KEY, path: SECRET_KEY }] } },
      ],
    },
  };
}

/**
 * The daemon's command under the runtime's `prlimit` (run by the runtime's loader, as the daemon
 * is): RLIMIT_NOFILE and RLIMIT_FSIZE set soft = hard before the daemon starts, so sandbox code,
 * which runs as the sandbox user without CAP_SYS_RESOURCE, cannot raise them.
 */
function limited(prlimit: boolean, settings: SandboxSettings, command: string[]): string[] {
  const limits: string[] = [];
  if (settings.openFiles !== undefined) limits.push(`--nofile=${settings.openFiles}:${settings.openFiles}`);
  if (settings.fileSizeMb !== undefined) limits.push(`--fsize=${settings.fileSizeMb * 1024 * 1024}:${settings.fileSizeMb * 1024 * 1024}`);
  if (!prlimit || limits.length === 0) return command;
  return [`${RUNTIME_DIR}/ld-linux.so`, '--library-path', `${RUNTIME_DIR}/lib`, `${RUNTIME_DIR}/${PRLIMIT_NAME}`, ...limits, ...command];
}

/**
 * The sandbox's Secret: the daemon's secret, named as the pod and owned by it, so the garbage
 * collector removes it with the pod (the provider deletes it too). It is made after the pod (its
 * owner reference needs the pod's uid); the kubelet starts no container before it can mount it.
 * Whoever may read pods no longer reads the secret; whoever may read Secrets in the namespace does.
 */
export function sandboxSecret(pod: { name: string; uid: string }, agentId: string, daemonSecret: string): V1Secret {
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    type: 'Opaque',
    metadata: {
      name: pod.name,
      labels: { [MANAGED_BY.key]: MANAGED_BY.value, ...(isLabelValue(agentId) ? { [LABELS.sandbox]: agentId } : {}) },
      ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: pod.name, uid: pod.uid }],
    },
    data: { [SECRET_KEY]: Buffer.from(daemonSecret, 'utf8').toString('base64') },
  };
}

/** Warren's labels of a pod, from its annotation (written by the controller; read as untrusted text all the same). */
export function warrenLabels(pod: V1Pod): Record<string, string> {
  const raw = pod.metadata?.annotations?.[LABELS_ANNOTATION];
  if (raw !== undefined) {
    try {
      const parsed = JSON.parse(raw) as unknown;
      if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)) {
        const labels = Object.fromEntries(Object.entries(parsed).filter((entry): entry is [string, string] => typeof entry[1] === 'string'));
        if (typeof labels[LABELS.sandbox] === 'string') return labels;
      }
    } catch {
      // fall back to the selectable labels
    }
  }
  return { ...(pod.metadata?.labels ?? {}) };
}
