// npm's install hook for the TUN addon (binding.gyp -> build/Release/kubetun_tun.node).
// node-gyp needs Node's headers: when the distribution ships them in /usr/include/node we point
// node-gyp there so the build works offline; anywhere else node-gyp finds (or downloads) headers
// as usual. An explicit nodedir from the user wins. Under `npm install` node-gyp is on PATH (npm
// adds its bundled copy); run by hand we fall back to the node-gyp bundled with npm.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';

const env = { ...process.env };
if (!env.npm_config_nodedir && existsSync('/usr/include/node/node_api.h')) {
  env.npm_config_nodedir = '/usr';
}

function nodeGypCommand() {
  const onPath = spawnSync('node-gyp', ['--version'], { stdio: 'ignore', env });
  if (!onPath.error) return ['node-gyp', []];
  const prefix = dirname(dirname(process.execPath));
  for (const p of [
    join(prefix, 'lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js'),
    join(prefix, 'lib/node_modules/node-gyp/bin/node-gyp.js'),
  ]) {
    if (existsSync(p)) return [process.execPath, [p]];
  }
  return ['node-gyp', []];
}

const [cmd, pre] = nodeGypCommand();
const r = spawnSync(cmd, [...pre, 'rebuild'], { stdio: 'inherit', env });
if (r.error) {
  console.error(`kubetun: could not run node-gyp: ${r.error.message}`);
  process.exit(1);
}
process.exit(r.status ?? 1);
