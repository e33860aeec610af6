"""Headless Chromium through Selenium for the browser checks (serve_page_check.py, mlflow_ui_check.py).

skip() exits 77 (the calling test skips: cannot run here), fail() exits 1; both print one line first.
"""
import os
import shutil
import sys

SKIP = 77


def skip(reason):
    print("SKIP: " + reason)
    sys.exit(SKIP)


def fail(reason):
    print("FAIL: " + reason)
    sys.exit(1)


def find_binary(candidates, names):
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    return None


def start_chromium(width, height):
    """A headless Chromium WebDriver with a width x height window and the browser console kept; skips (77)
    without selenium, chromium or chromedriver, or when chromium does not start."""
    try:
        from selenium import webdriver
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.chrome.service import Service
    except ImportError as e:
        skip(f"selenium is not importable ({e})")
    chromium = find_binary(["/usr/bin/chromium"], ["chromium", "chromium-browser", "google-chrome"])
    driver_bin = find_binary(["/usr/bin/chromedriver"], ["chromedriver"])
    if not chromium:
        skip("no chromium found (/usr/bin/chromium)")
    if not driver_bin:
        skip("no chromedriver found (/usr/bin/chromedriver)")
    os.environ["SE_OFFLINE"] = "true"  # never let Selenium Manager try a download

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}",
              "--disable-gpu", "--no-first-run", "--disable-extensions"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        return webdriver.Chrome(service=Service(driver_bin), options=opts)
    except WebDriverException as e:
        skip("chromium could not start: " + str(e).strip().splitlines()[0])
