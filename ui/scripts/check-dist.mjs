// The committed bundle (ui/dist) must be what its source builds to, byte for byte, since the
// Rust binaries embed it: type-check, build into a temporary folder, compare. Run by
// scripts/test.sh; after changing the source, `npm --prefix ui run build` and commit ui/dist.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';

const ui = new URL('..', import.meta.url).pathname;
const bin = (name) => join(ui, 'node_modules', '.bin', name);
const run = (cmd, args) => execFileSync(cmd, args, { cwd: ui, stdio: ['ignore', 'inherit', 'inherit'] });

/** Every file under `dir`, as paths relative to it, sorted. */
const tree = (dir, sub = '') =>
  readdirSync(join(dir, sub))
    .flatMap((f) => (statSync(join(dir, sub, f)).isDirectory() ? tree(dir, join(sub, f)) : [join(sub, f)]))
    .sort();

run(bin('tsc'), ['--noEmit']);
const out = mkdtempSync(join(tmpdir(), 'tcq-ui-'));
try {
  run(bin('vite'), ['build', '--logLevel', 'warn', '--outDir', out, '--emptyOutDir']);
  const committed = join(ui, 'dist');
  const want = tree(out);
  const have = tree(committed);
  const differ = [
    ...want.filter((f) => !have.includes(f)).map((f) => `missing from ui/dist: ${f}`),
    ...have.filter((f) => !want.includes(f)).map((f) => `not built from the source: ui/dist/${f}`),
    ...want
      .filter((f) => have.includes(f))
      .filter((f) => !readFileSync(join(out, f)).equals(readFileSync(join(committed, f))))
      .map((f) => `differs: ui/dist/${f}`),
  ];
  if (differ.length) {
    console.error(`ui/dist is not what ui/ builds to:\n  ${differ.join('\n  ')}`);
    console.error('Rebuild it (npm --prefix ui run build) and commit ui/dist.');
    process.exit(1);
  }
  const sizes = want.map((f) => {
    const bytes = readFileSync(join(out, f));
    return { f, raw: bytes.length, gz: gzipSync(bytes, { level: 9 }).length };
  });
  const total = (filter) => sizes.filter(filter).reduce((a, s) => a + s.gz, 0);
  const first = sizes.filter((s) => !/Graph-/.test(s.f) && /\.(js|css|html)$/.test(s.f));
  console.log(
    `ui/dist matches its source (${sizes.length} files; gzipped: ${(total((s) => first.includes(s)) / 1024).toFixed(1)} KiB ` +
      `for a first page, ${(total((s) => /Graph-/.test(s.f)) / 1024).toFixed(1)} KiB more for the graph view)`,
  );
} finally {
  rmSync(out, { recursive: true, force: true });
}
