// npm's install hook for the TUN addon. node-gyp needs Node's headers: when the distribution
// ships them in /usr/include/node we point node-gyp there so the build works offline; anywhere
// else node-gyp finds (or downloads) headers as usual. An explicit nodedir from the user wins.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

if (!existsSync('binding.gyp')) process.exit(0); // until the addon lands

const env = { ...process.env };
if (!env.npm_config_nodedir && existsSync('/usr/include/node/node_api.h')) {
  env.npm_config_nodedir = '/usr';
}
const r = spawnSync('node-gyp', ['rebuild'], { stdio: 'inherit', env });
if (r.error) {
  console.error(`kubetun: could not run node-gyp: ${r.error.message}`);
  process.exit(1);
}
process.exit(r.status ?? 1);
