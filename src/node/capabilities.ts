// The Linux capabilities `kubetun run` needs, checked before it starts: an unprivileged
// container without one (deploy/daemonset.yaml: drop ALL, add these) stops with one line saying
// which and where to add it, instead of at its first TUNSETIFF ("Operation not permitted")
// after it has already listed the API. What each is for, and what was measured not to be needed
// (NET_RAW, SYS_ADMIN, SYS_MODULE, SYS_RESOURCE, IPC_LOCK…): docs/cluster.md, "Capabilities".
// test/deploy checks that the manifest adds exactly this list; the lab's API mode starts every
// agent with the manifest's list (src/lab/daemonset.ts).
import { readFileSync } from 'node:fs';
import { UserError } from '../errors.ts';

/** What the agent does with it: the TUN (TUNSETIFF, TUNSETPERSIST), tc, routes, links, nft. */
export const AGENT_CAPABILITIES = ['NET_ADMIN'] as const;
type Cap = (typeof AGENT_CAPABILITIES)[number];

/** Bit numbers of linux/capability.h. */
const CAP_BIT: Record<Cap, number> = { NET_ADMIN: 12 };

/** The agent's capabilities missing from a /proc/<pid>/status text's effective set. */
export function missingCapabilities(status: string): Cap[] {
  const m = /^CapEff:\s*([0-9a-fA-F]+)$/m.exec(status);
  if (!m) return []; // no capability line: not Linux, nothing to check
  const eff = BigInt(`0x${m[1]}`);
  return AGENT_CAPABILITIES.filter((c) => ((eff >> BigInt(CAP_BIT[c])) & 1n) === 0n);
}

/** Throws a one-line UserError naming what is missing and where to add it. */
export function requireAgentCapabilities(status = readFileSync('/proc/self/status', 'utf8')): void {
  const missing = missingCapabilities(status);
  if (missing.length === 0) return;
  throw new UserError(
    'CAPABILITY',
    `missing capability ${missing.join(', ')} (the TUN, tc filters, routes): add it to the container's securityContext.capabilities.add (deploy/daemonset.yaml), or run as root`,
  );
}
