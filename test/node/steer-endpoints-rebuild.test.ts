// The endpoint tables' build (steer-endpoints.ts rebuild) never holds the event loop: at 10k
// Services a table is 90k entries, and the synchronous build held the agent's thread ~7 s at its
// start and at a takeover, while it was already forwarding (issue 18). The tc commands are not
// run: sh.ts is replaced by a recorder whose batches finish when the test says so.
import pino from 'pino';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import type { ResolvedServicePort } from '../../src/model.ts';
import { whileTurning } from '../fixtures/turns.ts';

const batches: (string | string[])[][] = [];
let release: (() => void)[] = [];
vi.mock('../../src/sh.ts', () => ({
  shHasOutput: () => Promise.resolve(false),
  shBatchAsync: (_tool: string[], lines: (string | string[])[]) => {
    batches.push(lines);
    return new Promise<string[]>((r) => release.push(() => r([])));
  },
}));

const { EndpointSteer, EndpointTable } = await import('../../src/node/steer-endpoints.ts');

const log = pino({ level: 'silent' });
const table = () =>
  new EndpointTable(
    ['dev', 'up0', 'ingress'],
    [7701, 7711],
    [['match', 'ip', 'dst', '10.0.0.1/32']],
    'kt0',
    log,
  );

/** Lets every batch asked so far finish, until the promise settles. */
async function drive<T>(p: Promise<T>): Promise<T> {
  let done = false;
  void p.then(() => {
    done = true;
  });
  while (!done) {
    const r = release;
    release = [];
    for (const f of r) f();
    await new Promise((r) => setImmediate(r));
  }
  return p;
}

function port(name: string, ips: string[]): ResolvedServicePort {
  return {
    servicePortName: `ns/${name}:http`,
    port: { name: 'http', protocol: 'TCP', port: 80 },
    endpoints: ips.map((ip) => ({ ip, port: 8080 })),
  } as unknown as ResolvedServicePort;
}

beforeEach(() => {
  batches.length = 0;
  release = [];
});

describe('EndpointTable.rebuild', () => {
  it('makes 30,000 entries with the event loop turning meanwhile, all in one batch', async () => {
    const keys = Array.from({ length: 30_000 }, (_, i) => `10.244.${i >> 8}.${i & 255}/6/8080`);
    const t = table();
    const { turns } = await whileTurning(() => drive(t.rebuild(keys)));
    // the lines were made a step at a time: the loop turned between steps, not once at the end
    expect(turns).toBeGreaterThanOrEqual(30_000 / 1024);
    const build = batches.find((b) => b.length > 1000);
    expect(build).toHaveLength(2 + 30_000); // the hash table, one guard, every key
    expect(build?.[2]).toBe(
      'filter add dev up0 ingress pref 7701 protocol ip handle 71:0:1 u32 ht 71:0: match ip src 10.244.0.0/32 match ip protocol 6 0xff match u8 0x05 0x0f at 0 match ip sport 8080 0xffff action mirred egress redirect dev kt0',
    );
    expect(t.size).toBe(30_000);
  });
});

describe('EndpointTable.change', () => {
  // the table keeps each entry's place as a number (bucket << 12 | item), not its handle's text
  it('deletes an entry by the handle it was added with (bucket and item in hex), and reuses its item', async () => {
    const t = table();
    await drive(t.rebuild(['10.244.1.171/6/8080', '10.244.2.171/6/8080']));
    expect(batches.find((b) => b.length === 4)?.[3]).toContain(
      'handle 71:ab:2 u32 ht 71:ab: match ip src 10.244.2.171/32',
    );
    await drive(t.change([], ['10.244.2.171/6/8080']));
    expect(batches.at(-1)).toEqual([
      'filter del dev up0 ingress pref 7701 protocol ip handle 71:ab:2 u32',
    ]);
    await drive(t.change(['10.244.3.171/6/8080'], []));
    expect(batches.at(-1)?.[0]).toContain(
      'handle 71:ab:2 u32 ht 71:ab: match ip src 10.244.3.171/32',
    );
    expect(t.size).toBe(2);
  });
});

describe('EndpointTable items', () => {
  it('gives a bucket its items from 1 up, past a word of 32, and a freed one again first', async () => {
    const keys = Array.from({ length: 40 }, (_, i) => `10.244.${i}.7/6/8080`); // all bucket 7
    const t = table();
    await drive(t.rebuild(keys));
    const build = batches.find((b) => b.length === 2 + 40) as string[];
    const items = build
      .slice(2)
      .map((l) => Number.parseInt(/handle 71:7:([0-9a-f]+) /.exec(l)![1], 16));
    expect(items).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
    await drive(t.change([], [keys[32]])); // item 33, in the second word
    await drive(t.change(['10.244.99.7/6/8080'], []));
    expect(batches.at(-1)?.[0]).toContain('handle 71:7:21 u32');
    await drive(t.change(['10.244.98.7/6/8080'], []));
    expect(batches.at(-1)?.[0]).toContain('handle 71:7:29 u32'); // 41
  });
});

describe('EndpointSteer.rebuild', () => {
  it('applies what a sync changed while the tables were being built', async () => {
    const steer = new EndpointSteer();
    const t = table();
    steer.tables.push(t);
    const tracker = { resolve: (spn: string) => ports.get(spn) };
    const ports = new Map([['ns/a:http', port('a', ['10.244.1.5'])]]);
    const sync = (spn: string) =>
      steer.sync({
        full: false,
        changes: { changedServicePorts: [spn], deletedServicePorts: [] },
        tracker,
      } as never);
    await sync('ns/a:http');
    const building = steer.rebuild();
    // a sync lands before the build's batch is done: b's endpoint comes, a's goes
    ports.set('ns/b:http', port('b', ['10.244.1.6']));
    ports.delete('ns/a:http');
    await sync('ns/b:http');
    await sync('ns/a:http');
    await drive(building);
    const after = batches
      .slice(1)
      .flat()
      .map((l) => (typeof l === 'string' ? l : l.join(' ')));
    expect(after.some((l) => l.includes('filter add') && l.includes('10.244.1.6/32'))).toBe(true);
    expect(after.some((l) => l.includes('filter del'))).toBe(true);
    expect(steer.keys().sort()).toEqual(['10.244.1.6/1/11', '10.244.1.6/1/3', '10.244.1.6/6/8080']);
    expect(t.size).toBe(3);
  });
});
