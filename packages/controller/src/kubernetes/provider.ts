import { readFileSync } from 'node:fs';
import type { Duplex } from 'node:stream';
import { connect as tlsConnect, type ConnectionOptions } from 'node:tls';
import type { CoreV1Api, Exec, KubeConfig, PortForward, V1Affinity, V1Pod, V1Toleration, Watch } from '@kubernetes/client-node';
import { CodedError } from '@warren/protocol';
import { DAEMON_TLS_PORT, daemonTlsClientOptions } from '@warren/protocol/node';
import { SOCKET_DIR_IN_SANDBOX } from '../sandbox-layout.js';
import type { Logger } from '../logger.js';
import type {
  DaemonEndpoint,
  MetricsCapability,
  ProvidedSandbox,
  ProviderCapability,
  ProviderIsolation,
  ProviderState,
  SandboxProvider,
  SandboxSpec,
  SandboxStats,
} from '../provider.js';
import { callAgent } from '../agent-link.js';
import { bridgeCommand, PRLIMIT_NAME, type AgentRuntime } from '../runtime.js';
import { KubernetesSharedState } from './cluster-state.js';
import { kubeError } from './errors.js';
import { PodExecStream } from './exec-stream.js';
import { PodRecords } from './records.js';
import { MANAGED_BY, podName, SANDBOX_CONTAINER, sandboxPod, sandboxSecret, warrenLabels } from './pod-spec.js';

export { warrenLabels } from './pod-spec.js';

/** How many lost pods' reasons are kept for {@link KubernetesProvider.lostReason}. */
const LOST_KEPT = 1000;
/** The in-cluster service account's namespace file. */
const IN_CLUSTER_NAMESPACE = '/var/run/secrets/kubernetes.io/serviceaccount/namespace';
/** Waiting reasons of a container that will not start by waiting longer. */
const IMAGE_MISSING = new Set(['ErrImageNeverPull', 'InvalidImageName']);
const IMAGE_FAILED = new Set(['ErrImagePull', 'ImagePullBackOff']);
const CANNOT_START = new Set(['CreateContainerConfigError', 'CreateContainerError', 'RunContainerError', 'CrashLoopBackOff']);

/**
 * How the controller reaches a sandbox's daemon: TCP to the pod's IP (the controller runs in the
 * cluster), the API server's port-forward to the same port (outside the cluster), both TLS keyed
 * by the sandbox's secret; or a bridge started by the API server's exec to the daemon's unix socket
 * (works with no pod network at all, and with no TCP listener in the pod).
 */
export type KubernetesDaemonChannel = 'pod-ip' | 'port-forward' | 'exec';

/** The channel when none is configured: pod IP inside a cluster, port-forward outside. */
export function defaultDaemonChannel(env: NodeJS.ProcessEnv = process.env): KubernetesDaemonChannel {
  return env.KUBERNETES_SERVICE_HOST ? 'pod-ip' : 'port-forward';
}

/** What a {@link KubernetesProvider} is told at construction. */
/**
 * The Kubernetes client library as a module. It is loaded only by a controller that runs the
 * Kubernetes provider ({@link KubernetesProvider.load}): loading it costs a Node process about 80
 * MiB of RSS (27 MiB of heap), which a controller on Docker would carry for nothing.
 */
export type KubernetesClient = typeof import('@kubernetes/client-node');

export interface KubernetesProviderOptions {
  /** A loaded configuration; otherwise `kubeconfig` is read, or the in-cluster service account. */
  kubeConfig?: KubeConfig | undefined;
  /** A kubeconfig file; absent: the in-cluster service account (or KUBECONFIG / ~/.kube/config outside a cluster). */
  kubeconfig?: string | undefined;
  /** Where sandbox pods live; absent: the controller's own namespace in-cluster, `default` outside. */
  namespace?: string | undefined;
  /** The image with Warren's runtime (see `runtimeImageTar`); absent: `warren/runtime:<runtime hash>`. */
  runtimeImage?: string | undefined;
  /** `runtimeClassName` per Warren runtime, e.g. `{ runsc: 'gvisor' }` where the cluster has gVisor. */
  runtimeClasses?: Record<string, string> | undefined;
  imagePullPolicy?: 'Always' | 'IfNotPresent' | 'Never' | undefined;
  /** Added to every sandbox pod's nodeSelector. */
  nodeSelector?: Record<string, string> | undefined;
  /** Added to every sandbox pod's tolerations (to run on tainted nodes). */
  tolerations?: V1Toleration[] | undefined;
  /** Every sandbox pod's affinity (e.g. prefer a node pool), as Kubernetes takes it. */
  affinity?: V1Affinity | undefined;
  /**
   * Seconds a sandbox pod stays on a node Kubernetes marked unreachable or not ready before it is
   * evicted (default 30; Kubernetes' own default is 300). The provider then removes the pod.
   */
  nodeLostSeconds?: number | undefined;
  /** How long a create waits for the pod's container to run (default 120 s). */
  startTimeoutMs?: number | undefined;
  /** How long a pod may stay unschedulable before the create gives up with the scheduler's reason (default 15 s). */
  unschedulableGraceMs?: number | undefined;
  /** How the daemon is reached (see {@link KubernetesDaemonChannel}); absent: {@link defaultDaemonChannel}. */
  daemonChannel?: KubernetesDaemonChannel | undefined;
  /** The daemon's TLS port in the pod (default {@link DAEMON_TLS_PORT}). */
  daemonPort?: number | undefined;
  /**
   * The daemon secret of a sandbox (the controller derives it from its master key, so any replica
   * can compute it); the TLS key of the `pod-ip` and `port-forward` channels comes from it. Absent:
   * the secrets of the sandboxes this provider object created.
   */
  daemonSecret?: ((agentId: string) => string) | undefined;
  logger?: Logger | undefined;
}

