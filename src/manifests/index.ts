// The manifests source: Kubernetes YAML → ClusterState → ResolvedServicePort[].
export { KubetunError, ManifestError, type ManifestErrorCode } from './errors.ts';
export { loadManifests, manifestFiles } from './load.ts';
export { checkState, type ParseOptions, parseManifests } from './parse.ts';
export { type ResolveOptions, resolveServicePorts } from './resolve.ts';
