import { defineConfig } from 'vitest/config';

// The solution bot (test/bot/exercises.test.ts, lab/exercises/README.md): every exercise solved
// and reset on one root lab, every shortcut refused — about 20 minutes on a loaded 2-core
// machine. Its own stage of the full run (scripts/test.sh "== bot"; vitest.config.ts excludes
// test/bot); alone: `npx vitest run --config vitest.bot.config.ts`.
export default defineConfig({
  test: {
    include: ['test/bot/**/*.test.ts'],
    fileParallelism: false,
    testTimeout: 60_000,
    hookTimeout: 300_000,
  },
});