/** What to do on Kubernetes instead of what its provider lacks (see {@link SandboxProvider.alternatives}). */
export const KUBERNETES_ALTERNATIVES: Partial<Record<ProviderCapability, string>> = {
  images:
    "the cluster's nodes pull images themselves, by the pull policy (kubernetes.imagePullPolicy); build with your CI and push to a registry the nodes pull from",
  suspend: 'a pod cannot be frozen, or stopped with its files kept; keep it running, or kill the sandbox and create a new one',
  snapshots: 'keep state in a volume of your cluster (a PersistentVolumeClaim), or run the Docker provider for snapshots, fork and hibernation',
  volumes: 'create a PersistentVolumeClaim in the namespace and keep shared data there',
};

/**
 * Kubernetes as a {@link SandboxProvider}: one plain Pod per sandbox (see {@link sandboxPod}) in
 * one namespace, followed by watches; a handle is a pod name. The daemon is reached through the
 * API server's exec (a bridge to its socket), which works from inside and outside the cluster and
 * with no pod network at all. Every API failure comes out as a {@link CodedError} with the
 * cluster's reason. Its capabilities are `metrics` and the shared records and state; pods cannot
 * be frozen or stopped with their files kept (no `suspend`), the nodes pull images themselves by
 * policy (no `images`), and snapshots and named volumes are not made here yet
 * ({@link KUBERNETES_ALTERNATIVES} says what to do instead).
 *
 * @example
 * const provider = await KubernetesProvider.load({ kubeconfig: '/etc/warren/kubeconfig', namespace: 'warren-sandboxes' });
 * await provider.prepare(runtime, 'warren/sandbox:latest');
 * const pod = await provider.create(spec);
 */
export class KubernetesProvider implements SandboxProvider {
  readonly name = 'kubernetes';
  readonly namespace: string;
  readonly kubeConfig: KubeConfig;
  readonly core: CoreV1Api;
  readonly daemonChannel: KubernetesDaemonChannel;
  /** Records and pool claims on pod annotations: every controller replica on the namespace shares them. */
  readonly sharedRecords: PodRecords;
  /** The egress CA, egress Secrets, revoked console sessions and the sandbox count, shared by every replica on the namespace. */
  readonly sharedState: KubernetesSharedState;
  /** Usage read by each sandbox's daemon, and the sandbox container's log. */
  readonly metrics: MetricsCapability = { stats: (handle, agentId) => this.stats(handle, agentId), logsTail: (handle) => this.logsTail(handle) };
  readonly alternatives = KUBERNETES_ALTERNATIVES;
  private readonly exec: Exec;
  private readonly forward: PortForward;
  private readonly watch: Watch;
  private readonly daemonPort: number;
  /** Secrets of the sandboxes created here, for when no `daemonSecret` function is given. */
  private readonly secrets = new Map<string, string>();
  /** Pod IPs by pod name: fixed for a pod's life, so read once. */
  private readonly podIps = new Map<string, string>();
  /**
   * The open daemon streams by pod name. A pod whose node went away closes nothing (no FIN, no
   * RST reaches the controller), so when the watch says the pod ended its streams are ended here,
   * and calls through them fail at once instead of hanging.
   */
  private readonly streams = new Map<string, Set<Duplex>>();
  /** Pods removed because their node was lost, with why (the last {@link LOST_KEPT}). */
  private readonly lost = new Map<string, string>();
  private readonly options: KubernetesProviderOptions;
  private runtimeImage: string | undefined;
  /** The runtime holds `prlimit`, so pods get the sandbox's file limits (see `SandboxPodInput.prlimit`). */
  private prlimit = false;

  /**
   * Loads the Kubernetes client library (see {@link KubernetesClient}) and makes the provider.
   *
   * @example
   * const provider = await KubernetesProvider.load({ namespace: 'warren-sandboxes' });
   */
  static async load(options: KubernetesProviderOptions = {}): Promise<KubernetesProvider> {
    return new KubernetesProvider(options, await import('@kubernetes/client-node'));
  }

