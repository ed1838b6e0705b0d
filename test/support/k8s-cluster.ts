import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { access, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { CoreV1Api, KubeConfig, loadAllYaml, RbacAuthorizationV1Api, type V1Role } from '@kubernetes/client-node';
import {
  collectRuntime,
  KubernetesProvider,
  loadConfig,
  planSandbox,
  runtimeImageName,
  runtimeImageTar,
  sandboxLabels,
  type KubernetesProviderOptions,
  type SandboxSpec,
} from '@warren/controller';

const repoRoot = path.resolve(import.meta.dirname, '../..');
/** Where scripts/lib/k8s-cluster.sh keeps its state (the kubeconfigs it wrote). */
export const CLUSTER_STATE = process.env.WARREN_K8S_STATE ?? '/var/lib/warren-k8s';
const clusterScript = path.join(repoRoot, 'scripts/lib/k8s-cluster.sh');

/** The test cluster as the `k8s` tier uses it: a namespace of this run, the admin and the non-admin user. */
export interface K8sFixture {
  namespace: string;
  admin: KubeConfig;
  /** The non-admin user `warren-tester`, bound to the shipped Role in {@link K8sFixture.namespace} only. */
  tester: KubeConfig;
  runtimeImage: string;
  /** A provider acting as the non-admin user, with the shipped Role. */
  provider(options?: Partial<KubernetesProviderOptions>): Promise<KubernetesProvider>;
  /** A spec the provider can start (the default image, the default settings, a fresh id). */
  spec(overrides?: Partial<SandboxSpec>): SandboxSpec;
  close(): Promise<void>;
}

/** The Role that deploy/kubernetes/rbac.yaml ships, as the cluster is given it. */
export async function shippedRole(): Promise<V1Role> {
  const docs = loadAllYaml(await readFile(path.join(repoRoot, 'deploy/kubernetes/rbac.yaml'), 'utf8')) as { kind: string }[];
  const role = docs.find((d) => d.kind === 'Role');
  if (!role) throw new Error('deploy/kubernetes/rbac.yaml has no Role');
  return role;
}

/**
 * Opens the running test cluster (scripts/lib/k8s-cluster.sh up), makes a namespace for this test
 * file, binds the shipped Role to the non-admin user there, and loads this checkout's runtime
 * image on both nodes (once per runtime build).
 */
export async function openK8sFixture(): Promise<K8sFixture> {
  const adminFile = path.join(CLUSTER_STATE, 'admin.kubeconfig');
  const testerFile = path.join(CLUSTER_STATE, 'tester.kubeconfig');
  await access(adminFile).catch(() => {
    throw new Error(`No test cluster: ${adminFile} is missing. Start one with scripts/lib/k8s-cluster.sh up (scripts/test k8s does).`);
  });
  const admin = new KubeConfig();
  admin.loadFromFile(adminFile);
  const tester = new KubeConfig();
  tester.loadFromFile(testerFile);
  const config = loadConfig({}, { stateDir: '/nonexistent' });
  const runtime = await collectRuntime(config.agentBundlePath);
  const runtimeImage = runtimeImageName(runtime);
  await loadRuntimeImage(runtimeImage, () => runtimeImageTar(runtime, runtimeImage), runtime.hash);

  const namespace = `warren-test-${randomBytes(4).toString('hex')}`;
  const core = admin.makeApiClient(CoreV1Api);
  const rbac = admin.makeApiClient(RbacAuthorizationV1Api);
  await core.createNamespace({ body: { metadata: { name: namespace, labels: { 'warren.dev/test': 'k8s-tier' } } } });
  const role = await shippedRole();
  await rbac.createNamespacedRole({ namespace, body: { ...role, metadata: { name: 'warren-controller', namespace } } });
  await rbac.createNamespacedRoleBinding({
    namespace,
    body: {
      metadata: { name: 'warren-controller', namespace },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'warren-controller' },
      subjects: [{ kind: 'User', name: 'warren-tester', apiGroup: 'rbac.authorization.k8s.io' }],
    },
  });
  // The ServiceAccount admission of the controller-manager must have made `default` before pods are accepted.
  for (let i = 0; i < 100; i++) {
    const accounts = await core.listNamespacedServiceAccount({ namespace });
    if (accounts.items.some((a) => a.metadata?.name === 'default')) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  let n = 0;
  const plan = planSandbox({ ttlSeconds: 600, memoryMb: 256, cpus: 0.25 }, { config, runtimes: ['runc'] });
  return {
    namespace,
    admin,
    tester,
    runtimeImage,
    async provider(options = {}) {
      const provider = await KubernetesProvider.load({ kubeConfig: tester, namespace, imagePullPolicy: 'Never', startTimeoutMs: 60_000, ...options });
      await provider.prepare(runtime);
      return provider;
    },
    spec(overrides = {}) {
      const agentId = `k8s${Date.now().toString(36)}x${++n}`;
      const now = new Date();
      return {
        agentId,
        image: plan.image,
        env: {},
        labels: sandboxLabels({
          id: agentId,
          owner: 'k8s-tier',
          image: plan.image,
          createdAt: now,
          expiresAt: new Date(now.getTime() + 600_000),
          settings: plan.settings,
          labels: {},
        }),
        settings: plan.settings,
        daemonSecret: randomBytes(24).toString('hex'),
        ...overrides,
      };
    },
    async close() {
      await core.deleteNamespace({ name: namespace, gracePeriodSeconds: 0 }).catch(() => undefined);
    },
  };
}

/** Imports the runtime image on both nodes unless this build's image was imported already. */
async function loadRuntimeImage(name: string, archive: () => Promise<Buffer>, hash: string): Promise<void> {
  const dir = path.join(CLUSTER_STATE, 'images');
  const marker = path.join(dir, `.runtime-${hash}.loaded`);
  if (
    await access(marker).then(
      () => true,
      () => false,
    )
  )
    return;
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, `runtime-${hash}.tar`);
  await writeFile(file, await archive());
  await promisify(execFile)(clusterScript, ['load-image', file], { timeout: 120_000 });
  await writeFile(marker, name);
}
