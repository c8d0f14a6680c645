// uitest.mjs: checks what the Temporal Web UI shows of one wdc task, in
// headless Chromium driven by playwright-core (run.sh starts everything).
//
//   node uitest.mjs --url http://127.0.0.1:8233 --namespace default \
//     --task-id checksum-1 [--expect worker-a --expect lease_expired] \
//     [--screenshots DIR] [--chromium /usr/bin/chromium]
//
// The workflow list, with wdc's columns added through Configure Columns,
// must show the task's row (wdc-task/<id>) with WdcTaskState; the task's
// User Metadata tab must show its summary ("task <id> · run …") and, under
// Current Details, the lease table (header "fence") with every --expect
// text. The list cannot show the summary: Temporal's list API carries no
// user metadata. Writes ui-list.png and ui-task.png (1280x800) to
// --screenshots, also on a failure; exits 1 naming what was missing.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';

const { values: opts } = parseArgs({
  options: {
    url: { type: 'string' },
    namespace: { type: 'string', default: 'default' },
    'task-id': { type: 'string' },
    expect: { type: 'string', multiple: true, default: [] },
    state: { type: 'string', default: 'COMPLETED' },
    screenshots: { type: 'string' },
    chromium: { type: 'string', default: process.env.CHROMIUM || '/usr/bin/chromium' },
    timeout: { type: 'string', default: '20000' },
  },
});
if (!opts.url || !opts['task-id']) {
  console.error('usage: node uitest.mjs --url UI_URL --task-id TASK [--namespace NS] [--expect TEXT]... [--screenshots DIR]');
  process.exit(2);
}
const ui = opts.url.replace(/\/+$/, '');
const ns = encodeURIComponent(opts.namespace);
const taskID = opts['task-id'];
const workflowID = `wdc-task/${taskID}`; // api.TaskWorkflowID
const summaryPrefix = `task ${taskID} · run `;
const timeout = Number(opts.timeout);
const missing = [];
const log = (s) => console.log(`uitest: ${s}`);

// check waits for a locator to be visible and records what was missing.
async function check(what, locator) {
  try {
    await locator.first().waitFor({ state: 'visible', timeout });
    log(`ok: ${what}`);
    return true;
  } catch {
    missing.push(what);
    log(`MISSING: ${what}`);
    return false;
  }
}

async function shot(page, name) {
  if (!opts.screenshots) return;
  fs.mkdirSync(opts.screenshots, { recursive: true });
  const file = path.join(opts.screenshots, name);
  await page.screenshot({ path: file });
  log(`screenshot ${file}`);
}

// The flags the machine's Chromium needs: no sandbox (root), and nothing
// that reaches out to Google's hosts on a closed network.
const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'wdc-uitest-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: opts.chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: 1280, height: 800 },
});
// The side navigation collapsed (the UI's persisted navOpen), so that the
// list's columns fit in the screenshot.
await context.addInitScript(() => localStorage.setItem('navOpen', 'false'));
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(timeout);

  // The list, with the columns docs/operations.md tells operators to add
  // (and without Run ID, Type, Start and End, so that they fit in the screenshot).
  await page.goto(`${ui}/namespaces/${ns}/workflows`, { waitUntil: 'networkidle' });
  const row = page.locator('tr', { has: page.getByRole('link', { name: workflowID, exact: true }) });
  if (await check(`list row ${workflowID}`, row)) {
    await page.getByTestId('workflows-summary-table-configuration-button').click();
    for (const col of ['Run ID', 'Type', 'Start', 'End']) {
      await page.getByTestId(`orderable-list-item-${col}-remove-button`).click();
    }
    for (const col of ['WdcTaskState', 'WdcWorkerID', 'WdcAttempt']) {
      await page.getByTestId(`orderable-list-item-${col}-add-button`).click();
    }
    await page.getByTestId('drawer-close-button').click();
    await page.getByRole('button', { name: 'Collapse saved views' }).click();
    await page.mouse.move(0, 0); // no tooltip in the screenshot
    await check(`list column WdcTaskState`, page.getByRole('columnheader', { name: 'WdcTaskState' }));
    await check(`list row's WdcTaskState ${opts.state}`, row.getByText(opts.state, { exact: true }));
  }
  await shot(page, 'ui-list.png');

  // The task's page: its User Metadata tab renders summary, details and
  // current details (each Markdown, in its own iframe).
  await page.goto(`${ui}/namespaces/${ns}/workflows/${encodeURIComponent(workflowID)}`, { waitUntil: 'networkidle' });
  await page.getByTestId('user-metadata-tab').click();
  const summary = page.frameLocator('#user-metadata-summary');
  await check(`summary "${summaryPrefix}…"`, summary.getByText(summaryPrefix));
  const current = page.frameLocator('#user-metadata-current-details');
  await check('current details: lease table header "fence"', current.locator('th', { hasText: /^fence$/ }));
  for (const text of opts.expect) {
    await check(`current details: lease table cell "${text}"`, current.locator('td', { hasText: text }));
  }
  await shot(page, 'ui-task.png');
} finally {
  await context.close();
  fs.rmSync(profile, { recursive: true, force: true });
}

if (missing.length > 0) {
  console.error(`uitest: FAIL: the Web UI at ${ui} did not show: ${missing.join('; ')}`);
  process.exit(1);
}
log(`passed: ${workflowID} in the list and on its page`);