  /** @param client the Kubernetes client library, loaded by the caller (or use {@link KubernetesProvider.load}). */
  constructor(options: KubernetesProviderOptions, client: KubernetesClient) {
    this.options = options;
    this.kubeConfig = options.kubeConfig ?? loadKubeConfig(client, options.kubeconfig);
    this.namespace = options.namespace ?? defaultNamespace(this.kubeConfig);
    this.core = this.kubeConfig.makeApiClient(client.CoreV1Api);
    this.exec = new client.Exec(this.kubeConfig);
    this.forward = new client.PortForward(this.kubeConfig);
    this.watch = new client.Watch(this.kubeConfig);
    this.daemonChannel = options.daemonChannel ?? defaultDaemonChannel();
    this.daemonPort = options.daemonPort ?? DAEMON_TLS_PORT;
    this.sharedRecords = new PodRecords(this.core, this.namespace, warrenLabels);
    this.sharedState = new KubernetesSharedState(this.core, this.namespace);
  }

  /** Asks for one pod of the namespace: proves the server answers and that the controller may list pods. */
  async ping(): Promise<void> {
    await this.core.listNamespacedPod({ namespace: this.namespace, limit: 1 }).catch((e: unknown) => {
      throw kubeError(e, `list pods in namespace ${this.namespace}`);
    });
  }

  /**
   * What the pod template asks of every node. Nodes are not read (the Role grants no node access),
   * so what the kubelets do with it (cgroup version, whether seccomp is on) is not known here.
   */
  async isolation(): Promise<ProviderIsolation> {
    const runtimes = ['runc', ...Object.keys(this.options.runtimeClasses ?? {})];
    return {
      usernsRemap: null,
      rootless: false,
      cgroupVersion: 'unknown',
      cgroupDriver: 'kubelet',
      limitsEnforced: true,
      seccomp: true,
      apparmor: false,
      selinux: false,
      gvisor: runtimes.includes('runsc'),
      runtimes,
      storageDriver: 'kubernetes',
      diskQuota: { quota: true, kind: 'emptyDir', reason: "diskMb is the workspace emptyDir's sizeLimit: the kubelet evicts a pod past it" },
    };
  }

  async runtimes(): Promise<{ name: string; args: string[] }[]> {
    return [{ name: 'runc', args: [] }, ...Object.keys(this.options.runtimeClasses ?? {}).map((name) => ({ name, args: [] }))];
  }

  /** Settles the runtime image sandboxes copy their runtime from: this runtime's build unless one is configured. */
  async prepare(runtime: AgentRuntime): Promise<{ oldRuntimesRemoved: number }> {
    this.runtimeImage = this.options.runtimeImage ?? `warren/runtime:${runtime.hash}`;
    this.prlimit = runtime.files.some((f) => f.name === PRLIMIT_NAME);
    if (!this.prlimit)
      this.options.logger?.warn({ reason: "the controller's host has no prlimit (util-linux) to put in the runtime" }, 'kubernetes.file-limits-not-applied');
    await this.ping();
    return { oldRuntimesRemoved: 0 };
  }

  /**
   * Creates the sandbox's pod and waits (by a watch from the create's resourceVersion) until its
   * container runs. A pod that cannot run (image missing, unschedulable past the grace, a failed
   * init, a start error) is deleted and the create fails with the cluster's reason.
   */
  async create(spec: SandboxSpec): Promise<string> {
    if (spec.restore !== undefined) throw notSupported('start a sandbox from a snapshot', 'create it from an image instead');
    if (spec.settings.volumes?.length) throw notSupported('mount named volumes', 'leave volumes out');
    if (this.runtimeImage === undefined) throw new CodedError('INTERNAL', 'The Kubernetes provider was asked to create a sandbox before prepare().');
    const body = sandboxPod({
      ...spec,
      runtimeImage: this.runtimeImage,
      runtimeClasses: this.options.runtimeClasses ?? {},
      imagePullPolicy: this.options.imagePullPolicy ?? 'IfNotPresent',
      nodeSelector: this.options.nodeSelector,
      tolerations: this.options.tolerations,
      affinity: this.options.affinity,
      nodeLostSeconds: this.options.nodeLostSeconds,
      prlimit: this.prlimit,
      // The TLS listener only where a channel uses it: with exec, the pod opens no port at all.
      daemonPort: this.daemonChannel === 'exec' ? undefined : this.daemonPort,
    });
    const name = body.metadata!.name!;
    if (this.options.daemonSecret === undefined) this.secrets.set(spec.agentId, spec.daemonSecret);
    const created = await this.core.createNamespacedPod({ namespace: this.namespace, body }).catch((e: unknown) => {
      throw kubeError(e, `create the pod for sandbox ${spec.agentId} from ${spec.image}`);
    });
    try {
      // The daemon's secret in a Secret the pod owns (never in the pod spec): the kubelet mounts it
      // before it starts the sandbox container, waiting for it if need be.
      await this.core
        .createNamespacedSecret({ namespace: this.namespace, body: sandboxSecret({ name, uid: created.metadata!.uid! }, spec.agentId, spec.daemonSecret) })
        .catch((e: unknown) => {
          throw kubeError(e, `create the Secret holding the daemon secret of sandbox ${spec.agentId}`);
        });
      await this.untilRunning(name, created.metadata?.resourceVersion, spec.image);
      return name;
    } catch (err) {
      await this.deletePod(name, 0).catch(() => undefined);
      await this.deleteSecret(name);
      this.secrets.delete(spec.agentId);
      throw err;
    }
  }

