// The web inspector in Debian's Chromium (headless), driven by playwright-core: one scenario
// per run (UI_SCENARIO), against the real server at UI_ROOT_URL whose data the Rust test made
// (UI_DATA, JSON). Run by tests/tests/blackbox/ui.rs, which checks the server's side too.
//
// Protocol on stdout, one JSON object per line: `{"ready": "<what>"}` asks the Rust test to act
// (it answers with a line on stdin); the last line is the scenario's result. Logs go to stderr.
// Every check that fails throws, and the process exits non-zero with the reason.
import { chromium } from 'playwright-core';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const root = process.env.UI_ROOT_URL;
const data = JSON.parse(process.env.UI_DATA ?? '{}');
const shots = process.env.UI_SCREENSHOTS;
const scenario = process.env.UI_SCENARIO;
const WAIT = Number(process.env.UI_WAIT_MS ?? 30_000);

const out = (v) => process.stdout.write(`${JSON.stringify(v)}\n`);
const log = (...a) => console.error(`[${scenario}]`, ...a);
const check = (ok, what) => {
  if (!ok) throw new Error(`check failed: ${what}`);
};
const eq = (got, want, what) => check(JSON.stringify(got) === JSON.stringify(want), `${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
/** Asks the Rust side to do `what` and waits until it has. */
async function ready(what) {
  out({ ready: what });
  const { done } = await lines.next();
  check(!done, `the test answers ${what}`);
}

/** Debian's Chromium, headless, without any of its own network traffic (no network here). */
async function launch() {
  return chromium.launch({
    executablePath: process.env.TCQ_CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-dev-shm-usage',
    ],
  });
}

const WIDE = { width: 1280, height: 900 };
const NARROW = { width: 390, height: 844 };

async function newPage(browser, viewport = WIDE) {
  const context = await browser.newContext({ viewport, acceptDownloads: true, baseURL: root });
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT);
  // A page error or a failed request of the app is a test failure, not a log line.
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => m.type() === 'error' && !/status of 40[134]/.test(m.text()) && problems.push(`console: ${m.text()}`));
  page.problems = problems;
  return page;
}

async function screenshot(page, name) {
  if (!shots) return;
  mkdirSync(shots, { recursive: true });
  // No focus ring or hover left over from the checks.
  await page.evaluate(() => document.activeElement?.blur());
  await page.mouse.move(0, 0);
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: false });
}

/** The page does not scroll sideways: nothing is wider than the viewport. */
async function noHorizontalScroll(page, what) {
  const { scroll, width } = await page.evaluate(() => ({
    scroll: document.documentElement.scrollWidth,
    width: document.documentElement.clientWidth,
  }));
  check(scroll <= width, `${what} at ${width} px scrolls sideways (content ${scroll} px wide)`);
  return scroll;
}

const text = (page, sel) => page.locator(sel).first().innerText();
const count = (page, sel) => page.locator(sel).count();

async function waitText(page, sel, want) {
  await page.waitForFunction(
    ([s, w]) => document.querySelector(s)?.textContent?.trim() === w,
    [sel, want],
    { timeout: WAIT },
  ).catch(async () => {
    throw new Error(`${sel} never read ${JSON.stringify(want)} (it reads ${JSON.stringify(await page.locator(sel).first().textContent().catch(() => null))})`);
  });
}

async function signIn(page, clientId, accessToken) {
  await page.getByRole('button', { name: 'Sign in' }).click();
  const dialog = page.getByRole('dialog', { name: 'Sign in' });
  await dialog.getByLabel('clientId').fill(clientId);
  await dialog.getByLabel('accessToken').fill(accessToken);
  await dialog.getByRole('button', { name: 'Sign in' }).click();
  await waitText(page, '[data-testid=client-id]', clientId);
}

/** Clicks a download link and returns the bytes the browser saved. */
async function download(page, locator) {
  const [d] = await Promise.all([page.waitForEvent('download'), locator.click()]);
  const path = await d.path();
  check(path, `the download of ${await locator.getAttribute('href')} finished (${await d.failure()})`);
  return readFileSync(path);
}

const scenarios = {
  /** Counts and rows of a group with tasks in every state, the filter, the search, then a
   * task completed while the page is open. */
  async group(browser) {
    const page = await newPage(browser);
    const t0 = Date.now();
    await page.goto(`/tasks/groups/${data.taskGroupId}`);
    await waitText(page, '[data-testid=total]', String(data.tasks.length));
    await page.waitForFunction((n) => document.querySelectorAll('table.tasks tbody tr').length === n, data.tasks.length);
    const firstRender = Date.now() - t0;
    for (const [state, n] of Object.entries(data.counts)) {
      eq(await text(page, `[data-testid=count-${state}]`), String(n), `count of ${state}`);
    }
    for (const t of data.tasks) {
      const row = page.locator(`tr[data-task-id="${t.taskId}"]`);
      eq(await row.getAttribute('data-state'), t.state, `state of ${t.name}`);
      eq((await row.locator('th a').innerText()).trim(), t.name, `name of ${t.taskId}`);
      eq((await row.locator('td').first().innerText()).trim(), t.state, `state label of ${t.name}`);
    }
    eq(await text(page, '[data-testid=resolved]'), `no: ${data.unresolved} unresolved`, 'resolved');
    // The state filter (a toggle button per state) and the name search.
    await page.locator('button[data-state=completed]').click();
    await page.waitForFunction(() => [...document.querySelectorAll('table.tasks tbody tr')].every((r) => r.dataset.state === 'completed'));
    eq(await count(page, 'table.tasks tbody tr'), data.counts.completed, 'rows when filtered to completed');
    await page.locator('button[data-state=completed]').click();
    await page.getByLabel('Search names').fill(data.running.name);
    await page.waitForFunction(() => document.querySelectorAll('table.tasks tbody tr').length === 1);
    await page.getByLabel('Search names').fill('');
    await page.waitForFunction((n) => document.querySelectorAll('table.tasks tbody tr').length === n, data.tasks.length);
    await screenshot(page, 'group');

    // Live: the running task completes while the page is open; its row follows, no reload.
    await page.evaluate(() => (window.__sameDocument = true));
    const row = `tr[data-task-id="${data.running.taskId}"]`;
    eq(await page.locator(row).getAttribute('data-state'), 'running', 'the row before');
    await ready('complete');
    const t1 = Date.now();
    await page.waitForSelector(`${row}[data-state=completed]`, { timeout: WAIT });
    const followed = Date.now() - t1;
    check(await page.evaluate(() => window.__sameDocument === true), 'the page was not reloaded');
    eq(await text(page, '[data-testid=count-completed]'), String(data.counts.completed + 1), 'completed count after');
    eq(await text(page, '[data-testid=count-running]'), String(data.counts.running - 1), 'running count after');

    await page.setViewportSize(NARROW);
    await noHorizontalScroll(page, 'the group page');
    await screenshot(page, 'group-narrow');
    check(page.problems.length === 0, page.problems.join('; '));
    return { rows: data.tasks.length, firstRenderMs: firstRender, followedMs: followed };
  },

  /** Runs, artifacts (a public one downloads), dependencies and dependents, anonymously; an
   * artifact added to a running run while the page is open. */
  async task(browser) {
    const page = await newPage(browser);
    await page.goto(`/tasks/${data.taskId}`);
    await page.waitForFunction((n) => document.querySelectorAll('table.runs tbody tr').length === n, data.runs.length);
    for (const r of data.runs) {
      const row = page.locator(`tr[data-run-id="${r.runId}"]`);
      eq(await row.getAttribute('data-state'), r.state, `state of run ${r.runId}`);
      eq((await row.locator('td[data-label="Reason resolved"]').innerText()).trim(), r.reasonResolved, `reason of run ${r.runId}`);
      eq((await row.locator('td[data-label="Worker"]').innerText()).trim(), r.worker, `worker of run ${r.runId}`);
    }
    for (const a of data.artifacts) {
      await page.waitForSelector(`#artifacts-${a.runId} ~ ul li[data-artifact="${a.name}"]`);
      const item = page.locator(`#artifacts-${a.runId} ~ ul li[data-artifact="${a.name}"]`);
      eq(await item.locator('a.download').count(), a.link ? 1 : 0, `a download link for ${a.name}`);
    }
    const bytes = await download(page, page.locator(`li[data-artifact="${data.public.name}"] a.download`));
    eq(bytes.toString('base64'), data.public.base64, `the bytes of ${data.public.name}`);
    await page.waitForSelector(`.deps a[href="/tasks/${data.dependency}"]`);
    await page.waitForSelector(`.dependents a[href="/tasks/${data.dependent}"]`);
    check((await text(page, 'pre.json')).includes(data.name), 'the definition shows');
    eq(await count(page, 'button[data-action]'), 0, 'actions when anonymous');
    await screenshot(page, 'task');
    await page.setViewportSize(NARROW);
    await noHorizontalScroll(page, 'the task page');
    await screenshot(page, 'task-narrow');

    // A running task: an artifact its worker adds shows without a reload.
    await page.setViewportSize(WIDE);
    await page.goto(`/tasks/${data.running.taskId}`);
    await page.waitForSelector('tr[data-run-id="0"][data-state=running]');
    await page.locator('#artifacts-0 ~ p').filter({ hasText: 'None.' }).waitFor();
    await page.evaluate(() => (window.__sameDocument = true));
    await ready('upload');
    const t1 = Date.now();
    await page.waitForSelector(`#artifacts-0 ~ ul li[data-artifact="${data.running.artifact}"] a.download`, { timeout: WAIT });
    const artifactShownMs = Date.now() - t1;
    check(await page.evaluate(() => window.__sameDocument === true), 'the page was not reloaded');

    // An unknown task: the API's 404, plainly.
    await page.goto(`/tasks/${data.unknown}`);
    await page.waitForSelector('[role=alert]');
    const alert = await text(page, '[role=alert]');
    check(alert.includes('404') && alert.includes('ResourceNotFound'), `the 404 shows: ${alert}`);
    check(page.problems.length === 0, page.problems.join('; '));
    return { runs: data.runs.length, downloaded: bytes.length, artifactShownMs };
  },

  /** Signing in shows the actions the client's scopes allow; cancel cancels. */
  async cancel(browser) {
    const page = await newPage(browser);
    await page.goto(`/tasks/${data.taskId}`);
    await page.waitForSelector('.task-state .state-pending');
    eq(await count(page, 'button[data-action]'), 0, 'actions when anonymous');
    // Signing in re-reads the task as the client: the page keeps showing it meanwhile.
    await page.evaluate(() => {
      window.__taskLost = false;
      new MutationObserver(() => {
        if (!document.querySelector('.task-state')) window.__taskLost = true;
      }).observe(document.body, { childList: true, subtree: true });
    });
    await signIn(page, data.clientId, data.accessToken);
    await page.waitForSelector('button[data-action=cancelTask]');
    check(await page.evaluate(() => window.__taskLost === false), 'the task stayed on the page while signing in');
    eq(await page.locator('button[data-action]').evaluateAll((b) => b.map((x) => x.dataset.action)), ['cancelTask'], 'the actions offered');
    // Another task of the group: the client's scopes name one task only.
    await page.goto(`/tasks/${data.otherTaskId}`);
    await page.waitForSelector('.task-state .state-pending');
    await page.getByText('Your scopes allow no action').waitFor();
    eq(await count(page, 'button[data-action]'), 0, 'actions on a task the scopes do not name');
    // Still signed in after a reload (session storage), then cancel with its confirmation.
    await page.goto(`/tasks/${data.taskId}`);
    await page.locator('button[data-action=cancelTask]').click();
    await page.getByRole('button', { name: 'Yes, cancel task' }).click();
    await page.getByRole('status').filter({ hasText: 'Task canceled.' }).waitFor();
    await page.waitForSelector('.task-state .state-exception');
    await page.waitForSelector('tr[data-run-id="0"][data-state=exception]');
    eq((await text(page, 'tr[data-run-id="0"] td[data-label="Reason resolved"]')).trim(), 'canceled', 'the run was canceled');
    // Signed in, a private artifact downloads through its bewit URL.
    await page.goto(`/tasks/${data.private.taskId}`);
    const bytes = await download(page, page.locator(`li[data-artifact="${data.private.name}"] a.download`));
    eq(bytes.toString('base64'), data.private.base64, `the bytes of ${data.private.name}`);
    // A read the client may not make: the 403 names the missing scopes.
    await page.goto(`/task-queues/${data.taskQueueId}`);
    await page.waitForSelector('[role=alert]');
    const alert = await text(page, '[role=alert]');
    check(alert.includes('403') && alert.includes('InsufficientScopes') && alert.includes('queue:pending-count:'), `the 403 shows its scopes: ${alert}`);
    check(page.problems.length === 0, page.problems.join('; '));
    return { canceled: true, privateBytes: bytes.length };
  },

  /** A 20-task graph: its nodes, its edges, a click through to a task. */
  async graph(browser) {
    const page = await newPage(browser);
    await page.goto(`/task-graphs/${data.taskGraphId}`);
    await page.waitForFunction((n) => document.querySelectorAll('svg.graph .node').length === n, data.nodes.length);
    const nodes = await page.locator('svg.graph .node').evaluateAll((ns) => ns.map((n) => n.dataset.taskId).sort());
    eq(nodes, data.nodes.map((n) => n.taskId).sort(), 'the nodes are the graph tasks');
    const edges = await page.locator('svg.graph path.edge').evaluateAll((es) => es.map((e) => `${e.dataset.from}>${e.dataset.to}`).sort());
    eq(edges, data.edges.slice().sort(), 'the edges are the requirements');
    for (const n of data.nodes.filter((n) => n.state)) {
      await page.waitForSelector(`svg.graph .node[data-task-id="${n.taskId}"][data-state="${n.state}"]`);
    }
    await screenshot(page, 'graph');
    const target = data.nodes[0];
    await page.locator(`svg.graph .node[data-task-id="${target.taskId}"]`).click();
    await page.waitForURL(`**/tasks/${target.taskId}`);
    await page.waitForFunction((l) => document.querySelector('h1')?.textContent?.includes(l), target.label);
    await page.goBack();
    await page.waitForFunction((n) => document.querySelectorAll('svg.graph .node').length === n, data.nodes.length);
    await page.setViewportSize(NARROW);
    await noHorizontalScroll(page, 'the graph page');
    check(page.problems.length === 0, page.problems.join('; '));
    return { nodes: nodes.length, edges: edges.length };
  },

  /** The task-queue page (signed in as root), the start page's search, both narrow too. */
  async pages(browser) {
    const page = await newPage(browser);
    await page.goto('/');
    await signIn(page, data.rootClientId, data.rootAccessToken);
    await page.goto(`/task-queues/${data.taskQueueId}`);
    await waitText(page, '[data-testid=pending-count]', String(data.pending));
    await waitText(page, '[data-testid=claimed-count]', String(data.claimed));
    await page.waitForSelector('[data-testid=oldest-pending]');
    // Priority aging: the run that waited past the threshold is counted, first in claim order
    // and marked (the others may pass the threshold meanwhile, and follow it, older first).
    await page.waitForFunction(() => Number(document.querySelector('[data-testid=aged-count]')?.textContent) >= 1, null, { timeout: WAIT });
    const first = page.locator('table[data-testid=pending] tbody tr').first();
    eq(await first.getAttribute('data-task-id'), data.agedTaskId, 'the first pending row');
    eq(await first.getAttribute('data-aged'), 'true', 'the aged row is marked');
    // The figures the metrics give: one worker, running the claimed run.
    await waitText(page, '[data-testid=workers-count]', `${data.workers} (0 idle, 0 quarantined)`);
    eq(await count(page, 'table[data-testid=pending] tbody tr'), data.pending, 'pending rows');
    eq(await count(page, 'table[data-testid=claimed] tbody tr'), data.claimed, 'claimed rows');
    const worker = page.locator(`tr[data-worker="${data.worker}"]`);
    await worker.waitFor();
    await worker.locator('summary').click();
    await worker.locator(`details a[href="/tasks/${data.claimedTaskId}/runs/0"]`).waitFor();
    await screenshot(page, 'task-queue');
    await page.setViewportSize(NARROW);
    await noHorizontalScroll(page, 'the task-queue page');
    // The upstream path of the same queue.
    const [p, wt] = data.taskQueueId.split('/');
    await page.goto(`/provisioners/${p}/worker-types/${wt}`);
    await waitText(page, '[data-testid=pending-count]', String(data.pending));

    // The start page finds a task group by its id, and lists it as recently viewed.
    await page.goto('/');
    await page.getByLabel('taskId, taskGroupId, taskGraphId or taskQueueId').fill(data.taskGroupId);
    await page.keyboard.press('Enter');
    await page.waitForURL(`**/tasks/groups/${data.taskGroupId}`);
    await page.waitForSelector('[data-testid=total]');
    await page.goto('/');
    await page.locator(`a[href="/tasks/groups/${data.taskGroupId}"]`).waitFor();
    await noHorizontalScroll(page, 'the start page');
    // A path nobody serves: the inspector's own "not found", with a 404.
    const missing = await page.goto('/nothing-here');
    eq(missing.status(), 404, 'the status of an unknown page');
    eq(await text(page, 'h1'), 'Not found', 'the unknown page');
    await page.goto('/');
    // Keyboard: the skip link comes first, and the search box takes focus by Tab.
    await page.keyboard.press('Tab');
    eq(await page.evaluate(() => document.activeElement?.textContent), 'Skip to content', 'the first tab stop');
    check(page.problems.length === 0, page.problems.join('; '));
    return { ok: true };
  },
};

const browser = await launch();
try {
  const run = scenarios[scenario];
  check(run, `a scenario named ${scenario}`);
  out(await run(browser));
} catch (e) {
  log(e.stack ?? e);
  process.exitCode = 1;
} finally {
  await browser.close();
  lines.return?.();
  process.stdin.destroy();
}
