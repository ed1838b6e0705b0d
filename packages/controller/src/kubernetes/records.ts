import type { CoreV1Api, V1Pod } from '@kubernetes/client-node';
import type { SharedRecords } from '../provider.js';
import type { StoredRecord } from '../record-store.js';
import { TenantName } from '../tenancy/principals.js';
import { LABELS } from '../labels.js';
import { kubeError } from './errors.js';
import { CLAIM_ANNOTATION, MANAGED_BY, podName, UNCLAIMED } from './pod-spec.js';

/** The annotation holding a sandbox's record (moved expiry, a pool member's public identity) as JSON. */
export const RECORD_ANNOTATION = 'warren.dev/record';
/** The claim annotation of a pool member taken out of the pool to be removed. */
const RETIRED = 'retired';

/** A JSON-pointer step (RFC 6901): `~` and `/` escaped. */
function pointer(key: string): string {
  return key.replace(/~/g, '~0').replace(/\//g, '~1');
}

/**
 * A pod's record, from its annotation. The pod is writable by whoever may patch pods, so the JSON
 * is read as untrusted: the wrong shape is no record, and only known fields of the right types pass.
 */
export function recordOf(pod: V1Pod): StoredRecord | undefined {
  const raw = pod.metadata?.annotations?.[RECORD_ANNOTATION];
  if (raw === undefined) return undefined;
  let data: unknown;
  try {
    data = JSON.parse(raw);
  } catch {
    return undefined;
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data)) return undefined;
  const d = data as Record<string, unknown>;
  const agentId = pod.metadata?.labels?.[LABELS.sandbox];
  if (typeof d.id !== 'string' || typeof d.agentId !== 'string' || d.agentId !== agentId || typeof d.expiresAt !== 'string') return undefined;
  if (!Number.isFinite(Date.parse(d.expiresAt))) return undefined;
  const record: StoredRecord = { id: d.id, agentId: d.agentId, expiresAt: d.expiresAt };
  if (typeof d.createdAt === 'string') record.createdAt = d.createdAt;
  if (typeof d.labels === 'object' && d.labels !== null && !Array.isArray(d.labels))
    record.labels = Object.fromEntries(Object.entries(d.labels).filter((e): e is [string, string] => typeof e[1] === 'string'));
  if (d.policy !== undefined) record.policy = d.policy;
  if (typeof d.ttlSeconds === 'number') record.ttlSeconds = d.ttlSeconds;
  if (typeof d.tenant === 'string' && TenantName.safeParse(d.tenant).success) record.tenant = d.tenant;
  if (typeof d.creatorKeyId === 'string' && /^[0-9a-f]{16}$/.test(d.creatorKeyId)) record.creatorKeyId = d.creatorKeyId;
  if (Array.isArray(d.creatorScopes)) record.creatorScopes = d.creatorScopes.filter((s): s is string => typeof s === 'string');
  if (Array.isArray(d.publicPorts)) record.publicPorts = d.publicPorts.filter((p): p is number => typeof p === 'number');
  return record;
}

/**
 * Sandbox records on their pods' annotations, so every controller replica reads the same ones.
 * Writes are JSON patches of one annotation; a warm-pool claim is a JSON patch whose first step
 * tests that the claim annotation still reads {@link UNCLAIMED}: the API server applies a patch
 * atomically against the object's latest version, so of any number of concurrent claimants exactly
 * one succeeds and the others get a failed test (422) or a conflict (409).
 *
 * @example
 * const records = new PodRecords(core, 'warren-sandboxes', warrenLabels);
 * if (await records.claim(member.handle, record)) serve(record);
 */
export class PodRecords implements SharedRecords {
  constructor(
    private readonly core: CoreV1Api,
    private readonly namespace: string,
    /** Warren's labels of a pod (the provider's reading of its labels annotation). */
    private readonly labelsOf: (pod: V1Pod) => Record<string, string>,
  ) {}