  /** Follows one pod until its sandbox container runs, or fails with why it will not. */
  private async untilRunning(name: string, resourceVersion: string | undefined, image: string): Promise<void> {
    const timeoutMs = this.options.startTimeoutMs ?? 120_000;
    const graceMs = this.options.unschedulableGraceMs ?? 15_000;
    const startedAt = Date.now();
    await new Promise<void>((resolve, reject) => {
      let settled = false;
      let abort: AbortController | undefined;
      const finish = (err?: CodedError) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        abort?.abort();
        if (err) reject(err);
        else resolve();
      };
      const timer = setTimeout(
        () => finish(new CodedError('SANDBOX_NOT_READY', `The pod ${name} did not start within ${timeoutMs} ms (${lastSeen}).`)),
        timeoutMs,
      );
      let lastSeen = 'no status yet';
      const look = (pod: V1Pod) => {
        const verdict = startVerdict(pod, image, Date.now() - startedAt >= graceMs);
        lastSeen = verdict.seen;
        if (verdict.kind === 'running') finish();
        else if (verdict.kind === 'failed') finish(verdict.error);
      };
      const follow = (from: string | undefined) => {
        this.watch
          .watch(
            `/api/v1/namespaces/${this.namespace}/pods`,
            { fieldSelector: `metadata.name=${name}`, ...(from ? { resourceVersion: from } : {}), allowWatchBookmarks: false },
            (phase: string, pod: V1Pod) => {
              if (phase === 'DELETED') return finish(new CodedError('SANDBOX_NOT_FOUND', `The pod ${name} was deleted while it was starting.`));
              if (phase === 'ADDED' || phase === 'MODIFIED') look(pod);
            },
            // A watch the server ends early (or a stale resourceVersion) is followed again from a fresh read.
            () => {
              if (settled) return;
              this.core.readNamespacedPod({ name, namespace: this.namespace }).then(
                (pod) => {
                  look(pod);
                  if (!settled) follow(pod.metadata?.resourceVersion);
                },
                (e: unknown) => finish(kubeError(e, `follow the pod ${name} while it starts`)),
              );
            },
          )
          .then(
            (controller) => {
              abort = controller;
              if (settled) controller.abort();
            },
            (e: unknown) => finish(kubeError(e, `watch the pod ${name}`)),
          );
      };
      follow(resourceVersion);
      // An unschedulable pod gets no new event when the grace ends: look once more then.
      setTimeout(() => {
        if (!settled) this.core.readNamespacedPod({ name, namespace: this.namespace }).then(look, () => undefined);
      }, graceMs + 50).unref();
    });
  }

  /**
   * Deletes the sandbox's pod (its emptyDirs go with it): a short grace for the daemon, a wait for
   * the kubelet to confirm, then a forced delete when it does not (a node that went away).
   */
  async remove(handle: string, agentId?: string): Promise<void> {
    if (agentId !== undefined) this.secrets.delete(agentId);
    this.podIps.delete(handle);
    await this.deletePod(handle, 2);
    // The garbage collector would remove it with the pod; deleting it now leaves it no longer.
    await this.deleteSecret(handle);
    const deadline = Date.now() + 15_000;
    while (Date.now() < deadline) {
      const pod = await this.inspectRaw(handle);
      if (pod === undefined) return;
      // A pod on a lost node is never confirmed by its kubelet: no point in waiting.
      if (lostNode(pod) !== undefined) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    this.options.logger?.warn({ pod: handle }, 'kubernetes.pod.force-delete');
    await this.deletePod(handle, 0);
  }

  private async deleteSecret(name: string): Promise<void> {
    await this.core.deleteNamespacedSecret({ name, namespace: this.namespace }).catch((e: unknown) => {
      const err = kubeError(e, `delete the Secret ${name}`);
      if (err.code !== 'SANDBOX_NOT_FOUND') this.options.logger?.warn({ secret: name, error: err.message }, 'kubernetes.secret.delete-failed');
    });
  }

  private async deletePod(name: string, gracePeriodSeconds: number): Promise<void> {
    await this.core.deleteNamespacedPod({ name, namespace: this.namespace, gracePeriodSeconds }).catch((e: unknown) => {
      const err = kubeError(e, `delete the pod ${name}`);
      if (err.code !== 'SANDBOX_NOT_FOUND') throw err;
    });
  }

  private async inspectRaw(name: string): Promise<V1Pod | undefined> {
    try {
      return await this.core.readNamespacedPod({ name, namespace: this.namespace });
    } catch (e) {
      const err = kubeError(e, `read the pod ${name}`);
      if (err.code === 'SANDBOX_NOT_FOUND') return undefined;
      throw err;
    }
  }

  async inspect(handle: string): Promise<ProviderState | undefined> {
    const pod = await this.inspectRaw(handle);
    return pod === undefined ? undefined : podState(pod);
  }

  async states(): Promise<Map<string, ProviderState>> {
    return new Map((await this.listPods()).items.map((pod) => [pod.metadata!.name!, podState(pod)]));
  }

  async list(): Promise<ProvidedSandbox[]> {
    return (await this.listPods()).items.map((pod) => ({ handle: pod.metadata!.name!, labels: warrenLabels(pod), state: podState(pod) }));
  }

  private async listPods() {
    return this.core.listNamespacedPod({ namespace: this.namespace, labelSelector: `${MANAGED_BY.key}=${MANAGED_BY.value}` }).catch((e: unknown) => {
      throw kubeError(e, `list the sandbox pods in namespace ${this.namespace}`);
    });
  }

  /**
   * Follows Warren's pods with a watch: `die` once when a pod's sandbox container stops (or the
   * pod fails or starts terminating), `destroy` when the pod is gone. A watch the server closes
   * (they time out by design) is taken up again from the last resourceVersion, after a list that
   * reports what changed meanwhile; `onEnd` runs only when the API server cannot be reached.
   */
  async events(onEvent: (handle: string, action: string) => void, onEnd: () => void): Promise<() => void> {
    const dead = new Set<string>();
    const known = new Set<string>();
    let stopped = false;
    let abort: AbortController | undefined;
    const removing = new Set<string>();
    const see = (pod: V1Pod) => {
      const name = pod.metadata!.name!;
      known.add(name);
      const lost = lostNode(pod);
      if (lost !== undefined && !removing.has(name)) {
        // Kubernetes evicted the pod from a node that stopped answering: its kubelet will never
        // confirm the deletion, so the pod would stay Terminating. Remove it now (the node, if it
        // ever comes back, kills what is left of it); the watch then reports it destroyed.
        removing.add(name);
        this.lost.set(name, lost);
        if (this.lost.size > LOST_KEPT) this.lost.delete(this.lost.keys().next().value!);
        this.options.logger?.warn({ pod: name, why: lost }, 'kubernetes.node-lost');
        void this.deletePod(name, 0).catch((e: unknown) => {
          removing.delete(name);
          this.options.logger?.warn({ pod: name, error: (e as Error).message }, 'kubernetes.node-lost.delete-failed');
        });
      }
      if (podState(pod) === 'exited' && !dead.has(name)) {
        dead.add(name);
        this.endStreams(name);
        onEvent(name, 'die');
      }
    };
    const gone = (name: string) => {
      this.podIps.delete(name);
      this.endStreams(name);
      if (!dead.has(name)) onEvent(name, 'die');
      onEvent(name, 'destroy');
      dead.delete(name);
      known.delete(name);
      removing.delete(name);
    };
    const resync = async (): Promise<string | undefined> => {
      const list = await this.listPods();
      const present = new Set(list.items.map((p) => p.metadata!.name!));
      for (const name of [...known]) if (!present.has(name)) gone(name);
      for (const pod of list.items) see(pod);
      return list.metadata?.resourceVersion;
    };
    const follow = async (from: string | undefined): Promise<void> => {
      abort = await this.watch.watch(
        `/api/v1/namespaces/${this.namespace}/pods`,
        { labelSelector: `${MANAGED_BY.key}=${MANAGED_BY.value}`, ...(from ? { resourceVersion: from } : {}) },
        (phase: string, pod: V1Pod) => {
          if (phase === 'DELETED') gone(pod.metadata!.name!);
          else if (phase === 'ADDED' || phase === 'MODIFIED') see(pod);
        },
        () => {
          if (stopped) return;
          resync()
            .then((version) => (stopped ? undefined : follow(version)))
            .catch(() => {
              if (stopped) return;
              stopped = true;
              onEnd();
            });
        },
      );
      if (stopped) abort.abort();
    };
    await follow(await resync());
    return () => {
      stopped = true;
      abort?.abort();
    };
  }

  lostReason(handle: string): string | undefined {
    return this.lost.get(handle);
  }

  /**
   * The daemon by the configured channel: TLS to the pod IP, TLS through port-forward (needs
   * `pods/portforward` get and create), or the exec bridge to its socket (`pods/exec` get and create).
   */
  daemon(agentId: string): DaemonEndpoint {
    const open =
      this.daemonChannel === 'pod-ip'
        ? () => this.openPodIp(agentId)
        : this.daemonChannel === 'port-forward'
          ? () => this.openPortForward(agentId)
          : () => this.openBridge(agentId);
    return { openStream: () => open().then((stream) => this.track(podName(agentId), stream)) };
  }

  private track(name: string, stream: Duplex): Duplex {
    let open = this.streams.get(name);
    if (!open) this.streams.set(name, (open = new Set()));
    open.add(stream);
    stream.once('close', () => {
      open.delete(stream);
      if (open.size === 0 && this.streams.get(name) === open) this.streams.delete(name);
    });
    return stream;
  }

  /** Ends the daemon streams of a pod that ended (see {@link KubernetesProvider.streams}). */
  private endStreams(name: string): void {
    for (const stream of this.streams.get(name) ?? []) stream.destroy();
    this.streams.delete(name);
  }

  private async openPodIp(agentId: string): Promise<Duplex> {
    const name = podName(agentId);
    let ip = this.podIps.get(name);
    if (ip === undefined) {
      const pod = await this.inspectRaw(name);
      if (pod === undefined) throw new CodedError('SANDBOX_NOT_FOUND', `Could not reach the daemon of sandbox ${agentId}: its pod is gone.`);
      ip = pod.status?.podIP;
      if (!ip) throw new CodedError('SANDBOX_NOT_READY', `Could not reach the daemon of sandbox ${agentId}: its pod has no IP yet.`);
      this.podIps.set(name, ip);
    }
    return this.overTls(agentId, { host: ip, port: this.daemonPort }, `${ip}:${this.daemonPort}`);
  }

  private async openPortForward(agentId: string): Promise<Duplex> {
    const raw = await PodExecStream.portForward(this.forward, this.namespace, podName(agentId), this.daemonPort).catch((e: unknown) => {
      throw execError(e, agentId, 'port-forward', 'pods/portforward');
    });
    return this.overTls(agentId, { socket: raw }, 'port-forward', raw);
  }

  /**
   * A TLS session keyed by the sandbox's secret, resolved once both sides proved they hold the key.
   * Over a port-forward stream (`raw`), what ends that stream (the kubelet's "nothing listens there"
   * on the error channel, the WebSocket closing) ends the TLS session too, and the other way round.
   */
  private overTls(agentId: string, where: ConnectionOptions, via: string, raw?: Duplex): Promise<Duplex> {
    const secret = this.options.daemonSecret?.(agentId) ?? this.secrets.get(agentId);
    if (secret === undefined) {
      raw?.destroy();
      return Promise.reject(new CodedError('INTERNAL', `The Kubernetes provider has no daemon secret for sandbox ${agentId} (set the daemonSecret option).`));
    }
    return new Promise((resolve, reject) => {
      const socket = tlsConnect({ ...daemonTlsClientOptions(secret), ...where });
      let open = false;
      const fail = (err: NodeJS.ErrnoException) => {
        socket.destroy();
        raw?.destroy();
        if (open) return;
        reject(
          new CodedError(
            'SANDBOX_NOT_READY',
            `Could not open the TLS channel to the daemon of sandbox ${agentId} (${via}): ${err.code ?? err.message}. Retry shortly; if it persists, look at the sandbox's state.`,
          ),
        );
      };
      socket.once('error', fail);
      if (raw?.destroyed) return fail(new Error('the port-forward ended before the TLS handshake'));
      if (raw) {
        raw.once('error', (err) => (open ? socket.destroy(err) : fail(err)));
        raw.once('close', () => (open ? socket.destroy() : fail(new Error('the port-forward closed before the TLS handshake'))));
        socket.once('close', () => raw.destroy());
      }
      socket.once('secureConnect', () => {
        open = true;
        socket.removeListener('error', fail);
        resolve(socket);
      });
    });
  }

  private async openBridge(agentId: string): Promise<Duplex> {
    return PodExecStream.open(this.exec, this.namespace, podName(agentId), SANDBOX_CONTAINER, bridgeCommand(`${SOCKET_DIR_IN_SANDBOX}/agent.sock`)).catch(
      (e: unknown) => {
        throw execError(e, agentId);
      },
    );
  }

  /** The last lines the sandbox container wrote, for error messages when its daemon does not come up. */
  private async logsTail(handle: string, lines = 20): Promise<string> {
    try {
      return (await this.core.readNamespacedPodLog({ name: handle, namespace: this.namespace, container: SANDBOX_CONTAINER, tailLines: lines })).trim();
    } catch {
      return '';
    }
  }

  /**
   * A sandbox's usage, read by its daemon from the sandbox container's own cgroup files and the
   * pod's network namespace (`system.usage`): no metrics-server and no node access needed. The
   * daemon runs as root in the container, so sandbox code cannot change what it reads (the cgroup
   * files are the kernel's, mounted read-only); the workspace's size is counted by the daemon
   * (see `workspaceBytes`) against the workspace emptyDir's sizeLimit. Undefined once the pod is
   * gone or ended.
   */
  private async stats(handle: string, agentId: string): Promise<SandboxStats | undefined> {
    const pod = await this.inspectRaw(handle);
    if (pod === undefined || podState(pod) !== 'running') return undefined;
    const secret = this.options.daemonSecret?.(agentId) ?? this.secrets.get(agentId);
    if (secret === undefined)
      throw new CodedError('INTERNAL', `The Kubernetes provider has no daemon secret for sandbox ${agentId} (set the daemonSecret option).`);
    const usage = await callAgent(this.daemon(agentId), secret, 'system.usage', {}, 10_000);
    const sizeLimit = pod.spec?.volumes?.find((v) => v.name === 'workspace')?.emptyDir?.sizeLimit;
    const limitBytes = sizeLimit === undefined ? undefined : quantityBytes(String(sizeLimit));
    return {
      cpuSeconds: usage.cpuSeconds,
      memoryBytes: usage.memoryBytes,
      memoryLimitBytes: usage.memoryLimitBytes,
      memoryPeakBytes: usage.memoryPeakBytes,
      pids: usage.pids,
      pidsLimit: usage.pidsLimit,
      network: usage.network,
      ...(usage.workspaceBytes !== undefined && limitBytes !== undefined ? { disk: { usedBytes: usage.workspaceBytes, limitBytes } } : {}),
    };
  }
}

