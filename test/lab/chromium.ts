// Headless Chromium for the HTML tests (the compare report, `lab show`): a DOM dump after the
// page's scripts ran, and a PNG screenshot. Chromium comes from the bootstrap
// (scripts/bootstrap.sh --test), never from a test; without it the tests fail saying so.
import { spawnSync } from 'node:child_process';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export function requireChromium(): void {
  if (spawnSync('chromium', ['--version']).status !== 0)
    throw new Error('chromium is missing: run bash scripts/bootstrap.sh --test');
}

function chrome(dir: string, file: string, args: string[]) {
  return spawnSync(
    'chromium',
    [...FLAGS, `--user-data-dir=${join(dir, 'profile')}`, ...args, `file://${file}`],
    { encoding: 'utf8', timeout: 120_000 },
  );
}

/** The DOM after load (and up to 3 s of the page's timers). */
export function dumpDom(dir: string, file: string): string {
  return chrome(dir, file, ['--virtual-time-budget=3000', '--dump-dom']).stdout ?? '';
}

/** Screenshots the page into dir/name; returns the PNG's bytes (empty when none was written). */
export function screenshot(dir: string, file: string, name: string, size = '1400,1800'): Buffer {
  const png = join(dir, name);
  chrome(dir, file, [`--window-size=${size}`, `--screenshot=${png}`]);
  try {
    statSync(png);
  } catch {
    return Buffer.alloc(0);
  }
  return readFileSync(png);
}

/**
 * How much of the picture is not background: the PNG's IDAT stream compresses a blank or
 * single-colour page to almost nothing, so its size per pixel is a fair measure of content.
 */
export function pngStats(png: Buffer): {
  png: boolean;
  width: number;
  height: number;
  idat: number;
} {
  const isPng = png.subarray(1, 4).toString() === 'PNG';
  let idat = 0;
  for (let off = 8; isPng && off + 8 <= png.length; ) {
    const len = png.readUInt32BE(off);
    if (png.subarray(off + 4, off + 8).toString() === 'IDAT') idat += len;
    off += 12 + len;
  }
  return {
    png: isPng,
    width: isPng ? png.readUInt32BE(16) : 0,
    height: isPng ? png.readUInt32BE(20) : 0,
    idat,
  };
}
