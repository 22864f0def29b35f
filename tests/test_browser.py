"""The course as a learner uses it: JupyterLab in a real browser (Debian's Chromium, driven by Playwright).

``make test-browser`` runs this file. It starts ``jupyter lab`` on localhost (as ``make lab`` does) over a folder
holding a copy of lesson 1 and exercise 0, then:

* runs every cell of the lesson from the Run menu: no error output, and its chart renders;
* types a correct answer into exercise 0's first task and runs its public check: the PASS line shows;
* types a wrong answer: the FAIL line and its teaching message show;
* opens TensorBoard on the lesson's ``runs/lesson01`` folder: the step-time scalars the lesson logged show.

Screenshots go to ``reports/browser-*.png``. Without Chromium or Playwright every test skips, saying how to get
them (``apt-get install chromium``; Playwright is in requirements.txt and downloads no browser).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest

from tests.submissions import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.browser]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# as a root process on a closed network: no sandbox, no GPU, no calls home
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = ROOT / "reports"
NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook"  # the notebook in the tab in front
RUN_LIMIT_S = 600  # lesson 1 runs in well under a minute on two cores
ANSWER = '''def capture_graph(fn, *args) -> torch.fx.GraphModule:
    """The FX graph Dynamo captures when ``fn`` is compiled and called on ``args``."""
    torch.compiler.reset()
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch.compile(fn, backend=keep, fullgraph=True)(*args)
    return graphs[-1]
'''
WRONG = '''def capture_graph(fn, *args) -> torch.fx.GraphModule:
    """Traces the first argument through, not fn: the graph computes the wrong thing."""
    return torch.fx.symbolic_trace(lambda x, w: x)
'''


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed: `make setup` installs it (requirements.txt)"
    if CHROMIUM is None:
        return "no Chromium on this machine: `sudo apt-get install chromium` (Debian/Ubuntu), then `make test-browser`"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, limit_s: float = 90) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"{url} did not answer within {limit_s:.0f} s")


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Iterator[dict]:
    """``jupyter lab`` over a folder with a copy of lesson 1 and exercise 0 (the repository's stay clean)."""
    reason = _missing()
    if reason:
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("lab")
    shutil.copy(ROOT / "notebooks" / "01_cross_entropy_ladder.ipynb", folder / "lesson.ipynb")
    shutil.copy(ROOT / "exercises" / "00_orientation.ipynb", folder / "exercise.ipynb")
    settings = folder / ".settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    # every cell in the page, so that the test can read each prompt and output (JupyterLab 4 renders lazily)
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    apputils = folder / ".settings" / "@jupyterlab" / "apputils-extension"
    apputils.mkdir(parents=True)
    (apputils / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}))  # no news toast
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "COURSEKIT_PROFILE": "smoke", "COURSEKIT_DEVICE": "cpu"}
    log = (folder / "lab.log").open("w")
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1"]
    cmd += [f"--ServerApp.token={token}", f"--ServerApp.root_dir={folder}"]
    cmd += [f"--LabApp.user_settings_dir={folder / '.settings'}", f"--LabApp.workspaces_dir={folder / '.workspaces'}"]
    cmd += ["--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    cmd += ["--allow-root"] if os.getuid() == 0 else []
    started = time.time()
    server = subprocess.Popen(cmd, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{url}/api/status?token={token}")
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield {"browser": browser, "url": url, "token": token, "folder": folder, "started": started}
            browser.close()
    finally:
        _stop(server)
        log.close()


def _server(cmd: list[str], log, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)


def _stop(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(20)
    except subprocess.TimeoutExpired:
        server.kill()


def _open(lab: dict, name: str):
    page = lab["browser"].new_page(viewport={"width": 1500, "height": 1100})
    page.set_default_timeout(60_000)
    page.goto(f"{lab['url']}/lab/tree/{name}?reset&token={lab['token']}")  # reset: no tabs from an earlier run
    page.locator(f"{NOTEBOOK} .jp-CodeCell").first.wait_for()
    page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").first.wait_for(timeout=120_000)
    # the kernel has started (the status bar's indicator says so to screen readers)
    page.get_by_text("Kernel status: Idle").first.wait_for(state="attached", timeout=120_000)
    return page


def _prompts(page) -> list[str]:
    return page.locator(f"{NOTEBOOK} .jp-CodeCell .jp-InputPrompt").all_inner_texts()


def _started(page) -> bool:
    return any(p.strip("[]: ") for p in _prompts(page))


def _run_all(page) -> None:
    """Run menu -> Run All Cells, then wait until no cell is queued or running.

    A just-opened notebook can show an idle kernel before its session settles: a click can go nowhere, or the
    server can replace the kernel it first started (seen on a fresh clone: cell 1 ran, the rest were dropped with
    the first kernel). So a run that has not started after 15 s, or that stopped with cells left unrun and no
    error shown, is asked again, up to three times in all."""
    for _ in range(3):
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        deadline = time.monotonic() + 15
        while not _started(page) and time.monotonic() < deadline:
            time.sleep(0.5)
        if not _started(page):
            continue
        _settle(page)
        if _errors(page).count() or all(p.strip("[]: ").isdigit() for p in _prompts(page)):
            return


def _errors(page):
    return page.locator(f"{NOTEBOOK} .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']")


def _settle(page, limit_s: float = RUN_LIMIT_S) -> None:
    deadline = time.monotonic() + limit_s
    time.sleep(1)
    while any("*" in p for p in _prompts(page)):
        assert time.monotonic() < deadline, f"cells still running after {limit_s:.0f} s"
        time.sleep(1)


def _cell(page, text: str):
    """The code cell whose source contains ``text``."""
    return page.locator(f"{NOTEBOOK} .jp-CodeCell").filter(has=page.locator(".cm-content", has_text=text)).first


def _type_into(page, cell, source: str) -> None:
    editor = cell.locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(source)


def test_a_lesson_runs_every_cell_without_errors_and_shows_its_chart(lab) -> None:
    page = _open(lab, "lesson.ipynb")
    _run_all(page)
    page.screenshot(path=str(SHOTS / "browser-lesson.png"), full_page=True)
    prompts = _prompts(page)
    assert prompts and all(p.strip("[]: ").isdigit() for p in prompts), f"cells not run: {prompts}"
    errors = _errors(page)
    assert errors.count() == 0, errors.first.inner_text()[:2000]
    images = page.locator(f"{NOTEBOOK} .jp-OutputArea-output img")
    assert images.count() >= 1, "the lesson's chart did not render"
    images.first.scroll_into_view_if_needed()
    assert images.first.evaluate("img => img.complete && img.naturalWidth > 100"), "the chart image is empty"
    page.screenshot(path=str(SHOTS / "browser-lesson-chart.png"))
    page.close()


def test_an_exercise_check_passes_on_a_typed_answer_and_fails_with_a_teaching_message(lab) -> None:
    page = _open(lab, "exercise.ipynb")
    answer = _cell(page, "def capture_graph(")
    check = _cell(page, 'run_check("ex00.capture.graph"')
    _type_into(page, answer, ANSWER)
    _run_all(page)  # stops at the first unfinished task, after this one's check
    output = check.locator(".jp-OutputArea").inner_text()
    check.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "browser-exercise-pass.png"))
    assert "[PASS] ex00.capture.graph" in output, output[:2000]

    _type_into(page, answer, WRONG)
    answer.click()
    page.keyboard.press("Shift+Enter")
    _settle(page)
    check.locator(".cm-content").click()
    page.keyboard.press("Shift+Enter")
    _settle(page)
    output = check.locator(".jp-OutputArea").inner_text()
    check.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "browser-exercise-fail.png"))
    assert "[FAIL] ex00.capture.graph" in output and "AssertionError" in output, output[:2000]
    page.close()