/** Where a starting pod stands: running, still coming, or failed with Warren's error. */
export type StartVerdict = { kind: 'running'; seen: string } | { kind: 'waiting'; seen: string } | { kind: 'failed'; seen: string; error: CodedError };

/**
 * Reads a starting pod's status: the sandbox container running is success; an image the node does
 * not have (with `Never`) or cannot pull, an init container that failed, a start error, a failed
 * pod, or a pod the scheduler placed nowhere past the grace are failures carrying the cluster's
 * reason. Pure, so unit tests pin it on recorded statuses.
 */
export function startVerdict(pod: V1Pod, image: string, pastGrace: boolean): StartVerdict {
  const name = pod.metadata?.name ?? 'the pod';
  const status = pod.status ?? {};
  const main = status.containerStatuses?.find((c) => c.name === SANDBOX_CONTAINER);
  if (main?.state?.running) return { kind: 'running', seen: 'running' };
  if (pod.metadata?.deletionTimestamp) return failed(name, 'SANDBOX_NOT_FOUND', 'is being deleted');
  for (const c of [...(status.initContainerStatuses ?? []), ...(status.containerStatuses ?? [])]) {
    const waiting = c.state?.waiting;
    const reason = waiting?.reason ?? '';
    const what = `${c.name === SANDBOX_CONTAINER ? `the image ${image}` : `the runtime image ${c.image}`}: ${reason}${waiting?.message ? ` (${waiting.message})` : ''}`;
    if (IMAGE_MISSING.has(reason))
      return failed(
        name,
        'NOT_FOUND',
        `cannot start, the node does not have ${what}. Load the image on every node, or set kubernetes.imagePullPolicy to pull it`,
      );
    if (IMAGE_FAILED.has(reason)) return failed(name, 'IMAGE_PULL_FAILED', `cannot start, the node could not pull ${what}`);
    if (CANNOT_START.has(reason))
      return failed(name, 'UPSTREAM_UNAVAILABLE', `cannot start ${c.name}: ${reason}${waiting?.message ? ` (${waiting.message})` : ''}`);
    const done = c.state?.terminated;
    if (done && (c.name !== SANDBOX_CONTAINER ? done.exitCode !== 0 : true))
      return failed(
        name,
        'UPSTREAM_UNAVAILABLE',
        `${c.name} ended (exit ${done.exitCode}, ${done.reason ?? 'no reason'}${done.message ? `: ${done.message}` : ''})`,
      );
  }
  if (status.phase === 'Failed' || status.phase === 'Succeeded')
    return failed(name, 'UPSTREAM_UNAVAILABLE', `ended before it ran (${status.reason ?? status.phase}${status.message ? `: ${status.message}` : ''})`);
  const unschedulable = status.conditions?.find((c) => c.type === 'PodScheduled' && c.status === 'False' && c.reason === 'Unschedulable');
  if (unschedulable && pastGrace)
    return failed(
      name,
      'RESOURCE_EXHAUSTED',
      `cannot be placed on any node: ${unschedulable.message ?? 'the scheduler found no node'}. Ask for less cpus or memoryMb, or add nodes`,
    );
  return { kind: 'waiting', seen: unschedulable ? `unschedulable: ${unschedulable.message ?? ''}` : `phase ${status.phase ?? 'unknown'}` };
}

