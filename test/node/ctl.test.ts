// The control socket (src/node/ctl.ts): newline-delimited JSON over a unix socket.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CtlServer, ctlAlive, ctlRequest } from '../../src/node/ctl.ts';

const dir = mkdtempSync(join(tmpdir(), 'kt-ctl-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const handler = (req: Record<string, unknown>) => {
  if (req.cmd === 'status') return { node: 'n1', pid: 42 };
  if (req.cmd === 'boom') throw new Error('handler failed');
  return { error: 'unknown' };
};

/** Send `text` on one connection and resolve with the first `n` response lines. */
function exchange(path: string, text: string, n: number): Promise<string[]> {
  return new Promise((resolve) => {
    const s = connect(path);
    let buf = '';
    s.on('connect', () => s.write(text));
    s.on('data', (d) => {
      buf += d.toString();
      if (buf.split('\n').length > n) {
        s.end();
        resolve(buf.trim().split('\n'));
      }
    });
  });
}

describe('control socket', () => {
  it('answers a request line with one JSON line, and errors as {error}', async () => {
    const path = join(dir, 'a', 'n1.sock'); // the directory is created
    const srv = await CtlServer.listen(path, handler);
    try {
      expect(await ctlRequest(path, { cmd: 'status' })).toEqual({ node: 'n1', pid: 42 });
      expect(await ctlRequest(path, { cmd: 'boom' })).toEqual({ error: 'handler failed' });
      expect(await ctlRequest(path, ['x'])).toEqual({
        error: 'request must be a JSON object like {"cmd":"status"}',
      });
    } finally {
      await srv.close();
    }
    expect(await ctlAlive(path)).toBe(false);
  });

  it('answers several requests on one connection in order', async () => {
    const path = join(dir, 'multi.sock');
    const srv = await CtlServer.listen(path, (req) => ({ echo: req.n }));
    const lines = await exchange(path, '{"n":1}\n{"n":2}\nnot json\n', 3);
    await srv.close();
    expect(JSON.parse(lines[0])).toEqual({ echo: 1 });
    expect(JSON.parse(lines[1])).toEqual({ echo: 2 });
    expect(JSON.parse(lines[2]).error).toMatch(/^request is not JSON/);
  });

  it('replaces a stale socket file but refuses to steal a live agent’s socket', async () => {
    const path = join(dir, 'stale.sock');
    writeFileSync(path, '');
    const srv = await CtlServer.listen(path, handler);
    await expect(CtlServer.listen(path, handler)).rejects.toThrow(/another agent is answering/);
    expect(await ctlRequest(path, { cmd: 'status' })).toEqual({ node: 'n1', pid: 42 });
    await srv.close();
  });

  it('ctlRequest rejects when nothing listens', async () => {
    await expect(ctlRequest(join(dir, 'none.sock'), { cmd: 'status' })).rejects.toThrow(/ENOENT/);
  });

  it('survives an answer JSON cannot encode: {error}, and the connection keeps answering', async () => {
    const path = join(dir, 'bigint.sock');
    const srv = await CtlServer.listen(path, (req) => (req.cmd === 'big' ? { n: 1n } : { ok: 1 }));
    const lines = await exchange(path, '{"cmd":"big"}\n{"cmd":"ok"}\n', 2);
    await srv.close();
    expect(JSON.parse(lines[0]).error).toMatch(/BigInt/);
    expect(JSON.parse(lines[1])).toEqual({ ok: 1 });
  });

  it('survives a client that disconnects before its (slow) answer, and serves the next one', async () => {
    const path = join(dir, 'gone.sock');
    let answered = 0;
    const srv = await CtlServer.listen(path, async (req) => {
      if (req.cmd === 'slow') await new Promise((r) => setTimeout(r, 100));
      answered++;
      return { big: 'x'.repeat(1 << 20) }; // more than the socket buffer: the write is pending
    });
    await new Promise<void>((resolve) => {
      const s = connect(path);
      s.on('connect', () => {
        s.write('{"cmd":"slow"}\n{"cmd":"slow"}\n');
        setTimeout(() => {
          s.destroy();
          resolve();
        }, 20);
      });
    });
    await new Promise((r) => setTimeout(r, 300));
    const r = (await ctlRequest(path, { cmd: 'fast' })) as { big: string };
    await srv.close();
    expect(r.big.length).toBe(1 << 20);
    expect(answered).toBe(3);
  });
});
