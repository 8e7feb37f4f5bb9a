"""Open an HTML file in headless Chromium (Debian's `chromium` + `chromium-driver`) with
the network off, and report what rendered, what the page logged and what it fetched.

Used by the report's browser test, and by hand to screenshot a real run's report:
    python tests/browser.py reports/<run>/report.html /tmp/report.png
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = "chromedriver"


def find_browser() -> tuple[str, str] | None:
    """(browser, driver) executables, or None when either is missing."""
    browser = next((shutil.which(name) for name in CHROMIUM if shutil.which(name)), None)
    driver = shutil.which(DRIVER)
    return (browser, driver) if browser and driver else None


@dataclass
class PageCheck:
    panels: dict[str, str]        # section id -> "plot", "note", "table", "summary", "empty"
    errors: list[str]             # browser console entries at SEVERE level
    fetched: list[str]            # URLs of every resource the page requested
    height: int


# Per panel: a rendered plotly figure has an SVG root inside its div, a panel without
# data a note, the top-trials panel a table.
_PANELS_JS = """
const out = {};
for (const s of document.querySelectorAll('section.panel')) {
  if (s.querySelector('.js-plotly-plot .main-svg')) out[s.id] = 'plot';
  else if (s.querySelector('p.note')) out[s.id] = 'note';
  else if (s.querySelector('table tr td')) out[s.id] = 'table';
  else if (s.querySelector('dl dd')) out[s.id] = 'summary';
  else out[s.id] = 'empty';
}
return out;
"""
_TWO_FRAMES_JS = """
const done = arguments[arguments.length - 1];
requestAnimationFrame(() => requestAnimationFrame(() => done(true)));
"""


def check_page(html: Path, screenshot: Path, width: int = 1280, settle_s: float = 300) -> PageCheck:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    found = find_browser()
    if found is None:
        raise RuntimeError("chromium and chromedriver are needed")
    browser, driver_path = found
    options = Options()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},1000", "--hide-scrollbars",
                # Network off: no name resolves and every proxied request fails.
                "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9",
                "--proxy-bypass-list=<-loopback>"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        driver.set_network_conditions(offline=True, latency=0, download_throughput=0,
                                      upload_throughput=0)
        driver.get(html.resolve().as_uri())
        # The page may still be parsing (a report is megabytes) and plotly draws
        # asynchronously: wait until the document is loaded and every panel settled.
        # The deadline only bounds a page that never settles (a real failure); a slow
        # machine just waits longer.
        deadline = time.monotonic() + settle_s
        panels = driver.execute_script(_PANELS_JS)
        while ((not panels or "empty" in panels.values()
                or driver.execute_script("return document.readyState") != "complete")
               and time.monotonic() < deadline):
            time.sleep(0.1)
            panels = driver.execute_script(_PANELS_JS)
        height = int(driver.execute_script("return document.documentElement.scrollHeight"))
        driver.set_window_size(width, min(height + 100, 16000))
        # Let the resized page lay out and paint (two animation frames) before the shot.
        driver.set_script_timeout(settle_s)
        driver.execute_async_script(_TWO_FRAMES_JS)
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(screenshot))
        errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        fetched = driver.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)")
        return PageCheck(panels=panels, errors=errors, fetched=fetched, height=height)
    finally:
        driver.quit()


if __name__ == "__main__":
    result = check_page(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"panels: {result.panels}\nerrors: {result.errors}\nfetched: {result.fetched}\n"
          f"height: {result.height}px; screenshot: {sys.argv[2]}", file=sys.stderr)
    sys.exit(1 if result.errors or "empty" in result.panels.values() else 0)