function failed(
  name: string,
  code: 'NOT_FOUND' | 'IMAGE_PULL_FAILED' | 'UPSTREAM_UNAVAILABLE' | 'RESOURCE_EXHAUSTED' | 'SANDBOX_NOT_FOUND',
  text: string,
): StartVerdict {
  return { kind: 'failed', seen: text, error: new CodedError(code, `The sandbox pod ${name} ${text}.`) };
}

/**
 * Why a pod is on a lost node, or undefined: Kubernetes has evicted it (it is being deleted) while
 * its status still shows every container running and ready but the pod not Ready. That split is
 * made by the node lifecycle controller alone (it marks the pods of a node that stopped reporting
 * not Ready, without touching their container statuses); a kubelet never reports it. Pure, so unit
 * tests pin it on recorded statuses.
 */
export function lostNode(pod: V1Pod): string | undefined {
  if (!pod.metadata?.deletionTimestamp) return undefined;
  const ready = pod.status?.conditions?.find((c) => c.type === 'Ready');
  const containers = pod.status?.containerStatuses ?? [];
  if (ready?.status !== 'False' || containers.length === 0) return undefined;
  if (!containers.every((c) => c.ready && c.state?.running)) return undefined;
  return `its node ${pod.spec?.nodeName ?? '(none)'} stopped answering and Kubernetes evicted the pod`;
}

