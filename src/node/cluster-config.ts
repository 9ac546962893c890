// Where `kubetun run` gets its cluster facts when it runs as a DaemonSet, the way kube-proxy does:
//
//   API access   --kubeconfig FILE; else in-cluster config (KUBERNETES_SERVICE_HOST/PORT and the
//                ServiceAccount token + CA under /var/run/secrets/kubernetes.io/serviceaccount)
//   node name    --node-name / --hostname-override; else $NODE_NAME (the downward API)
//   node facts   the Node object: InternalIP (else ExternalIP) → --node-ip, spec.podCIDR(s) →
//                --pod-cidr, label topology.kubernetes.io/zone → --node-zone; with
//                --service-cidr-v6 the IPv6 InternalIP → --node-ip-v6 and spec.podCIDRs' IPv6
//                entry → --pod-cidr-v6. A flag given on the command line always wins over the
//                Node object.
import { canonIpv6, parseCidr6 } from '../wire/addr6.ts';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { ClusterConfigError, inCluster } from './in-cluster.ts';

export { ClusterConfigError, inCluster } from './in-cluster.ts';

export const ZONE_LABEL = 'topology.kubernetes.io/zone';

/**
 * deploy/daemonset.yaml's value of KUBERNETES_SERVICE_HOST until the user sets it to the API
 * server (docs/cluster.md): the kubelet's own value is the `kubernetes` Service's ClusterIP,
 * which only a running Service proxy makes reachable — and kubetun is that proxy.
 */
export const API_HOST_PLACEHOLDER = 'SET-ME-api-server-address';

/**
 * The API client configuration: the kubeconfig file when one is given, else in-cluster.
 * `pathPrefix` relocates the ServiceAccount directory (tests).
 */
export function loadKubeConfig(kubeconfig: string | undefined, pathPrefix = ''): KubeConfig {
  const kc = new KubeConfig();
  if (kubeconfig) {
    kc.loadFromFile(kubeconfig);
    return kc;
  }
  if (!inCluster()) {
    throw new ClusterConfigError(
      'no API access: give --kubeconfig FILE, or run in a Pod (KUBERNETES_SERVICE_HOST unset)',
    );
  }
  if (process.env.KUBERNETES_SERVICE_HOST === API_HOST_PLACEHOLDER) {
    throw new ClusterConfigError(
      `KUBERNETES_SERVICE_HOST=${API_HOST_PLACEHOLDER}: set it (and KUBERNETES_SERVICE_PORT) in deploy/daemonset.yaml's env to your API server's address (docs/cluster.md, Install)`,
    );
  }
  kc.loadFromCluster(pathPrefix);
  return kc;
}

export interface NodeFacts {
  /** InternalIP, else ExternalIP (IPv4 only: kubetun serves IPv4) */
  ip?: string;
  /** spec.podCIDRs' IPv4 entry, else spec.podCIDR */
  podCidr?: string;
  /** spec.podCIDRs' IPv6 entry (a dual-stack node's): --pod-cidr-v6 */
  podCidr6?: string;
  /** the IPv6 InternalIP (a dual-stack node's), canonical: --node-ip-v6 */
  ip6?: string;
  zone?: string;
}

interface ApiNode {
  metadata?: { labels?: Record<string, string> };
  spec?: { podCIDR?: string; podCIDRs?: string[] };
  status?: { addresses?: { type: string; address: string }[] };
}

const isV4 = (s: string) => /^\d{1,3}(\.\d{1,3}){3}(\/\d+)?$/.test(s);
const isV6 = (s: string) => s.includes(':') && parseCidr6(s) !== null;

/** The facts kube-proxy reads from its Node object (pure: the object as the API returns it). */
export function nodeFacts(node: ApiNode): NodeFacts {
  const addrs = node.status?.addresses ?? [];
  const pick = (type: string) => addrs.find((a) => a.type === type && isV4(a.address))?.address;
  const cidrs = node.spec?.podCIDRs ?? (node.spec?.podCIDR ? [node.spec.podCIDR] : []);
  const ip6 = addrs
    .filter((a) => a.type === 'InternalIP')
    .map((a) => canonIpv6(a.address))
    .find((a) => a !== null);
  return {
    ip: pick('InternalIP') ?? pick('ExternalIP'),
    ...(ip6 ? { ip6 } : {}),
    podCidr: cidrs.find(isV4),
    ...(cidrs.some(isV6) ? { podCidr6: parseCidr6(cidrs.find(isV6)!)?.text } : {}),
    zone: node.metadata?.labels?.[ZONE_LABEL],
  };
}

/**
 * Reads this node's Node object — with a list by field selector, the call the Node watch makes
 * anyway, so the ClusterRole needs list/watch on nodes and no get. The error says what to give
 * instead when it cannot.
 */
export async function readNodeFacts(kc: KubeConfig, nodeName: string): Promise<NodeFacts> {
  let items: unknown[];
  try {
    const fieldSelector = `metadata.name=${nodeName}`;
    items = (await kc.makeApiClient(CoreV1Api).listNode({ fieldSelector })).items;
  } catch (err) {
    const why = (err as Error).message.split('\n')[0];
    throw new ClusterConfigError(
      `cannot list Node ${nodeName} (${why}): give --node-ip and --pod-cidr, or let the ClusterRole list nodes`,
    );
  }
  if (items.length === 0)
    throw new ClusterConfigError(
      `no Node named ${nodeName}: set --node-name (or NODE_NAME) to this node's name`,
    );
  return nodeFacts(items[0] as ApiNode);
}
