import { probeAgent, type KubernetesProvider, type SandboxSpec } from '@warren/controller';

/**
 * The daemon's first answer after `provider.create`, which returns once the container runs: the
 * daemon opens its socket and port only after its boot, as the provider contract says ("the daemon
 * may not answer yet"). The kubelet reports a container running at its next relist, up to a second
 * after the start; a daemon that boots slower than that (a loaded 2-core machine) is refused
 * (ECONNREFUSED on the pod IP, "failed to execute portforward" through the kubelet). So a test
 * tries again while the answer is SANDBOX_NOT_READY, as the controller's readiness loop does
 * (`waitUntilReady` in sandboxes.ts); any other refusal fails at once.
 */
export async function untilDaemonAnswers(
  provider: KubernetesProvider,
  spec: Pick<SandboxSpec, 'agentId' | 'daemonSecret'>,
  timeoutMs = 30_000,
): ReturnType<typeof probeAgent> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await probeAgent(provider.daemon(spec.agentId), spec.daemonSecret, Math.max(1000, Math.min(10_000, deadline - Date.now())));
    } catch (err) {
      if ((err as { code?: string }).code !== 'SANDBOX_NOT_READY' || Date.now() >= deadline) throw err;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}