/** A pod as a provider state: its sandbox container running (or still starting) is `running`; anything that ended is `exited`. */
export function podState(pod: V1Pod): ProviderState {
  if (pod.metadata?.deletionTimestamp) return 'exited';
  const phase = pod.status?.phase;
  if (phase === 'Failed' || phase === 'Succeeded') return 'exited';
  const main = pod.status?.containerStatuses?.find((c) => c.name === SANDBOX_CONTAINER);
  if (main?.state?.terminated) return 'exited';
  return 'running';
}

/** A Kubernetes quantity as bytes, for the binary and decimal suffixes Warren writes and the plain number; undefined otherwise. */
export function quantityBytes(quantity: string): number | undefined {
  const match = /^(\d+)(Ki|Mi|Gi|Ti|k|M|G|T)?$/.exec(quantity);
  if (!match) return undefined;
  const scale: Record<string, number> = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, k: 1e3, M: 1e6, G: 1e9, T: 1e12 };
  return Number(match[1]) * (match[2] === undefined ? 1 : scale[match[2]]!);
}

/** A spec this provider cannot run (the service checks capabilities first; this is the last line). */
function notSupported(doing: string, instead: string): CodedError {
  return new CodedError('NOT_SUPPORTED', `Cannot ${doing} on Kubernetes: ${instead}.`);
}

