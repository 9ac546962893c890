import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Real VMs: their own stage (scripts/test-vms.sh, vitest.vms.config.ts). The solution bot
    // (vitest.bot.config.ts) has its own stage too (scripts/test.sh "== bot").
    exclude: ['test/vms/**', 'test/bot/**', '**/node_modules/**'],
    // Root tests build network namespaces with fixed names; running files in parallel would
    // make two of them fight over the same lab. Offline tests are fast enough serially.
    fileParallelism: false,
    testTimeout: 60_000,
    hookTimeout: 180_000,
  },
});
