// The group page's timings on big groups, for tests/benches/ui_first_render.rs (which seeds
// the groups and prints the figures): per group, page loads in fresh contexts, each timed by
// the page itself from navigation start; then the page's last re-read and a filter's redraw.
// Also the bundle's gzipped size. Prints one JSON line.
import { chromium } from 'playwright-core';
import hawk from 'hawk';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';

const root = process.env.UI_ROOT_URL;
const { groups, loads, clientId, accessToken } = JSON.parse(process.env.UI_DATA);

/** cancelTask, signed with `hawk` as the clients sign. */
async function cancel(taskId) {
  const url = `${root}/api/queue/v1/task/${taskId}/cancel`;
  const { header } = hawk.client.header(url, 'POST', { credentials: { id: clientId, key: accessToken, algorithm: 'sha256' } });
  const r = await fetch(url, { method: 'POST', headers: { authorization: header } });
  if (!r.ok) throw new Error(`cancelTask ${taskId}: ${r.status} ${await r.text()}`);
}
const dist = new URL('../dist', import.meta.url).pathname;

const gz = (f) => gzipSync(readFileSync(f), { level: 9 }).length;
const assets = readdirSync(join(dist, 'assets'));
const first = ['index.html', ...assets.filter((a) => !a.startsWith('Graph-')).map((a) => `assets/${a}`)];
const bundle = {
  firstPageKiB: +(first.reduce((s, f) => s + gz(join(dist, f)), 0) / 1024).toFixed(1),
  graphViewKiB: +(assets.filter((a) => a.startsWith('Graph-')).reduce((s, a) => s + gz(join(dist, 'assets', a)), 0) / 1024).toFixed(1),
};

// Marks set by the page as it draws: first table row, and the group fully read.
const marker = () => {
  window.__marks = {};
  new MutationObserver(() => {
    const m = window.__marks;
    if (!m.firstRows && document.querySelector('table.tasks tbody tr')) m.firstRows = performance.now();
    const r = document.querySelector('[data-testid=resolved]');
    if (!m.complete && r && !r.textContent.includes('reading')) m.complete = performance.now();
  }).observe(document, { subtree: true, childList: true, characterData: true });
};

const stats = (xs) => {
  const s = xs.slice().sort((a, b) => a - b);
  return { median: Math.round(s[Math.floor(s.length / 2)]), max: Math.round(s[s.length - 1]) };
};

const browser = await chromium.launch({
  executablePath: process.env.TCQ_CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
});
const out = [];
try {
  for (const g of groups) {
    const firstRows = [];
    const complete = [];
    let page;
    for (let i = 0; i < loads; i++) {
      const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
      page = await context.newPage();
      page.setDefaultTimeout(120_000);
      await page.addInitScript(marker);
      await page.goto(`${root}/tasks/groups/${g.taskGroupId}`);
      await page.waitForFunction(() => window.__marks.complete);
      const m = await page.evaluate(() => window.__marks);
      firstRows.push(m.firstRows);
      complete.push(m.complete);
      const total = await page.locator('[data-testid=total]').innerText();
      if (total.replace(/,/g, '') !== String(g.tasks)) throw new Error(`the page counts ${total} tasks, not ${g.tasks}`);
      if (i < loads - 1) await context.close();
    }
    // On the last page: wait for a re-read to finish, and time a filter's redraw.
    await page.waitForFunction(() => document.querySelector('.updated')?.dataset.tookMs);
    const reread = Number(await page.locator('.updated').getAttribute('data-took-ms'));
    const filter = await page.evaluate(async () => {
      const t = performance.now();
      document.querySelector('button[data-state=completed]').click();
      await new Promise((resolve) => {
        const check = () => ([...document.querySelectorAll('table.tasks tbody tr')].every((r) => r.dataset.state === 'completed') ? resolve() : requestAnimationFrame(check));
        check();
      });
      return performance.now() - t;
    });
    // A change on a row on screen: cancel the first pending one, time until the row says so.
    await page.locator('button[data-state=completed]').click();
    const taskId = await page.locator('table.tasks tbody tr[data-state=pending]').first().getAttribute('data-task-id');
    const t = Date.now();
    await cancel(taskId);
    await page.waitForSelector(`tr[data-task-id="${taskId}"][data-state=exception]`, { timeout: 60_000 });
    const change = Date.now() - t;
    out.push({ tasks: g.tasks, firstRows: stats(firstRows), complete: stats(complete), reread: Math.round(reread), filter: Math.round(filter), change });
  }
} finally {
  await browser.close();
}
console.log(JSON.stringify({ bundle, groups: out }));