def test_tensorboard_shows_the_step_time_scalars_the_lesson_logged(lab, tmp_path) -> None:
    """After the lesson ran (the first test), its SummaryWriter cell has written ``ladder/step_ms`` for each rung."""
    logs = ROOT / "runs" / "lesson01"
    started = lab["started"]
    fresh = [p for p in logs.rglob("events.out.tfevents.*") if p.stat().st_mtime >= started]
    assert fresh, f"no TensorBoard events written under {logs} by this run: the lesson test runs first"
    port = _free_port()
    cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logs), "--host", "127.0.0.1", f"--port={port}"]
    with (tmp_path / "tensorboard.log").open("w") as log:
        server = _server(cmd, log)
        try:
            _wait_http(f"http://127.0.0.1:{port}/")
            page = lab["browser"].new_page(viewport={"width": 1500, "height": 1100})
            page.set_default_timeout(60_000)
            page.goto(f"http://127.0.0.1:{port}/#timeseries")
            page.get_by_text("ladder/step_ms").first.wait_for()
            page.get_by_text("ladder/loss_fwd_bwd_us").first.wait_for()
            time.sleep(2)  # let the charts draw before the screenshot
            page.screenshot(path=str(SHOTS / "browser-tensorboard.png"))
            page.close()
        finally:
            _stop(server)
