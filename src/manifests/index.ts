// The manifests source: Kubernetes YAML → ClusterState → ResolvedServicePort[].
export { KubetunError, ManifestError, type ManifestErrorCode } from './errors.ts';
export { loadManifests, loadManifestsPartial, manifestFiles, type PartialLoad } from './load.ts';
export { checkState, type ParseOptions, parseManifests } from './parse.ts';
export { type ResolveOptions, resolveServicePorts } from './resolve.ts';
