// Whether `kubetun run` runs in a Pod with API access, and the error that says which cluster
// fact is missing — apart from cluster-config.ts so that `kubetun run` can decide without
// loading the Kubernetes client (a third of a second at every start: src/runtime.ts).
import { UserError } from '../errors.ts';

/** What the command line or the cluster did not give; says what to give instead. */
export class ClusterConfigError extends UserError {
  constructor(message: string) {
    super('CLUSTER_CONFIG', message);
  }
}

/** True when this process runs in a Pod with API access (the variables the kubelet sets). */
export function inCluster(env: NodeJS.ProcessEnv = process.env): boolean {
  return Boolean(env.KUBERNETES_SERVICE_HOST && env.KUBERNETES_SERVICE_PORT);
}
