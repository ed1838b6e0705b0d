import { describe, expect, it } from '@jest/globals';
import type { V1Pod } from '@kubernetes/client-node';
import { CodedError } from '@warren/protocol';
import { DAEMON_CAPABILITIES } from '../src/sandbox-layout.js';
import { kubeError } from '../src/kubernetes/errors.js';
import { LABELS_ANNOTATION, podName, sandboxPod, sandboxSecret } from '../src/kubernetes/pod-spec.js';
import { planSandbox, type PlanContext } from '../src/sandbox-plan.js';
import { podState, lostNode, startVerdict, warrenLabels } from '../src/kubernetes/provider.js';
import { sandboxLabels } from '../src/labels.js';

const context: PlanContext = {
  config: {
    defaultImage: 'warren/sandbox:latest',
    limits: { memoryMb: 512, cpus: 0.5, pidsLimit: 512, ttlSeconds: 3600, tmpMb: 64, openFiles: 4096, fileSizeMb: 4096, diskMb: 1024 },
    maxLimits: { memoryMb: 4096, cpus: 4, pidsLimit: 4096, ttlSeconds: 86400, tmpMb: 1024, openFiles: 8192, fileSizeMb: 8192, diskMb: 65536 },
    allowedMountRoots: ['/srv/warren-data'],
    allowBridgeNetwork: true,
    stateDir: '/var/lib/warren',
  },
  runtimes: ['runc'],
};

function podFor(request: Record<string, unknown>, runtimeClasses: Record<string, string> = {}, daemonPort?: number): V1Pod {
  const plan = planSandbox(request, context);
  return sandboxPod({
    agentId: 'AbC123',
    image: plan.image,
    env: { ...plan.env },
    labels: sandboxLabels({
      id: 'AbC123',
      owner: 'owner1',
      image: plan.image,
      createdAt: new Date('2026-01-01T00:00:00Z'),
      expiresAt: new Date('2026-01-01T01:00:00Z'),
      settings: plan.settings,
      labels: plan.labels,
    }),
    settings: plan.settings,
    daemonSecret: 's'.repeat(48),
    runtimeImage: 'warren/runtime:0123',
    runtimeClasses,
    imagePullPolicy: 'Never',
    daemonPort,
  });
}

