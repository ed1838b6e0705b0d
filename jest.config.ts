/** @jest-config-loader esbuild-register */
import type { Config } from 'jest';

// Native ESM jest: swc strips types, `.js` suffixes of relative imports are mapped back to the
// `.ts` sources, and workspace packages resolve to their `src/` through the `warren-source`
// export condition so tests never run stale `dist/` code.
const shared = {
  extensionsToTreatAsEsm: ['.ts'],
  transform: {
    '^.+\\.ts$': [
      '@swc/jest',
      {
        jsc: { parser: { syntax: 'typescript' }, target: 'es2022', transform: { useDefineForClassFields: true } },
        module: { type: 'es6' },
      },
    ],
  },
  // `e2b` and `@e2b/code-interpreter` have no `exports` map, so jest would take their CommonJS `main`; their ES module builds are `module`.
  moduleNameMapper: {
    '^(\\.{1,2}/.*)\\.js$': '$1',
    '^e2b$': '<rootDir>/node_modules/e2b/dist/index.mjs',
    '^@e2b/code-interpreter$': '<rootDir>/node_modules/@e2b/code-interpreter/dist/index.mjs',
  },
  testEnvironment: 'node',
  testEnvironmentOptions: { customExportConditions: ['warren-source', 'node', 'node-addons'] },
} satisfies Config;

const config: Config = {
  projects: [
    { ...shared, displayName: 'unit', testMatch: ['<rootDir>/packages/*/test/**/*.test.ts'] },
    {
      ...shared,
      displayName: 'integration',
      testMatch: ['<rootDir>/test/integration/**/*.test.ts'],
      setupFilesAfterEnv: ['<rootDir>/test/support/timeouts.ts'],
    },
    {
      ...shared,
      displayName: 'e2e',
      testMatch: ['<rootDir>/test/e2e/**/*.test.ts'],
      setupFilesAfterEnv: ['<rootDir>/test/support/timeouts.ts', '<rootDir>/test/support/e2e-retry.ts'],
      slowTestThreshold: 30,
    },
    // Attacks from inside real sandboxes on a real controller: see docs/security.md.
    {
      ...shared,
      displayName: 'redteam',
      testMatch: ['<rootDir>/test/redteam/**/*.test.ts'],
      setupFilesAfterEnv: ['<rootDir>/test/support/timeouts.ts'],
      slowTestThreshold: 30,
    },
    // The web console in Debian's Chromium (playwright-core) against a real controller on the real Docker engine.
    {
      ...shared,
      displayName: 'browser',
      testMatch: ['<rootDir>/test/browser/**/*.test.ts'],
      setupFilesAfterEnv: ['<rootDir>/test/support/timeouts.ts'],
      slowTestThreshold: 60,
    },
    // A real two-node Kubernetes cluster (scripts/lib/k8s-cluster.sh up): the Kubernetes provider.
    {
      ...shared,
      displayName: 'k8s',
      testMatch: ['<rootDir>/test/k8s/**/*.test.ts'],
      setupFilesAfterEnv: ['<rootDir>/test/support/timeouts.ts'],
      slowTestThreshold: 60,
    },
    // Restarts the Docker engine: scripts/test runs it alone, after the others.
    {
      ...shared,
      displayName: 'engine',
      testMatch: ['<rootDir>/test/engine/**/*.test.ts'],
      setupFilesAfterEnv: ['<rootDir>/test/support/timeouts.ts'],
      slowTestThreshold: 60,
    },
  ],
};

export default config;
