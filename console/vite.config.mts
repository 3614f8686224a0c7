import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

/** The operator console: built into dist/console, served by the host at /runtime-cloud/console/ (functions/host/console.ts). */
export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/runtime-cloud/console/',
  oxc: { jsx: { runtime: 'automatic' } },
  build: {
    outDir: fileURLToPath(new URL('../dist/console', import.meta.url)),
    emptyOutDir: true,
    // The host's content security policy allows scripts and styles from the console's own files only.
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
  },
});