describe('the sandbox pod', () => {
  it('is hardened whatever the request says: no token, no host namespaces, RuntimeDefault seccomp, only the daemon capabilities', () => {
    const pod = podFor({ env: { A: '1' } });
    const spec = pod.spec!;
    expect(spec.automountServiceAccountToken).toBe(false);
    expect(spec.enableServiceLinks).toBe(false);
    expect(spec.hostNetwork).toBe(false);
    expect(spec.hostPID).toBe(false);
    expect(spec.hostIPC).toBe(false);
    expect(spec.restartPolicy).toBe('Never');
    expect(spec.securityContext?.seccompProfile?.type).toBe('RuntimeDefault');
    const main = spec.containers[0]!;
    expect(main.securityContext).toMatchObject({
      allowPrivilegeEscalation: false,
      privileged: false,
      readOnlyRootFilesystem: true,
      seccompProfile: { type: 'RuntimeDefault' },
      capabilities: { drop: ['ALL'], add: [...DAEMON_CAPABILITIES] },
    });
    const init = spec.initContainers![0]!;
    expect(init.securityContext).toMatchObject({ runAsNonRoot: true, allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } });
    expect(init.image).toBe('warren/runtime:0123');
  });

  it('has the same writable places as on Docker and the runtime read-only', () => {
    const pod = podFor({});
    const mounts = Object.fromEntries(pod.spec!.containers[0]!.volumeMounts!.map((m) => [m.mountPath, m]));
    expect(Object.keys(mounts).sort()).toEqual(['/opt/warren', '/run/warren', '/run/warren-egress', '/run/warren-secret', '/tmp', '/workspace']);
    expect(mounts['/opt/warren']!.readOnly).toBe(true);
    expect(mounts['/run/warren-secret']!.readOnly).toBe(true);
    const volumes = Object.fromEntries(pod.spec!.volumes!.map((v) => [v.name, v]));
    expect(volumes.tmp!.emptyDir).toEqual({ medium: 'Memory', sizeLimit: '64Mi' });
    expect(volumes.daemon!.emptyDir).toEqual({ medium: 'Memory', sizeLimit: '1Mi' });
    // The egress trust folder, as Docker's 2 MiB tmpfs; the daemon makes it its own before writing the CA.
    expect(volumes['egress-trust']!.emptyDir).toEqual({ medium: 'Memory', sizeLimit: '2Mi' });
    expect(pod.spec!.volumes!.every((v) => v.emptyDir !== undefined || v.name === 'daemon-secret')).toBe(true);
    // The emptyDir is world-writable: the daemon must make its socket folder its own before listening.
    expect(pod.spec!.containers[0]!.command).toContain('--private-socket-dir');
  });

  it('asks for the limits as requests and limits, and the disk as the workspace sizeLimit plus an ephemeral-storage limit', () => {
    const pod = podFor({ memoryMb: 768, cpus: 1.5, diskMb: 2048 });
    expect(pod.spec!.containers[0]!.resources).toEqual({
      requests: { cpu: '1500m', memory: '768Mi', 'ephemeral-storage': '256Mi' },
      limits: { cpu: '1500m', memory: '768Mi', 'ephemeral-storage': '2304Mi' },
    });
    expect(pod.spec!.volumes!.find((v) => v.name === 'workspace')!.emptyDir).toEqual({ sizeLimit: '2048Mi' });
  });

  it('opens the daemon TLS port only when a TCP channel is configured', () => {
    const socketOnly = podFor({}).spec!.containers[0]!;
    expect(socketOnly.command).not.toContain('--tcp-port');
    expect(socketOnly.ports).toBeUndefined();
    const tcp = podFor({}, {}, 907).spec!.containers[0]!;
    expect(tcp.command!.slice(tcp.command!.indexOf('--tcp-port'))).toEqual(['--tcp-port', '907']);
    expect(tcp.ports).toEqual([{ name: 'warren-daemon', containerPort: 907, protocol: 'TCP' }]);
  });

  it('keeps the secret out of the pod: a root-only file of a Secret the pod owns', () => {
    const pod = podFor({});
    // Whoever may read pods must not read the daemon's secret: not in env, command or anywhere.
    expect(JSON.stringify(pod)).not.toContain('s'.repeat(48));
    const main = pod.spec!.containers[0]!;
    // Only the blanked names that could reach into the daemon, and their (empty) hand-over.
    expect(main.env!.filter((e) => e.value !== '' && e.name !== 'WARREN_SANDBOX_ENV')).toEqual([]);
    expect(main.command).toEqual(expect.arrayContaining(['--secret-file', '/run/warren-secret/daemon-secret']));
    const volume = pod.spec!.volumes!.find((v) => v.name === 'daemon-secret')!;
    expect(volume.secret).toEqual({ secretName: pod.metadata!.name, defaultMode: 0o400, items: [{ key: 'daemon-secret', path: 'daemon-secret' }] });
    // No fsGroup: the file stays root's, and the sandbox user cannot read it.
    expect(pod.spec!.securityContext!.fsGroup).toBeUndefined();
    const secret = sandboxSecret({ name: pod.metadata!.name!, uid: 'u-1' }, 'AbC123', 's'.repeat(48));
    expect(secret.metadata!.name).toBe(pod.metadata!.name);
    expect(secret.metadata!.ownerReferences).toEqual([{ apiVersion: 'v1', kind: 'Pod', name: pod.metadata!.name, uid: 'u-1' }]);
    expect(Buffer.from(secret.data!['daemon-secret']!, 'base64').toString()).toBe('s'.repeat(48));
  });

  it('starts the daemon under the runtime prlimit with the file limits as soft and hard, when the runtime has one', () => {
    const plan = planSandbox({ openFiles: 256, fileSizeMb: 8 }, context);
    const input = {
      agentId: 'x1',
      image: plan.image,
      env: {},
      labels: {},
      settings: plan.settings,
      daemonSecret: 's'.repeat(48),
      runtimeImage: 'warren/runtime:abc',
      runtimeClasses: {},
      imagePullPolicy: 'Never' as const,
    };
    const command = sandboxPod({ ...input, prlimit: true }).spec!.containers[0]!.command!;
    expect(command.slice(0, 6)).toEqual([
      '/opt/warren/ld-linux.so',
      '--library-path',
      '/opt/warren/lib',
      '/opt/warren/prlimit',
      '--nofile=256:256',
      `--fsize=${8 * 1024 * 1024}:${8 * 1024 * 1024}`,
    ]);
    expect(command.slice(6, 10)).toEqual(['/opt/warren/ld-linux.so', '--library-path', '/opt/warren/lib', '/opt/warren/node']);
    expect(sandboxPod(input).spec!.containers[0]!.command![3]).toBe('/opt/warren/node');
  });

  it('tolerates a lost node for nodeLostSeconds only, and adds the configured tolerations and affinity', () => {
    const base = podFor({});
    expect(base.spec!.tolerations).toEqual([
      { key: 'node.kubernetes.io/unreachable', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 30 },
      { key: 'node.kubernetes.io/not-ready', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 30 },
    ]);
    const plan = planSandbox({}, context);
    const affinity = {
      nodeAffinity: {
        preferredDuringSchedulingIgnoredDuringExecution: [{ weight: 100, preference: { matchExpressions: [{ key: 'pool', operator: 'In', values: ['a'] }] } }],
      },
    };
    const pod = sandboxPod({
      agentId: 'x1',
      image: plan.image,
      env: {},
      labels: {},
      settings: plan.settings,
      daemonSecret: 's'.repeat(48),
      runtimeImage: 'warren/runtime:abc',
      runtimeClasses: {},
      imagePullPolicy: 'Never',
      tolerations: [{ key: 'pool', operator: 'Exists', effect: 'NoSchedule' }],
      affinity,
      nodeLostSeconds: 5,
    });
    expect(pod.spec!.affinity).toEqual(affinity);
    expect(pod.spec!.tolerations!.map((t) => `${t.key}:${t.effect}:${t.tolerationSeconds ?? '-'}`)).toEqual([
      'pool:NoSchedule:-',
      'node.kubernetes.io/unreachable:NoExecute:5',
      'node.kubernetes.io/not-ready:NoExecute:5',
    ]);
  });

  it('keeps every Warren label in an annotation and only valid label values as labels', () => {
    const pod = podFor({ labels: { team: 'a b/c: not a label value' } });
    const labels = pod.metadata!.labels!;
    expect(labels['warren.sandbox']).toBe('AbC123');
    expect(labels['app.kubernetes.io/managed-by']).toBe('warren');
    expect(labels['warren.dev/expires-at']).toBe(String(Date.parse('2026-01-01T01:00:00Z') / 1000));
    expect(Object.values(labels).every((v) => /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/.test(v) && v.length <= 63)).toBe(true);
    expect(warrenLabels(pod)['warren.label.team']).toBe('a b/c: not a label value');
    expect(JSON.parse(pod.metadata!.annotations![LABELS_ANNOTATION]!)['warren.settings']).toBeDefined();
  });

  it('names pods by a lowercase form and a hash of the exact id, so ids that differ in case do not collide', () => {
    expect(podName('AbC123')).toMatch(/^warren-abc123-[0-9a-f]{8}$/);
    expect(podName('AbC123')).not.toBe(podName('abc123'));
    expect(podName('x'.repeat(100)).length).toBeLessThanOrEqual(63);
  });

  it('refuses host mounts and a runtime with no RuntimeClass, and maps runsc to the configured class', () => {
    expect(() => podFor({ mounts: [{ hostPath: '/srv/warren-data/x', path: '/data' }] })).toThrow(/Host folders cannot be mounted/);
    const withRunsc = { ...context, runtimes: ['runc', 'runsc'] };
    const plan = planSandbox({ runtime: 'runsc' }, withRunsc);
    const base = {
      agentId: 'a1',
      image: plan.image,
      env: {},
      labels: {},
      settings: plan.settings,
      daemonSecret: 'x'.repeat(48),
      runtimeImage: 'r',
      imagePullPolicy: 'Never' as const,
    };
    expect(() => sandboxPod({ ...base, runtimeClasses: {} })).toThrow(/no RuntimeClass/);
    expect(sandboxPod({ ...base, runtimeClasses: { runsc: 'gvisor' } }).spec!.runtimeClassName).toBe('gvisor');
  });
});

