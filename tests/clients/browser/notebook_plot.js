#!/usr/bin/env node
// Drives Classic Notebook 6 (running with --gateway-url pointing at Glovebox)
// in Debian's headless Chromium, the way a person would: on the dashboard,
// New > Python 3 (the list comes from Glovebox's kernelspecs); in the new
// notebook's tab, wait for the kernel to be idle, type a plotting cell into
// the real editor, run it with Shift+Enter, wait for the inline PNG, save.
// Prints one JSON line with what it saw; exits non-zero on any failure (the
// JSON then carries "error").
//
// usage: node notebook_plot.js TREE_URL SCREENSHOT_PATH
// Environment: CHROMIUM (default /usr/bin/chromium), TIMEOUT_MS (default 60000).

const { chromium } = require('playwright-core');

const [url, screenshot] = process.argv.slice(2);
if (!url || !screenshot) {
  console.error('usage: node notebook_plot.js NOTEBOOK_URL SCREENSHOT_PATH');
  process.exit(2);
}
const timeout = Number(process.env.TIMEOUT_MS || 60000);

// Lines typed into the first cell; CodeMirror auto-closes brackets, so each
// line is typed whole and the closing characters overtype the inserted ones.
const CODE = [
  '%matplotlib inline',
  'import matplotlib.pyplot as plt',
  "plt.plot([0, 1, 4, 9, 16], 'o-'); plt.title('glovebox'); plt.show()",
  "import socket; print('plotted in', socket.gethostname())",
];

async function main() {
  const result = { url: url.replace(/token=[^&]*/, 'token=…'), console: [] };
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
           '--disable-dev-shm-usage'],
  });
  try {
    const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
    context.setDefaultTimeout(timeout);
    context.on('page', (p) => {
      p.on('console', (m) => {
        // Classic Notebook always asks for the optional ipywidgets extension
        // (its hardcoded fallback in main.js); where ipywidgets is not
        // installed that request is a 404 of the notebook server's own, not
        // an error of Glovebox's, and newer Chromium reports it.
        const where = `${(m.location() && m.location().url) || ''} ${m.text()}`;
        if (/nbextensions\/widgets\/notebook\/js\/extension\.js/.test(where)) return;
        if (m.type() === 'error') result.console.push(`${m.type()}: ${m.text()}`);
      });
      p.on('pageerror', (e) => result.console.push(`pageerror: ${e.message}`));
    });
    const tree = await context.newPage();
    await tree.goto(url, { waitUntil: 'load' });
    await tree.click('#new-dropdown-button');
    const item = await tree.waitForSelector('#kernel-python3 a');
    const [page] = await Promise.all([context.waitForEvent('page'), item.click()]);
    await page.waitForURL(/\/notebooks\/.*\.ipynb/);
    result.notebook_path = decodeURIComponent(new URL(page.url()).pathname.replace(/^.*?\/notebooks\//, ''));
    // The notebook's JS app exists and its kernel reports idle.
    await page.waitForFunction(() => window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel);
    await page.waitForSelector('#kernel_indicator_icon.kernel_idle_icon');
    result.kernel_id = await page.evaluate(() => Jupyter.notebook.kernel.id);
    result.kernel_name = await page.evaluate(() => Jupyter.notebook.kernel.name);
    // The kernel logo is proxied from Glovebox's /kernelspecs/python3/logo-64x64.png.
    await page.waitForFunction(() => {
      const l = document.querySelector('img.current_kernel_logo');
      return l && /logo-64x64/.test(l.src) && l.complete;
    });
    result.logo_width = await page.evaluate(
      () => document.querySelector('img.current_kernel_logo').naturalWidth);

    // Type into the first cell's CodeMirror editor, then Shift+Enter.
    await page.click('.cell.code_cell .CodeMirror');
    for (let i = 0; i < CODE.length; i++) {
      await page.keyboard.type(CODE[i]);
      if (i < CODE.length - 1) await page.keyboard.press('Enter');
    }
    result.typed = await page.evaluate(() => Jupyter.notebook.get_cell(0).get_text());
    await page.keyboard.press('Shift+Enter');

    const img = await page.waitForSelector('.output_area img', { state: 'attached' });
    await page.waitForFunction((el) => el.complete && el.naturalWidth > 0, img);
    Object.assign(result, await img.evaluate((el) => ({
      naturalWidth: el.naturalWidth,
      naturalHeight: el.naturalHeight,
      src_prefix: el.src.slice(0, 22),
    })));
    await page.waitForFunction(() => Jupyter.notebook.get_cell(0).input_prompt_number > 0);
    result.prompt = await page.evaluate(() => Jupyter.notebook.get_cell(0).input_prompt_number);
    result.stdout = await page.evaluate(() => Array.from(
      document.querySelectorAll('.output_subarea.output_stdout')).map((e) => e.innerText).join(''));
    await page.screenshot({ path: screenshot, fullPage: true });

    // Kernel > Restart (without the confirmation dialog), then a second cell
    // in the fresh interpreter: the browser's new WebSocket goes through the
    // notebook server's proxy to the same Glovebox kernel.
    await page.evaluate(() => Jupyter.notebook.restart_kernel({ confirm: false }));
    await page.waitForSelector('#kernel_indicator_icon.kernel_idle_icon');
    result.kernel_id_after_restart = await page.evaluate(() => Jupyter.notebook.kernel.id);
    await page.locator('.cell.code_cell').nth(1).locator('.CodeMirror').click();
    await page.keyboard.type("print('after restart', 'plt' in globals())");
    await page.keyboard.press('Shift+Enter');
    await page.waitForFunction(() => Jupyter.notebook.get_cell(1).input_prompt_number > 0 &&
      Jupyter.notebook.get_cell(1).output_area.outputs.length > 0);
    result.after_restart = await page.evaluate(() => ({
      prompt: Jupyter.notebook.get_cell(1).input_prompt_number,
      outputs: Jupyter.notebook.get_cell(1).output_area.outputs,
    }));
    await page.evaluate(() => Jupyter.notebook.save_notebook());
    await page.waitForFunction(() => !Jupyter.notebook.dirty);
    result.ok = true;
  } catch (e) {
    result.error = String(e && e.stack || e);
    try {
      const pages = browser.contexts().flatMap((c) => c.pages());
      const last = pages[pages.length - 1];
      if (last) await last.screenshot({ path: screenshot, fullPage: true });
    } catch (_) { /* best effort */ }
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(result));
  process.exit(result.ok ? 0 : 1);
}

main().catch((e) => {
  console.log(JSON.stringify({ error: String(e && e.stack || e) }));
  process.exit(1);
});
