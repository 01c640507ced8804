import { defineConfig } from 'vite';
import { fileURLToPath } from 'node:url';

const shim = (name: string) => fileURLToPath(new URL(`./src/shims/${name}.ts`, import.meta.url));

// The bundle is committed (ui/dist) and embedded in the Rust binaries, so a build must be
// byte-for-byte reproducible: content hashes in file names, no source maps, no build time.
export default defineConfig({
  base: '/',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  resolve: {
    // taskcluster-client-web signs with `hawk`, written for Node (webpack 4 used to polyfill
    // its built-ins): the few calls it makes get small browser versions.
    alias: {
      crypto: shim('crypto'),
      url: shim('url'),
      stream: shim('stream'),
    },
  },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    sourcemap: false,
    target: 'es2022',
    modulePreload: { polyfill: false },
    reportCompressedSize: true,
    chunkSizeWarningLimit: 200,
  },
});
