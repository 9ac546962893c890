// Deployment → ReplicaSet → Pods, as kube-controller-manager's deployment and replicaset
// controllers do it, level-triggered: reconcileDeployments(store) looks at what is stored and
// writes what should change, and is simply run again after every change.
//
//   Deployment  template hash (pod-template-hash) names the ReplicaSet of the current template;
//               a changed template (kubectl.kubernetes.io/restartedAt is how `rollout restart`
//               changes it) makes a new ReplicaSet, and the rolling update moves replicas over:
//                 new RS up   to replicas + maxSurge pods in total (maxSurge: 25%, rounded up)
//                 old RS down while at least replicas - maxUnavailable pods stay available
//                             (maxUnavailable: 25%, rounded down; both 0 means 1 unavailable)
//               Recreate: old ReplicaSets to 0 first, the new one up when their Pods are gone.
//               Old ReplicaSets at 0 beyond revisionHistoryLimit are deleted.
//   ReplicaSet  creates Pods from its template (generateName <rs>-) up to spec.replicas, deletes
//               the surplus (unscheduled first, then not ready, then the newest) gracefully.
import { createHash } from 'node:crypto';
import { matchesSelector } from './selector.ts';
import type { Store } from './store.ts';
import type { Deployment, KObject, OwnerReference, Pod, ReplicaSet } from './types.ts';

export const HASH_LABEL = 'pod-template-hash';
export const REVISION_ANNOTATION = 'deployment.kubernetes.io/revision';
export const RESTARTED_AT_ANNOTATION = 'kubectl.kubernetes.io/restartedAt';
const WRITER = 'deployment-controller';

export function reconcileDeployments(store: Store): string[] {
  const problems: string[] = [];
  for (const d of store.list<Deployment>('Deployment')) problems.push(...syncDeployment(store, d));
  for (const rs of store.list<ReplicaSet>('ReplicaSet'))
    problems.push(...syncReplicaSet(store, rs));
  return problems;
}

/** The hash of a pod template (the label value that names the ReplicaSet). */
export function templateHash(d: Deployment): string {
  const h = createHash('sha256').update(JSON.stringify(d.spec.template)).digest();
  const alphabet = 'bcdfghjklmnpqrstvwxz2456789';
  return [...h.subarray(0, 10)].map((b) => alphabet[b % alphabet.length]).join('');
}

/**
 * kubectl rollout status's verdict on a Deployment as stored: what it still waits for, or
 * undefined when the controller has seen its last change and every replica is updated and
 * available, with no old one left (terminating Pods no longer count).
 */
export function rolloutWaiting(d: Deployment): string | undefined {
  const st = (d.status ?? {}) as Record<string, number | undefined>;
  const want = d.spec.replicas ?? 1;
  const name = d.metadata.name;
  const [updated, total, ready] = [
    st.updatedReplicas ?? 0,
    st.replicas ?? 0,
    st.readyReplicas ?? 0,
  ];
  if ((st.observedGeneration ?? 0) < (d.metadata.generation ?? 0))
    return 'Waiting for deployment spec update to be observed...';
  if (updated < want)
    return `Waiting for deployment "${name}" rollout to finish: ${updated} out of ${want} new replicas have been updated...`;
  if (total > updated)
    return `Waiting for deployment "${name}" rollout to finish: ${total - updated} old replicas are pending termination...`;
  if (ready < updated)
    return `Waiting for deployment "${name}" rollout to finish: ${ready} of ${updated} updated replicas are available...`;
  return undefined;
}

/** maxSurge, maxUnavailable as Pod counts (percentages of replicas: surge up, unavailable down). */
export function rollingBounds(d: Deployment): { surge: number; unavailable: number } {
  const replicas = d.spec.replicas ?? 1;
  const ru = d.spec.strategy?.rollingUpdate ?? {};
  const count = (v: number | string | undefined, dflt: string, up: boolean) => {
    const s = v ?? dflt;
    if (typeof s === 'number') return s;
    const pct = (Number(s.replace('%', '')) * replicas) / 100;
    return up ? Math.ceil(pct) : Math.floor(pct);
  };
  const surge = count(ru.maxSurge, '25%', true);
  const unavailable = count(ru.maxUnavailable, '25%', false);
  return { surge, unavailable: surge === 0 && unavailable === 0 ? 1 : unavailable };
}

function ownerRef(o: KObject): OwnerReference {
  return {
    apiVersion: o.apiVersion,
    kind: o.kind,
    name: o.metadata.name,
    uid: o.metadata.uid ?? '',
    controller: true,
    blockOwnerDeletion: true,
  };
}

function ownedBy<T extends KObject>(objs: T[], owner: KObject): T[] {
  return objs.filter((o) =>
    (o.metadata.ownerReferences ?? []).some((r) => r.controller && r.uid === owner.metadata.uid),
  );
}

function activePods(store: Store, rs: ReplicaSet): Pod[] {
  return ownedBy(store.list<Pod>('Pod', rs.metadata.namespace), rs).filter(
    (p) => !p.metadata.deletionTimestamp,
  );
}

