import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

// Regression: `kubetun svc list | head -2` printed an EPIPE stack trace once head had exited.
// The output must outgrow the pipe buffer (64 KiB) for the write to meet the closed pipe, so
// render the rules of a few hundred services.
const dir = mkdtempSync(join(tmpdir(), 'kubetun-epipe-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function manyServices(n: number): string {
  const docs: string[] = [];
  for (let i = 0; i < n; i++) {
    const ip = `10.96.${(i >> 8) + 1}.${i & 255}`;
    docs.push(`apiVersion: v1
kind: Service
metadata: { name: s${i}, namespace: default }
spec: { clusterIP: ${ip}, ports: [{ name: http, port: 80, targetPort: 8080 }] }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: s${i}-1, namespace: default, labels: { kubernetes.io/service-name: s${i} } }
addressType: IPv4
ports: [{ name: http, port: 8080, protocol: TCP }]
endpoints: [{ addresses: [10.244.1.2] }, { addresses: [10.244.2.2] }]`);
  }
  return docs.join('\n---\n');
}

describe('cli: stdout closed early (| head)', () => {
  it('ends quietly with status 0', async () => {
    writeFileSync(join(dir, 'many.yaml'), manyServices(600));
    const child = spawn(
      'node',
      ['bin/kubetun.mjs', 'rules', '--manifests', dir, '--mode', 'iptables'],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let stderr = '';
    child.stderr.on('data', (d) => {
      stderr += d;
    });
    // Read the first chunk, then close our end as `head` does.
    await new Promise<void>((resolve) => child.stdout.once('data', () => resolve()));
    child.stdout.destroy();
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(stderr).not.toContain('EPIPE');
    expect(code).toBe(0);
  });
});
