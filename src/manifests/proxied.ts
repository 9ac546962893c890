// Which Services kube-proxy proxies: not those labelled service.kubernetes.io/service-proxy-name
// (another proxy owns them) nor service.kubernetes.io/headless (kube-proxy's informers select
// "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless"; Kubernetes e2e
// "should implement service.kubernetes.io/service-proxy-name" and ".../headless"). The label's
// presence decides, whatever its value. One filter for every source: the Kubernetes API source
// sends it as the informers' label selector, the manifests path (resolve.ts: the manifests
// directory source, `kubetun rules`) and the change tracker apply the predicate.

/** The labels whose presence takes a Service away from kube-proxy. */
export const NOT_PROXIED_LABELS = [
  'service.kubernetes.io/service-proxy-name',
  'service.kubernetes.io/headless',
] as const;

/** kube-proxy's informer label selector, built from the same labels. */
export const KUBE_PROXY_LABEL_SELECTOR = NOT_PROXIED_LABELS.map((l) => `!${l}`).join(',');

export function proxiedByKubeProxy(labels: Readonly<Record<string, string>> | undefined): boolean {
  return labels === undefined || NOT_PROXIED_LABELS.every((l) => !(l in labels));
}
