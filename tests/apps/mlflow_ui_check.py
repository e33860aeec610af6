#!/usr/bin/env python3
"""Browser check of the MLflow UI's metric charts for one run.

Opens <url>/#/experiments/<eid>/runs/<rid>/model-metrics (the run page's "Model metrics" tab in MLflow
3.x) in headless Chromium (Selenium) with a 1600x1200 viewport, scrolls through the chart sections
(MLflow mounts a chart card only once it comes into view) until every metric in --metrics has a card
whose title is the metric key (`h4[title=<key>]`; the visible text is the key, or its part after the
section prefix, e.g. "ETT - Abnormal" under section "val_auc") holding a rendered plotly chart
(`.js-plotly-plot` with `svg.main-svg` and a drawn trace), then scrolls to the first --metrics chart
(or the top), saves a screenshot and a JSON summary.

Exit codes: 0 all checks hold, 1 a check failed (message on stdout, plus a screenshot and the browser
console), 77 cannot run here (no selenium, chromium or chromedriver), so the calling test can skip.
"""
import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from headless_chromium import fail, start_chromium

CARD = '[data-testid="experiment-view-compare-runs-card"]'

# One snapshot of the chart grid: the cards mounted now, with their titles and whether their chart is
# drawn; the spinner placeholders in view (cards not mounted yet); and the scroll container's position.
JS_SNAPSHOT = r"""
const CARD = arguments[0];
const cards = Array.from(document.querySelectorAll(CARD));
function scroller() {
  let el = cards.length ? cards[0] : document.querySelector('[data-testid="draggable-chart-cards-grid"]');
  for (; el && el !== document.body; el = el.parentElement) {
    const oy = getComputedStyle(el).overflowY;
    if ((oy === 'auto' || oy === 'scroll') && el.scrollHeight > el.clientHeight + 2) return el;
  }
  return document.scrollingElement || document.documentElement;
}
const sc = scroller();
const vr = sc === document.scrollingElement || sc === document.documentElement
  ? {top: 0, bottom: window.innerHeight} : sc.getBoundingClientRect();
const vtop = Math.max(vr.top, 0), vbottom = Math.min(vr.bottom, window.innerHeight);
function inView(el) {
  const r = el.getBoundingClientRect();
  return r.height > 0 && r.bottom > vtop + 4 && r.top < vbottom - 4;
}
const out = cards.map(c => {
  const h = c.querySelector('h4[title]') || c.querySelector('h4');
  const plot = c.querySelector('.js-plotly-plot');
  const svg = plot ? plot.querySelector('svg.main-svg') : null;
  const traces = plot ? plot.querySelectorAll('g.trace').length : 0;
  const lines = plot ? Array.from(plot.querySelectorAll('path.js-line'))
    .filter(p => (p.getAttribute('d') || '').length > 3).length : 0;
  const points = plot ? plot.querySelectorAll('path.point').length : 0;
  const r = c.getBoundingClientRect();
  const hr = h ? h.getBoundingClientRect() : null;
  return {
    key: h ? (h.getAttribute('title') || h.textContent.trim()) : null,
    title: h ? h.textContent.trim() : null,
    title_visible: !!(hr && hr.width > 0 && hr.height > 0),
    plot: !!plot, svg: !!svg, svg_width: svg ? svg.getBoundingClientRect().width : 0,
    svg_height: svg ? svg.getBoundingClientRect().height : 0,
    traces: traces, lines: lines, points: points,
    in_view: inView(c), width: r.width, height: r.height,
    visible: r.height > 0 ? Math.max(0, Math.min(r.bottom, vbottom) - Math.max(r.top, vtop)) / r.height : 0,
    offset: Math.round(r.top - (sc === document.scrollingElement || sc === document.documentElement
      ? 0 : vr.top) + sc.scrollTop),
    legend: (c.innerText || '').split('\n').filter(s => s.includes('(')).slice(0, 4),
  };
});
const spinners = Array.from(document.querySelectorAll('[data-testid="draggable-chart-cards-grid"] .du-bois-light-spin'))
  .filter(inView).length;
return {cards: out, spinners_in_view: spinners,
        scroll_top: sc.scrollTop, client_height: sc.clientHeight, scroll_height: sc.scrollHeight,
        at_bottom: sc.scrollTop + sc.clientHeight >= sc.scrollHeight - 2};
"""

