#!/usr/bin/env python3
"""Browser check of the page `ranzcr serve` answers at GET /.

Loads the page in headless Chromium (Selenium), uploads --image through the #file input, waits for
#status "done", reads the bars, checks both images loaded, toggles the Grad-CAM to a second label,
saves a screenshot and a JSON summary, then compares the page's numbers with POST /v1/predict.

Exit codes: 0 all checks hold, 1 a check failed (message on stdout), 77 cannot run here (no
selenium, chromium or chromedriver), so the calling test can skip.
"""
import argparse
import json
import math
import os
import sys
import time
import urllib.error
import urllib.request

from headless_chromium import fail, start_chromium


def predict_json(url, image, token):
    with open(image, "rb") as f:
        body = f.read()
    req = urllib.request.Request(url + "v1/predict", data=body, method="POST",
                                 headers={"Content-Type": "application/octet-stream"})
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as e:
        fail(f"POST {url}v1/predict answered HTTP {e.code}: {e.read()[:300]!r}")
    except (urllib.error.URLError, OSError) as e:
        fail(f"POST {url}v1/predict failed: {e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True, help="the server's root, e.g. http://127.0.0.1:8080/")
    ap.add_argument("--image", required=True)
    ap.add_argument("--screenshot", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--token", default=None)
    ap.add_argument("--timeout", type=float, default=60.0)
    args = ap.parse_args()
    url = args.url if args.url.endswith("/") else args.url + "/"
    image = os.path.abspath(args.image)
    if not os.path.isfile(image):
        fail(f"no image file {image}")

    driver = start_chromium(1280, 1000)
    from selenium.common.exceptions import TimeoutException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def console():
        try:
            return "\n".join(f"  console {e.get('level')}: {e.get('message')}" for e in driver.get_log("browser"))
        except Exception:  # noqa: BLE001 - diagnostics only
            return ""

    def page_fail(reason):
        log = console()
        try:
            driver.save_screenshot(args.screenshot)
        except Exception:  # noqa: BLE001
            pass
        driver.quit()
        fail(reason + ("\n" + log if log else ""))

    js_loaded = "const i = document.getElementById(arguments[0]); " \
                "return i && i.complete && i.naturalWidth > 0 ? i.naturalWidth : 0;"

    def wait_status(what):
        """Waits until #status is done or error; returns it."""
        try:
            WebDriverWait(driver, args.timeout, poll_frequency=0.1).until(
                lambda d: d.find_element(By.ID, "status").text.strip() in ("done", "error"))
        except TimeoutException:
            page_fail(f"{what}: #status did not become 'done' within {args.timeout:.0f} s "
                      f"(it reads {driver.find_element(By.ID, 'status').text!r})")
        return driver.find_element(By.ID, "status").text.strip()

    try:
        driver.set_page_load_timeout(30)
        driver.get(url)
        driver.find_element(By.ID, "file").send_keys(image)
        status = wait_status("upload")
        error = driver.find_element(By.ID, "error").text.strip()
        if status == "error" and args.token and "HTTP 401" in error:
            if not driver.find_element(By.ID, "auth").is_displayed():
                page_fail("a 401 answer did not show the token field (#auth)")
            driver.find_element(By.ID, "token").send_keys(args.token)
            # Clear the old "error" so that only the retry's own outcome counts.
            driver.execute_script("document.getElementById('status').textContent = 'retrying';")
            driver.find_element(By.ID, "retry").click()
            status = wait_status("retry with the token")
            error = driver.find_element(By.ID, "error").text.strip()
        if status != "done":
            page_fail(f"#status became {status!r}; #error: {error}")

        bars = []
        for el in driver.find_elements(By.CSS_SELECTOR, "#bars .bar"):
            dec = el.get_attribute("data-decision")
            try:
                prob = float(el.get_attribute("data-probability"))
            except (TypeError, ValueError):
                page_fail(f"bar {el.get_attribute('data-label')!r} has no numeric data-probability")
            bars.append({"label": el.get_attribute("data-label"), "probability": prob,
                         "decision": int(dec) if dec not in (None, "") else None})
        if not bars:
            page_fail("no .bar rows in #bars")

        input_width = driver.execute_script(js_loaded, "input-image")
        cam_width = driver.execute_script(js_loaded, "cam-image")
        if not input_width:
            page_fail("#input-image did not load")
        if not cam_width:
            page_fail("#cam-image did not load")

        # Toggle the CAM to a label whose toggle is not selected (the second row unless it is checked).
        old_src = driver.find_element(By.ID, "cam-image").get_attribute("src")
        toggles = driver.find_elements(By.CSS_SELECTOR, "#bars .bar .cam-toggle")
        if len(toggles) != len(bars):
            page_fail(f"{len(toggles)} .cam-toggle controls for {len(bars)} bars")
        pick = next((t for t in toggles[1:] if not t.is_selected()), None) or toggles[0]
        picked = pick.get_attribute("value")
        pick.click()
        try:
            WebDriverWait(driver, args.timeout, poll_frequency=0.1).until(
                lambda d: d.find_element(By.ID, "status").text.strip() == "error"
                or (d.find_element(By.ID, "cam-image").get_attribute("src") != old_src
                    and d.execute_script(js_loaded, "cam-image") > 0))
        except TimeoutException:
            page_fail("the CAM toggle did not load a new #cam-image; #error: "
                      + driver.find_element(By.ID, "error").text.strip())
        if driver.find_element(By.ID, "status").text.strip() != "done":
            page_fail("the CAM toggle left #status at " + driver.find_element(By.ID, "status").text
                      + "; #error: " + driver.find_element(By.ID, "error").text.strip())
        time.sleep(0.2)  # let the layout settle for the screenshot
        if not driver.save_screenshot(args.screenshot):
            page_fail("could not save the screenshot to " + args.screenshot)
    except WebDriverException as e:
        msg = (e.msg or "").strip().splitlines()
        page_fail(f"browser error: {type(e).__name__}: {msg[0] if msg else 'no message'}")
    driver.quit()

    summary = {"bars": bars, "input_width": input_width, "cam_width": cam_width, "cam_toggle_ok": True,
               "cam_toggle_label": picked}
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)

    # The page must show exactly what the JSON endpoint answers.
    ref = predict_json(url, image, args.token)
    probs = ref.get("probabilities") or {}
    decisions = ref.get("decisions")
    page_labels = [b["label"] for b in bars]
    if len(set(page_labels)) != len(page_labels):
        fail(f"the page repeats labels: {page_labels}")
    if set(page_labels) != set(probs):
        fail(f"label sets differ: page {sorted(page_labels)} vs /v1/predict {sorted(probs)}")
    for b in bars:
        want = float(probs[b["label"]])
        if not math.isclose(b["probability"], want, rel_tol=0.0, abs_tol=1e-12):
            fail(f"{b['label']}: page probability {b['probability']!r} vs /v1/predict {want!r}")
        want_dec = decisions.get(b["label"]) if decisions else None
        if b["decision"] != want_dec:
            fail(f"{b['label']}: page decision {b['decision']!r} vs /v1/predict {want_dec!r}")
    key = [(1 if b["decision"] == 1 else 0, b["probability"]) for b in bars]
    for i in range(1, len(key)):
        if key[i] > key[i - 1]:
            fail(f"page order is wrong at row {i} ({bars[i]['label']!r} after {bars[i - 1]['label']!r}): "
                 "expected decision 1 first, then probability descending")
    print(f"OK: {len(bars)} bars, input {input_width} px, cam {cam_width} px, "
          f"CAM toggle to {picked!r} loaded, order and numbers match /v1/predict")
    return 0


if __name__ == "__main__":
    sys.exit(main())