const isReady = (p: Pod) =>
  (p.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');

function syncDeployment(store: Store, d: Deployment): string[] {
  const ns = d.metadata.namespace;
  const all = ownedBy(store.list<ReplicaSet>('ReplicaSet', ns), d);
  const hash = templateHash(d);
  const replicas = d.spec.paused ? undefined : (d.spec.replicas ?? 1);
  let current = all.find((rs) => rs.metadata.labels?.[HASH_LABEL] === hash);
  const revision =
    1 +
    Math.max(0, ...all.map((rs) => Number(rs.metadata.annotations?.[REVISION_ANNOTATION] ?? 0)));
  if (!current) {
    const r = store.apply(newReplicaSet(d, hash, revision), WRITER);
    if (!('object' in r)) return admissionProblems(d, r);
    current = r.object as ReplicaSet;
  } else if (current.metadata.annotations?.[REVISION_ANNOTATION] !== String(revision - 1)) {
    // a rollback to an older template makes that ReplicaSet the newest revision again
    const older = all.filter((rs) => rs !== current);
    const top = Math.max(
      0,
      ...older.map((rs) => Number(rs.metadata.annotations?.[REVISION_ANNOTATION] ?? 0)),
    );
    if (Number(current.metadata.annotations?.[REVISION_ANNOTATION] ?? 0) < top)
      setReplicas(store, current, current.spec.replicas ?? 0, String(top + 1));
  }
  const old = all.filter((rs) => rs !== current);
  if (replicas !== undefined) {
    if (d.spec.strategy?.type === 'Recreate') recreate(store, current, old, replicas);
    else rollingUpdate(store, d, current, old, replicas);
  }
  cleanupHistory(store, d, old);
  writeDeploymentStatus(store, d, current, old);
  return [];
}

function newReplicaSet(d: Deployment, hash: string, revision: number): ReplicaSet {
  const labels = { ...(d.spec.template.metadata?.labels ?? {}), [HASH_LABEL]: hash };
  return {
    apiVersion: 'apps/v1',
    kind: 'ReplicaSet',
    metadata: {
      name: `${d.metadata.name}-${hash}`,
      namespace: d.metadata.namespace,
      labels,
      annotations: { [REVISION_ANNOTATION]: String(revision) },
      ownerReferences: [ownerRef(d)],
    },
    spec: {
      replicas: 0,
      selector: {
        ...d.spec.selector,
        matchLabels: { ...(d.spec.selector.matchLabels ?? {}), [HASH_LABEL]: hash },
      },
      template: { ...d.spec.template, metadata: { ...d.spec.template.metadata, labels } },
      minReadySeconds: d.spec.minReadySeconds,
    },
  };
}

function rollingUpdate(
  store: Store,
  d: Deployment,
  cur: ReplicaSet,
  old: ReplicaSet[],
  replicas: number,
): void {
  const { surge, unavailable } = rollingBounds(d);
  const specTotal = [cur, ...old].reduce((a, rs) => a + (rs.spec.replicas ?? 0), 0);
  const curReplicas = cur.spec.replicas ?? 0;
  const oldActive = old.filter((rs) => (rs.spec.replicas ?? 0) > 0);
  // scale the new ReplicaSet up (or to replicas at once when nothing old is left: a scale)
  const want =
    oldActive.length === 0
      ? replicas
      : Math.min(replicas, curReplicas + Math.max(0, replicas + surge - specTotal));
  if (want !== curReplicas) setReplicas(store, cur, want);
  if (oldActive.length === 0) return;
  // scale old ReplicaSets down, keeping replicas - maxUnavailable Pods available
  const minAvailable = replicas - unavailable;
  let available = [cur, ...old].reduce(
    (a, rs) => a + activePods(store, rs).filter(isReady).length,
    0,
  );
  for (const rs of oldActive.sort(byRevision)) {
    const pods = activePods(store, rs);
    const unready = pods.filter((p) => !isReady(p)).length;
    let n = rs.spec.replicas ?? 0;
    // Pods that are not available anyway go first: removing them costs no availability
    const dropUnready = Math.min(unready, n);
    n -= dropUnready;
    const canDrop = Math.max(0, Math.min(n, available - minAvailable));
    n -= canDrop;
    available -= canDrop;
    if (n !== rs.spec.replicas) setReplicas(store, rs, n);
  }
}

function recreate(store: Store, cur: ReplicaSet, old: ReplicaSet[], replicas: number): void {
  for (const rs of old) if ((rs.spec.replicas ?? 0) > 0) setReplicas(store, rs, 0);
  const oldPods = old.reduce(
    (a, rs) => a + ownedBy(store.list<Pod>('Pod', rs.metadata.namespace), rs).length,
    0,
  );
  if (oldPods === 0 && (cur.spec.replicas ?? 0) !== replicas) setReplicas(store, cur, replicas);
}

const byRevision = (a: ReplicaSet, b: ReplicaSet) =>
  Number(a.metadata.annotations?.[REVISION_ANNOTATION] ?? 0) -
  Number(b.metadata.annotations?.[REVISION_ANNOTATION] ?? 0);

function setReplicas(store: Store, rs: ReplicaSet, n: number, revision?: string): void {
  const annotations = { ...rs.metadata.annotations };
  if (revision) annotations[REVISION_ANNOTATION] = revision;
  const next = {
    ...rs,
    metadata: { ...rs.metadata, annotations },
    spec: { ...rs.spec, replicas: n },
  };
  store.apply(next, WRITER);
}

function cleanupHistory(store: Store, d: Deployment, old: ReplicaSet[]): void {
  const limit = d.spec.revisionHistoryLimit ?? 10;
  const idle = old
    .filter((rs) => (rs.spec.replicas ?? 0) === 0 && activePods(store, rs).length === 0)
    .sort(byRevision);
  for (const rs of idle.slice(0, Math.max(0, idle.length - limit)))
    store.delete('ReplicaSet', rs.metadata.namespace, rs.metadata.name);
}

function writeDeploymentStatus(
  store: Store,
  d: Deployment,
  cur: ReplicaSet,
  old: ReplicaSet[],
): void {
  const pods = [cur, ...old].flatMap((rs) => activePods(store, rs));
  const ready = pods.filter(isReady).length;
  const updated = activePods(store, cur).length;
  const replicas = d.spec.replicas ?? 1;
  const { unavailable } = rollingBounds(d);
  store.updateStatus('Deployment', d.metadata.namespace, d.metadata.name, {
    observedGeneration: d.metadata.generation,
    replicas: pods.length,
    updatedReplicas: updated,
    readyReplicas: ready,
    availableReplicas: ready,
    unavailableReplicas: Math.max(0, replicas - ready),
    conditions: [
      {
        type: 'Available',
        status: ready >= replicas - unavailable ? 'True' : 'False',
        reason:
          ready >= replicas - unavailable
            ? 'MinimumReplicasAvailable'
            : 'MinimumReplicasUnavailable',
      },
      {
        type: 'Progressing',
        status: 'True',
        reason:
          updated === replicas && pods.length === replicas
            ? 'NewReplicaSetAvailable'
            : 'ReplicaSetUpdated',
      },
    ],
  });
}

function syncReplicaSet(store: Store, rs: ReplicaSet): string[] {
  const ns = rs.metadata.namespace;
  const pods = ownedBy(store.list<Pod>('Pod', ns), rs).filter((p) => !p.metadata.deletionTimestamp);
  // Pods matching the selector but owned by nobody are adopted, as the controller does
  for (const p of store.list<Pod>('Pod', ns)) {
    if ((p.metadata.ownerReferences ?? []).length > 0 || p.metadata.deletionTimestamp) continue;
    if (
      matchesSelector(p.metadata.labels, rs.spec.selector) &&
      pods.length < (rs.spec.replicas ?? 0)
    ) {
      const adopted = { ...p, metadata: { ...p.metadata, ownerReferences: [ownerRef(rs)] } };
      const r = store.apply(adopted, WRITER);
      if ('object' in r) pods.push(r.object as Pod);
    }
  }
  const want = rs.spec.replicas ?? 1;
  const problems: string[] = [];
  for (let i = pods.length; i < want; i++) {
    const r = store.apply(podFor(rs), WRITER);
    if (!('object' in r)) {
      problems.push(...admissionProblems(rs, r));
      break;
    }
  }
  for (const p of pods.sort(deletionOrder).slice(0, Math.max(0, pods.length - want)))
    store.delete('Pod', p.metadata.namespace, p.metadata.name);
  const live = ownedBy(store.list<Pod>('Pod', ns), rs).filter((p) => !p.metadata.deletionTimestamp);
  const ready = live.filter(isReady).length;
  store.updateStatus('ReplicaSet', ns, rs.metadata.name, {
    replicas: live.length,
    fullyLabeledReplicas: live.length,
    readyReplicas: ready,
    availableReplicas: ready,
    observedGeneration: rs.metadata.generation,
  });
  return problems;
}

function podFor(rs: ReplicaSet): Pod {
  const t = rs.spec.template;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      ...(t.metadata ?? {}),
      name: '',
      generateName: `${rs.metadata.name}-`,
      namespace: rs.metadata.namespace,
      ownerReferences: [ownerRef(rs)],
    },
    spec: structuredClone(t.spec),
  };
}

/** The replicaset controller's ranking of Pods to delete: unscheduled, not ready, newest. */
function deletionOrder(a: Pod, b: Pod): number {
  const rank = (p: Pod) => (p.spec.nodeName ? 0 : 2) + (isReady(p) ? 0 : 1);
  const r = rank(b) - rank(a);
  if (r !== 0) return r;
  return (b.metadata.creationTimestamp ?? '').localeCompare(a.metadata.creationTimestamp ?? '');
}

function admissionProblems(
  owner: KObject,
  r: { errors: { message: string }[] } | { ignored: string },
): string[] {
  if ('ignored' in r) return [r.ignored];
  return r.errors.map(
    (e) => `${owner.kind} ${owner.metadata.namespace}/${owner.metadata.name}: ${e.message}`,
  );
}