  async readAll(): Promise<Map<string, StoredRecord>> {
    const list = await this.core
      .listNamespacedPod({ namespace: this.namespace, labelSelector: `${MANAGED_BY.key}=${MANAGED_BY.value}` })
      .catch((e: unknown) => {
        throw kubeError(e, `list the sandbox pods in namespace ${this.namespace}`);
      });
    const out = new Map<string, StoredRecord>();
    for (const pod of list.items) {
      const record = recordOf(pod);
      if (record && !pod.metadata?.deletionTimestamp) out.set(record.id, record);
    }
    return out;
  }

  async read(agentId: string): Promise<StoredRecord | undefined> {
    try {
      return recordOf(await this.core.readNamespacedPod({ name: podName(agentId), namespace: this.namespace }));
    } catch (e) {
      const err = kubeError(e, `read the record of sandbox ${agentId}`);
      if (err.code === 'SANDBOX_NOT_FOUND') return undefined;
      throw err;
    }
  }

  async write(record: StoredRecord): Promise<void> {
    await this.patch(
      podName(record.agentId),
      [{ op: 'add', path: `/metadata/annotations/${pointer(RECORD_ANNOTATION)}`, value: JSON.stringify(record) }],
      'write the record of',
    );
  }

  /** The record goes with its pod. */
  async remove(): Promise<void> {}

  async unclaimed(): Promise<{ agentId: string; handle: string; labels: Record<string, string> }[]> {
    const list = await this.core
      .listNamespacedPod({ namespace: this.namespace, labelSelector: `${MANAGED_BY.key}=${MANAGED_BY.value},${LABELS.pool}=1` })
      .catch((e: unknown) => {
        throw kubeError(e, `list the warm-pool pods in namespace ${this.namespace}`);
      });
    return list.items
      .filter((pod) => pod.metadata?.annotations?.[CLAIM_ANNOTATION] === UNCLAIMED && !pod.metadata.deletionTimestamp && pod.status?.phase === 'Running')
      .sort((a, b) => String(a.metadata?.creationTimestamp ?? '').localeCompare(String(b.metadata?.creationTimestamp ?? '')))
      .map((pod) => ({ agentId: pod.metadata!.labels![LABELS.sandbox]!, handle: pod.metadata!.name!, labels: this.labelsOf(pod) }))
      .filter((m) => typeof m.agentId === 'string' && m.labels[LABELS.sandbox] === m.agentId);
  }

  claim(handle: string, record: StoredRecord): Promise<boolean> {
    return this.takeUnclaimed(handle, record.id, [{ op: 'add', path: `/metadata/annotations/${pointer(RECORD_ANNOTATION)}`, value: JSON.stringify(record) }]);
  }

  /** Marks the member `retired` only while it is unclaimed, so a removal never takes a claimed pod. */
  retire(handle: string): Promise<boolean> {
    return this.takeUnclaimed(handle, RETIRED, []);
  }

  private async takeUnclaimed(handle: string, value: string, more: object[]): Promise<boolean> {
    try {
      await this.patch(
        handle,
        [
          { op: 'test', path: `/metadata/annotations/${pointer(CLAIM_ANNOTATION)}`, value: UNCLAIMED },
          { op: 'replace', path: `/metadata/annotations/${pointer(CLAIM_ANNOTATION)}`, value },
          ...more,
        ],
        'claim',
      );
      return true;
    } catch (err) {
      const code = (err as { code?: string }).code;
      // A failed test (another replica claimed it), a conflict, or a member that is gone: lost.
      if (code === 'INVALID_PARAMS' || code === 'CONFLICT' || code === 'SANDBOX_NOT_FOUND') return false;
      throw err;
    }
  }

  private async patch(name: string, body: object[], doing: string): Promise<void> {
    await this.core.patchNamespacedPod({ name, namespace: this.namespace, body }).catch((e: unknown) => {
      throw kubeError(e, `${doing} the pod ${name}`);
    });
  }
}