JS_SCROLL = r"""
const CARD = arguments[0], how = arguments[1];
let el = document.querySelector(CARD) || document.querySelector('[data-testid="draggable-chart-cards-grid"]');
let sc = null;
for (; el && el !== document.body; el = el.parentElement) {
  const oy = getComputedStyle(el).overflowY;
  if ((oy === 'auto' || oy === 'scroll') && el.scrollHeight > el.clientHeight + 2) { sc = el; break; }
}
sc = sc || document.scrollingElement || document.documentElement;
if (how === 'top') sc.scrollTop = 0;
else if (typeof how === 'number') sc.scrollTop = how;
else sc.scrollTop = sc.scrollTop + Math.max(100, Math.floor(sc.clientHeight * 0.6));
return sc.scrollTop;
"""

# Collapsed chart sections (their header holds the section's "Add chart" button) are opened.
SECTION_HEADER = '.du-bois-light-collapse-header'
JS_EXPAND = r"""
const hs = Array.from(document.querySelectorAll('main .du-bois-light-collapse-header[aria-expanded="false"]'))
  .filter(h => h.querySelector('[data-testid="experiment-view-compare-runs-add-chart"]'));
hs.forEach(h => h.click());
return hs.length;
"""

JS_ACTIVE_TAB = r"""
const t = document.querySelector('[role="tab"][aria-selected="true"]');
return t ? {text: t.textContent.trim(), id: t.id || ''} : null;
"""