describe('reading pod status', () => {
  const pod = (status: V1Pod['status'], extra: Partial<V1Pod['metadata']> = {}): V1Pod => ({ metadata: { name: 'warren-x', ...extra }, status });

  it('says running only when the sandbox container runs', () => {
    expect(startVerdict(pod({ phase: 'Running', containerStatuses: [{ name: 'sandbox', state: { running: {} } } as never] }), 'img', false).kind).toBe(
      'running',
    );
    expect(startVerdict(pod({ phase: 'Pending' }), 'img', false).kind).toBe('waiting');
  });

  it('turns a missing image into NOT_FOUND with the kubelet reason', () => {
    const v = startVerdict(
      pod({
        phase: 'Pending',
        containerStatuses: [{ name: 'sandbox', image: 'nope:1', state: { waiting: { reason: 'ErrImageNeverPull', message: 'image not present' } } } as never],
      }),
      'nope:1',
      false,
    );
    expect(v.kind).toBe('failed');
    if (v.kind !== 'failed') return;
    expect(v.error.code).toBe('NOT_FOUND');
    expect(v.error.message).toMatch(/ErrImageNeverPull.*image not present/);
  });

  it('gives an unschedulable pod the grace, then RESOURCE_EXHAUSTED with the scheduler message', () => {
    const status = {
      phase: 'Pending',
      conditions: [{ type: 'PodScheduled', status: 'False', reason: 'Unschedulable', message: '0/2 nodes are available: 2 Insufficient memory.' }],
    };
    expect(startVerdict(pod(status as never), 'img', false).kind).toBe('waiting');
    const v = startVerdict(pod(status), 'img', true);
    expect(v.kind === 'failed' && v.error.code).toBe('RESOURCE_EXHAUSTED');
    expect(v.kind === 'failed' && v.error.message).toMatch(/Insufficient memory/);
  });

  it('fails on an init container that exited non-zero', () => {
    const v = startVerdict(
      pod({
        phase: 'Pending',
        initContainerStatuses: [{ name: 'warren-runtime', image: 'r', state: { terminated: { exitCode: 1, reason: 'Error' } } } as never],
      }),
      'img',
      false,
    );
    expect(v.kind === 'failed' && v.error.message).toMatch(/warren-runtime ended \(exit 1/);
  });

  it('maps ended and terminating pods to exited', () => {
    expect(podState(pod({ phase: 'Running', containerStatuses: [{ name: 'sandbox', state: { terminated: { exitCode: 137 } } } as never] }))).toBe('exited');
    expect(podState(pod({ phase: 'Failed' }))).toBe('exited');
    expect(podState(pod({ phase: 'Running' }, { deletionTimestamp: new Date() }))).toBe('exited');
    expect(podState(pod({ phase: 'Running', containerStatuses: [{ name: 'sandbox', state: { running: {} } } as never] }))).toBe('running');
  });

  it('tells a pod evicted from a lost node (not Ready, containers still running and ready) from one being deleted normally', () => {
    const running = { name: 'sandbox', ready: true, state: { running: {} } } as never;
    const notReady = [{ type: 'Ready', status: 'False' }] as never;
    const evicting = { deletionTimestamp: new Date() };
    expect(lostNode(pod({ phase: 'Running', conditions: notReady, containerStatuses: [running] }, evicting))).toMatch(/stopped answering/);
    // Not evicted yet: Kubernetes still tolerates the node (nodeLostSeconds).
    expect(lostNode(pod({ phase: 'Running', conditions: notReady, containerStatuses: [running] }))).toBeUndefined();
    // A normal delete on a live node: Ready still true, or the kubelet reports the containers ending.
    expect(
      lostNode(pod({ phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] as never, containerStatuses: [running] }, evicting)),
    ).toBeUndefined();
    const ending = { name: 'sandbox', ready: false, state: { running: {} } } as never;
    expect(lostNode(pod({ phase: 'Running', conditions: notReady, containerStatuses: [ending] }, evicting))).toBeUndefined();
  });

  it('does not take labels from an annotation that is not an object of strings', () => {
    const p: V1Pod = { metadata: { name: 'warren-x', labels: { 'warren.sandbox': 'x' }, annotations: { [LABELS_ANNOTATION]: '["x"]' } } };
    expect(warrenLabels(p)).toEqual({ 'warren.sandbox': 'x' });
  });
});

