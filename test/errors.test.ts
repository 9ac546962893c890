import { describe, expect, it } from 'vitest';
import {
  formatError,
  KubetunError,
  NoLabError,
  NotRootError,
  UsageError,
  UserError,
} from '../src/errors.ts';
import { LabError } from '../src/lab/sh.ts';
import { TopologyError } from '../src/lab/topology.ts';
import { ManifestError } from '../src/manifests/errors.ts';
import { CommandError } from '../src/node/sh.ts';
import { OptionError } from '../src/node/options.ts';
import { PcapError } from '../src/pcap/format.ts';

describe('the one error base class', () => {
  it('every area error is a KubetunError; user mistakes are UserErrors with exit status 2', () => {
    const user = [
      new ManifestError('MANIFEST_BAD_IP', { file: 'f', object: 'o', field: 'x' }, 'bad'),
      new TopologyError('t.yaml', 'node[0]', 'ip', 'bad'),
      new OptionError('node-ip', 'bad'),
      new PcapError('PCAP_BAD_MAGIC', 'bad'),
      new UsageError('bad'),
      new NotRootError('lab up'),
      new NoLabError(),
    ];
    for (const e of user) {
      expect(e).toBeInstanceOf(UserError);
      expect(e.exitStatus).toBe(2);
    }
    const env = [new LabError('ip failed'), new CommandError(['ip', 'x'], 'no', new Error('x'))];
    for (const e of env) {
      expect(e).toBeInstanceOf(KubetunError);
      expect(e).not.toBeInstanceOf(UserError);
      expect(e.exitStatus).toBe(1);
    }
  });

  it('names itself after its class and keeps its stable code', () => {
    expect(new NotRootError('lab up').name).toBe('NotRootError');
    expect(new NotRootError('lab up').code).toBe('NOT_ROOT');
    expect(new LabError('x').name).toBe('LabError');
  });

  it('prints one line and, if there is one, a hint line; never the stack', () => {
    expect(formatError(new UsageError('--node: "x y" is not a node name'), 'svc list')).toBe(
      'kubetun svc list: --node: "x y" is not a node name\n',
    );
    const text = formatError(new NotRootError('lab up'), 'lab up');
    expect(text.split('\n').filter(Boolean)).toEqual([
      'kubetun lab up: needs root (it builds network namespaces and writes /run)',
      '  hint: run it as root, e.g. sudo npx kubetun lab up',
    ]);
    expect(text).not.toMatch(/\bat .*\.ts:\d+/);
  });
});