def rest_run(root, run_id):
    """The run as the tracking server's REST API reports it, or (None, reason)."""
    q = urllib.parse.urlencode({"run_id": run_id})
    try:
        with urllib.request.urlopen(f"{root}/api/2.0/mlflow/runs/get?{q}", timeout=30) as resp:
            return json.loads(resp.read().decode("utf-8")).get("run"), None
    except urllib.error.HTTPError as e:
        return None, f"GET /api/2.0/mlflow/runs/get answered HTTP {e.code}: {e.read()[:300]!r}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        return None, f"GET /api/2.0/mlflow/runs/get failed: {e}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True, help="the tracking server's root, e.g. http://127.0.0.1:5000")
    ap.add_argument("--experiment-id", required=True)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--metrics", required=True, help="comma-separated metric keys that must have charts")
    ap.add_argument("--screenshot", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--timeout", type=float, default=90.0)
    ap.add_argument("--window-size", default="1600,1200", help="viewport WIDTH,HEIGHT in CSS pixels")
    ap.add_argument("--screenshot-at", choices=("first-metric", "top"), default="first-metric",
                    help="scroll the chart grid so that the first --metrics chart is at the top of the "
                         "screenshot (default), or to the top of the grid")
    args = ap.parse_args()
    root = args.url.rstrip("/")
    wanted = [m.strip() for m in args.metrics.split(",") if m.strip()]
    if not wanted:
        fail("--metrics names no metric key")
    try:
        vw, vh = (int(v) for v in args.window_size.split(","))
    except ValueError:
        fail(f"--window-size {args.window_size!r} is not WIDTH,HEIGHT")
    page_url = f"{root}/#/experiments/{args.experiment_id}/runs/{args.run_id}/model-metrics"
    started = time.monotonic()

    # What the server itself says about the run: used to tell "no such metric" apart from "not drawn".
    run, rest_error = rest_run(root, args.run_id)
    rest_keys = None
    if run is not None:
        rest_keys = sorted({m.get("key") for m in (run.get("data") or {}).get("metrics") or []})
        rest_eid = (run.get("info") or {}).get("experiment_id")
        if rest_eid is not None and str(rest_eid) != str(args.experiment_id):
            fail(f"run {args.run_id} belongs to experiment {rest_eid}, not {args.experiment_id}")

    driver = start_chromium(vw, vh)
    from selenium.common.exceptions import TimeoutException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def console():
        try:
            entries = driver.get_log("browser")
        except Exception:  # noqa: BLE001 - diagnostics only
            return ""
        lines = [f"  console {e.get('level')}: {e.get('message')}" for e in entries]
        if len(lines) > 60:
            lines = [f"  ({len(lines) - 60} earlier console lines left out)"] + lines[-60:]
        return "\n".join(lines)

    def page_fail(reason):
        log = console()
        try:
            driver.save_screenshot(args.screenshot)
            reason += f"\n  screenshot: {args.screenshot}"
        except Exception:  # noqa: BLE001
            pass
        try:
            reason += f"\n  url: {driver.current_url}"
        except Exception:  # noqa: BLE001
            pass
        driver.quit()
        fail(reason + ("\n" + log if log else "\n  (browser console is empty)"))

    def body_text(limit=600):
        try:
            return " ".join(driver.find_element(By.TAG_NAME, "body").text.split())[:limit]
        except WebDriverException:
            return ""

    found = {}          # metric key -> what its card showed once its chart was drawn
    seen_titles = set()  # every card title met while scrolling
    try:
        driver.set_page_load_timeout(30)
        # Make the viewport (not the outer window) vw x vh, so the screenshot has that size.
        inner = driver.execute_script("return [window.innerWidth, window.innerHeight];")
        outer = driver.get_window_size()
        driver.set_window_size(outer["width"] + vw - inner[0], outer["height"] + vh - inner[1])
        driver.get(page_url)

        # 1. The run page has loaded the "Model metrics" tab: chart cards (or collapsed sections) exist.
        def loaded(d):
            if d.find_elements(By.CSS_SELECTOR, CARD):
                return "charts"
            text = body_text(4000).lower()
            if d.find_elements(By.CSS_SELECTOR, '[data-testid="experiment-view-compare-runs-add-chart"]') and \
                    ("no charts in this section" in text or d.find_elements(
                        By.CSS_SELECTOR, 'main ' + SECTION_HEADER + '[aria-expanded="false"]')):
                return "charts"  # sections, but none open or none with a chart: the sweep will tell
            for needle in ("does not exist", "not found", "no metrics"):
                if needle in text and not d.find_elements(By.CSS_SELECTOR, '.du-bois-light-spin'):
                    return "message"
            return False
        try:
            state = WebDriverWait(driver, args.timeout, poll_frequency=0.2).until(loaded)
        except TimeoutException:
            page_fail(f"no metric chart card ({CARD}) appeared within {args.timeout:.0f} s on {page_url}; "
                      f"the page reads: {body_text()!r}")
        if state == "message":
            page_fail(f"the run page shows no metric charts; it reads: {body_text()!r}"
                      + (f"\n  ({rest_error})" if rest_error else ""))
        tab = driver.execute_script(JS_ACTIVE_TAB)
        if not tab or not (tab["text"] == "Model metrics" or tab["id"].endswith("-model-metrics")):
            # Older/newer UIs may land elsewhere: click the "Model metrics" tab if there is one.
            tabs = [t for t in driver.find_elements(By.CSS_SELECTOR, '[role="tab"]')
                    if t.text.strip() == "Model metrics" or (t.get_attribute("id") or "").endswith("-model-metrics")]
            if not tabs:
                page_fail(f"the run page shows tab {tab!r}, and has no 'Model metrics' tab; "
                          f"the page reads: {body_text()!r}")
            tabs[0].click()
        run_name = ""
        for el in driver.find_elements(By.CSS_SELECTOR, '[data-testid="runs-header"]'):
            run_name = el.text.strip()

        # The MLflow Assistant side panel (3.x) takes a third of the width: close it, if it is open.
        assistant_closed = False
        for b in driver.find_elements(By.CSS_SELECTOR,
                                      'button[data-component-id="mlflow.assistant.chat_panel.close"]'):
            try:
                if b.is_displayed():
                    b.click()
                    assistant_closed = True
            except WebDriverException:
                pass

        # 2. Scroll through the grid until every wanted metric's chart has been seen drawn. A full
        #    top-to-bottom pass counts as a sweep; a metric the REST API does not know fails after
        #    two sweeps that met the same set of cards, any other metric only at --timeout.
        st = {"step_start": time.monotonic(), "sweeps": [], "this_sweep": set(), "steps": 0, "expanded": 0}
        known_missing = [k for k in wanted if rest_keys is not None and k not in rest_keys]

        def sweep_step(d):
            if st["expanded"] < 50:  # bounded, in case a section will not stay open
                n = d.execute_script(JS_EXPAND)
                if n:
                    st["expanded"] += n
                    st["step_start"] = time.monotonic()
                    return False
            snap = d.execute_script(JS_SNAPSHOT, CARD)
            pending_in_view = snap["spinners_in_view"] > 0
            for c in snap["cards"]:
                if not c["key"]:
                    continue
                seen_titles.add(c["key"])
                st["this_sweep"].add(c["key"])
                if c["key"] in wanted and c["key"] not in found:
                    drawn = c["svg"] and c["svg_width"] > 50 and c["svg_height"] > 50 and \
                        c["traces"] > 0 and (c["lines"] > 0 or c["points"] > 0)
                    if drawn:
                        found[c["key"]] = c
                    elif c["in_view"]:
                        pending_in_view = True
            if all(k in found for k in wanted):
                return True
            # Let what is in view mount and draw before moving on (at most 10 s a step).
            if pending_in_view and time.monotonic() - st["step_start"] < 10:
                return False
            if snap["at_bottom"]:
                st["sweeps"].append(frozenset(st["this_sweep"]))
                st["this_sweep"] = set()
                missing = [k for k in wanted if k not in found]
                if len(st["sweeps"]) >= 2 and st["sweeps"][-1] == st["sweeps"][-2] and \
                        all(k in known_missing for k in missing):
                    return "missing"
                d.execute_script(JS_SCROLL, CARD, "top")
            else:
                d.execute_script(JS_SCROLL, CARD, "down")
            st["steps"] += 1
            st["step_start"] = time.monotonic()
            return False

        def missing_report():
            missing = [k for k in wanted if k not in found]
            msg = f"no drawn chart for metric(s) {missing}"
            for k in missing:
                if rest_keys is not None and k not in rest_keys:
                    msg += f"\n  {k!r}: the run has no such metric (REST lists {rest_keys})"
                elif k in seen_titles:
                    msg += f"\n  {k!r}: its card was there, but its chart (.js-plotly-plot svg.main-svg " \
                           f"with a trace) was never drawn"
                else:
                    msg += f"\n  {k!r}: no card with that title (h4[title]) appeared"
            msg += f"\n  cards seen: {sorted(seen_titles)}"
            if rest_error:
                msg += f"\n  ({rest_error})"
            return msg

        remaining = max(5.0, args.timeout - (time.monotonic() - started))
        try:
            result = WebDriverWait(driver, remaining, poll_frequency=0.25).until(sweep_step)
        except TimeoutException:
            page_fail(f"within {args.timeout:.0f} s: " + missing_report())
        if result == "missing":
            page_fail(missing_report())

        # The visible title must be the key, or the key's part after its section prefix.
        for k, c in found.items():
            if not c["title_visible"] or not c["title"] or not k.endswith(c["title"]):
                page_fail(f"the chart of {k!r} shows the title {c['title']!r} (visible: {c['title_visible']})")

        # 3. Scroll to the first wanted chart (its row, with its section's header when it opens the
        #    section) or to the top; wait until what is in view is drawn, then take the screenshot.
        #    Cards out of view are unmounted again, so this goes by the offset recorded when it was seen.
        if args.screenshot_at == "first-metric":
            driver.execute_script(JS_SCROLL, CARD, max(0, found[wanted[0]]["offset"] - 60))
        else:
            driver.execute_script(JS_SCROLL, CARD, "top")

        def top_drawn(d):
            snap = d.execute_script(JS_SNAPSHOT, CARD)
            in_view = [c for c in snap["cards"] if c["in_view"]]
            return snap["spinners_in_view"] == 0 and in_view and all(c["svg"] and c["traces"] for c in in_view) \
                and snap
        try:
            snap = WebDriverWait(driver, 30, poll_frequency=0.2).until(top_drawn)
        except TimeoutException:
            page_fail(f"after scrolling to the screenshot's place ({args.screenshot_at}), the charts in view "
                      "were not drawn within 30 s")
        time.sleep(0.5)  # let plotly's transitions and the layout settle for the screenshot
        snap = driver.execute_script(JS_SNAPSHOT, CARD)
        if not driver.save_screenshot(args.screenshot):
            page_fail("could not save the screenshot to " + args.screenshot)
        final_url = driver.current_url
        title = driver.title
        plots = len(driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot"))
        svgs = len(driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot svg.main-svg"))
    except WebDriverException as e:
        msg = (e.msg or "").strip().splitlines()
        page_fail(f"browser error: {type(e).__name__}: {msg[0] if msg else 'no message'}")
    driver.quit()
    elapsed = time.monotonic() - started

    summary = {
        "url": page_url,
        "final_url": final_url,
        "page_title": title,
        "run_name": run_name,
        "rest_run_name": ((run or {}).get("info") or {}).get("run_name"),
        "metrics_wanted": wanted,
        "metrics_found": {k: {"title": c["title"], "traces": c["traces"], "lines": c["lines"],
                              "points": c["points"], "legend": c["legend"],
                              "svg_size": [round(c["svg_width"]), round(c["svg_height"])]}
                          for k, c in found.items()},
        "chart_cards_seen": sorted(seen_titles),
        "chart_cards_count": len(seen_titles),
        "plotly_plots_mounted": plots,
        "plotly_main_svgs_mounted": svgs,
        "charts_in_screenshot": [c["key"] for c in snap["cards"] if c["visible"] >= 0.5 and c["svg"]],
        "assistant_panel_closed": assistant_closed,
        "sections_expanded": st["expanded"],
        "scroll_steps": st["steps"],
        "viewport": [vw, vh],
        "screenshot": os.path.abspath(args.screenshot),
        "seconds": round(elapsed, 1),
    }
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    print(f"OK: {len(found)} metric charts drawn ({', '.join(wanted)}) on {final_url}, run {run_name!r}, "
          f"{len(seen_titles)} chart cards, {len(summary['charts_in_screenshot'])} in the screenshot, "
          f"{elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
