import { defineConfig } from 'vitest/config';

// The VM stage (scripts/test-vms.sh): real VMs under QEMU, minutes per step; run apart from the
// main suite (vitest.config.ts excludes test/vms).
export default defineConfig({
  test: {
    include: ['test/vms/**/*.test.ts'],
    fileParallelism: false,
    testTimeout: 600_000,
    hookTimeout: 7_200_000,
  },
});