describe('API errors', () => {
  const api = (code: number, body: unknown) => Object.assign(new Error(`HTTP ${code}`), { code, body: JSON.stringify(body) });

  it('maps RBAC refusals to FORBIDDEN with the cluster message', () => {
    const err = kubeError(api(403, { reason: 'Forbidden', message: 'pods is forbidden: User "x" cannot create resource "pods"' }), 'create pod');
    expect(err).toBeInstanceOf(CodedError);
    expect(err.code).toBe('FORBIDDEN');
    expect(err.message).toMatch(/cannot create resource "pods".*\(Forbidden\)/);
  });

  it('maps quota refusals to RESOURCE_EXHAUSTED', () => {
    const err = kubeError(
      api(403, { reason: 'Forbidden', message: 'pods "p" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2' }),
      'create pod',
    );
    expect(err.code).toBe('RESOURCE_EXHAUSTED');
  });

  it('maps 404, 409, 422 and an unreachable server', () => {
    expect(kubeError(api(404, { reason: 'NotFound', message: 'pods "p" not found' }), 'read').code).toBe('SANDBOX_NOT_FOUND');
    expect(kubeError(api(409, { reason: 'AlreadyExists', message: 'exists' }), 'create').code).toBe('CONFLICT');
    expect(kubeError(api(422, { reason: 'Invalid', message: 'spec.containers[0].image: Required value' }), 'create').code).toBe('INVALID_PARAMS');
    expect(kubeError(Object.assign(new Error('connect ECONNREFUSED 10.0.0.1:6443'), { code: 'ECONNREFUSED' }), 'list').code).toBe('UPSTREAM_UNAVAILABLE');
  });
});