/** An exec or port-forward the API server refused: RBAC without `get` and `create` on the subresource shows up as a failed WebSocket handshake. */
function execError(err: unknown, agentId: string, what = 'exec', resource = 'pods/exec'): CodedError {
  const text = err instanceof Error ? err.message : String((err as { message?: unknown })?.message ?? err);
  if (/\b403\b/.test(text))
    return new CodedError(
      'FORBIDDEN',
      `Could not reach the daemon of sandbox ${agentId}: the cluster refused the ${what} (${text}). The controller's Role needs ${resource} with both get and create (deploy/kubernetes/rbac.yaml).`,
    );
  if (/\b404\b/.test(text)) return new CodedError('SANDBOX_NOT_FOUND', `Could not reach the daemon of sandbox ${agentId}: its pod is gone (${text}).`);
  return new CodedError('UPSTREAM_UNAVAILABLE', `Could not reach the daemon of sandbox ${agentId} through the API server's ${what}: ${text}`);
}

/** The kubeconfig file named, else the in-cluster service account, else KUBECONFIG or ~/.kube/config. */
function loadKubeConfig(client: KubernetesClient, file: string | undefined): KubeConfig {
  const config = new client.KubeConfig();
  try {
    if (file !== undefined) config.loadFromFile(file);
    else config.loadFromDefault();
  } catch (err) {
    throw new CodedError('UPSTREAM_UNAVAILABLE', `Could not load the Kubernetes configuration${file ? ` from ${file}` : ''}: ${(err as Error).message}`);
  }
  if (!config.getCurrentCluster())
    throw new CodedError('UPSTREAM_UNAVAILABLE', 'No Kubernetes cluster is configured: set kubernetes.kubeconfig, or run the controller in a cluster.');
  return config;
}

function defaultNamespace(config: KubeConfig): string {
  try {
    return readFileSync(IN_CLUSTER_NAMESPACE, 'utf8').trim();
  } catch {
    return config.getContextObject(config.getCurrentContext())?.namespace ?? 'default';
  }
}
