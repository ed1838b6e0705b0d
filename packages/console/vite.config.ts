import { defineConfig } from 'vite';

// The console is built into the controller package's dist/ui, which the controller serves at
// its console path (config `console.path`); relative asset URLs let that path be anything.
export default defineConfig({
  base: './',
  esbuild: { jsx: 'automatic', jsxImportSource: 'preact' },
  // Workspace packages are read from their sources (the `warren-source` export condition), as
  // tsc and jest read them, so the page never bundles a stale dist/.
  resolve: { conditions: ['warren-source', 'browser', 'module', 'import', 'default'] },
  build: {
    outDir: '../controller/dist/ui',
    emptyOutDir: true,
    // No inline scripts: the page's CSP (script-src 'self') forbids them.
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
    chunkSizeWarningLimit: 1024,
    rollupOptions: {
      // zod's sources carry comments Rollup cannot place; harmless, and not ours to fix.
      onwarn(warning, warn) {
        if (warning.code !== 'INVALID_ANNOTATION') warn(warning);
      },
    },
  },
});
