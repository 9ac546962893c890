// `lab status` speaks kubectl: the Services table has kubectl get svc's columns, aligned by
// the one table printer, NodePorts as port:nodePort/proto and external IPs or <pending>.
import { describe, expect, it } from 'vitest';
import { formatServices, labStatusOffline } from '../../src/lab/status.ts';

describe('lab status: Services as kubectl get svc prints them', () => {
  it('has NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S), every row aligned with its header', () => {
    const s = labStatusOffline();
    const lines = formatServices(s.services);
    expect(lines[0]).toMatch(/^NAME +TYPE +CLUSTER-IP +EXTERNAL-IP +PORT\(S\) +ENDPOINTS$/);
    const col = (h: string) => lines[0]!.indexOf(h);
    for (const l of lines.slice(1)) {
      expect(l.slice(col('TYPE') - 1, col('TYPE'))).toBe(' ');
      expect(l[col('TYPE')]).not.toBe(' ');
      expect(l[col('PORT(S)')]).not.toBe(' ');
    }
    const row = (name: string) => lines.find((l) => l.startsWith(`default/${name} `))!;
    expect(row('web')).toMatch(/ ClusterIP +10\.96\.0\.10 +<none> +80\/TCP /);
    expect(row('web-np')).toMatch(/ NodePort +10\.96\.0\.80 +<none> +80:30080\/TCP,53:30053\/UDP /);
    // every ingress IP, both families of a dual-stack LoadBalancer, as kubectl joins them
    expect(row('web-lb')).toMatch(/ LoadBalancer +10\.96\.0\.82 +172\.30\.0\.200,fd00:172:30::c8 /);
  });
});
