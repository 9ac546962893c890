// Name and label syntax as the API server checks it (k8s.io/apimachinery/pkg/util/validation).
// One place for these rules: the manifests loader, the lab's admission and the CLI import them.
// Each function returns why the value is invalid, or null.

const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1035_LABEL = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const IANA_SVC_NAME = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/;
const QUALIFIED_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

/** Namespaces, port names, container names: lowercase RFC 1123 label, at most 63 characters. */
export function dns1123LabelProblem(s: string): string | null {
  if (s.length > 63) return `"${s}" must be no more than 63 characters`;
  if (!DNS1123_LABEL.test(s)) {
    return `"${s}" must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character`;
  }
  return null;
}

/** Service names: an RFC 1035 label (starts with a letter), at most 63 characters. */
export function dns1035LabelProblem(s: string): string | null {
  if (s.length > 63) return `"${s}" must be no more than 63 characters`;
  if (!DNS1035_LABEL.test(s)) {
    return `"${s}" must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character`;
  }
  return null;
}

/** Pod, Deployment, EndpointSlice names and ExternalName targets: RFC 1123 subdomain, <= 253. */
export function dns1123SubdomainProblem(s: string): string | null {
  if (s.length > 253) return `"${s}" must be no more than 253 characters`;
  if (!DNS1123_SUBDOMAIN.test(s)) {
    return `"${s}" must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character`;
  }
  return null;
}

/** Named ports (containerPort name, targetPort by name): IANA service name, <= 15, a letter. */
export function ianaSvcNameProblem(s: string): string | null {
  if (s.length > 15) return `"${s}" must be no more than 15 characters`;
  if (!IANA_SVC_NAME.test(s)) {
    return `"${s}" must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)`;
  }
  if (s.includes('--')) return `"${s}" must not contain consecutive hyphens`;
  if (!/[a-z]/.test(s)) return `"${s}" must contain at least one letter (a-z)`;
  return null;
}

/** Label and annotation keys: optional DNS-subdomain prefix + "/" + a name of <= 63. */
export function labelKeyProblem(k: string): string | null {
  const slash = k.lastIndexOf('/');
  const name = slash < 0 ? k : k.slice(slash + 1);
  if (slash >= 0) {
    const prefix = k.slice(0, slash);
    if (prefix === '' || dns1123SubdomainProblem(prefix)) {
      return `key "${k}": prefix part must be a lowercase DNS subdomain`;
    }
  }
  if (name.length === 0 || name.length > 63 || !QUALIFIED_NAME.test(name)) {
    return `key "${k}": name part must be 1-63 characters of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric`;
  }
  return null;
}

/** Label values: empty, or <= 63 alphanumerics, '-', '_', '.', alphanumeric at both ends. */
export function labelValueProblem(v: string): string | null {
  if (v.length > 63 || !LABEL_VALUE.test(v)) {
    return `value "${v}" must be no more than 63 characters of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric`;
  }
  return null;
}
