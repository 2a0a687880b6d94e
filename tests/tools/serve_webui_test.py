#!/usr/bin/env python3
"""`bitsplit serve`'s chat page (GET /) in a real browser: headless Chromium driven by selenium.

Checks: the page loads under its Content-Security-Policy with no console errors; a message sent
from the page streams a reply equal to the non-streamed /v1/chat/completions reply for the same
request (greedy); switching the picker to a variant mid-conversation gives that variant's reply
(and not the base's) and each reply names its model; the speculation panel shows; Stop during a
long reply ends it and the server frees the slot (/metrics); with --api-key the page asks for the
key, a wrong key gives a clean error and asks again, the right one works and is kept for the tab
(never in the URL or the console).

A screenshot of the page with a reply and its speculation panel is written to the path in
BITSPLIT_WEBUI_SCREENSHOT (docs/webui.png is made that way), else to a temporary file.

Exits 77 (skipped) when selenium (Debian: python3-selenium), chromium or chromedriver is missing,
or the fixture models are. Usage: serve_webui_test.py BITSPLIT_BINARY SOURCE_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from serve_testing import ServeProcess

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:
    print("skipped: selenium is not installed (Debian: apt-get install python3-selenium chromium chromium-driver)")
    sys.exit(77)

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
CHROMEDRIVER = shutil.which("chromedriver")
if not CHROMIUM or not CHROMEDRIVER:
    print("skipped: chromium and chromedriver are needed (Debian: apt-get install chromium chromium-driver)")
    sys.exit(77)

BIN, SRC = sys.argv[1], sys.argv[2]
MODELS = os.path.join(SRC, "tests", "models")
BASE = os.path.join(MODELS, "bible-base.gguf")
if not os.path.exists(BASE) or not os.path.exists(os.path.join(MODELS, "bible-devil.gguf")):
    print("skipped: tests/models/bible-base.gguf or bible-devil.gguf is missing")
    sys.exit(77)

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
BASE_ID = "base.bitsplit.gguf"
TOP_P = 0.95  # the page's default, sent with every request
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond


def cli(*args):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=300)


class Server(ServeProcess):
    def __init__(self, *args):
        super().__init__(BIN, *args)

    def chat(self, model, messages, max_tokens, key=None):
        """The non-streamed, greedy reply with the page's parameters."""
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = "Bearer " + key
        status, text, _ = self.http("POST", "/v1/chat/completions",
                                    {"model": model, "messages": messages, "temperature": 0, "top_p": TOP_P,
                                     "max_tokens": max_tokens}, headers)
        assert status == 200, (status, text)
        return json.loads(text)["choices"][0]["message"]["content"]

    def running(self, key=None):
        _, metrics, _ = self.http("GET", "/metrics", headers={"Authorization": "Bearer " + key} if key else {})
        m = re.search(r'^vllm:num_requests_running\{[^}]*\} (\d+)', metrics, re.M)
        return int(m.group(1)) if m else None

    def stop(self):
        if not super().stop():
            failures.append("the server did not stop on SIGTERM")


def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--window-size=1280,900", "--disable-gpu",
              "--disable-dev-shm-usage", "--force-color-profile=srgb", "--hide-scrollbars"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


class Page:
    def __init__(self, driver, url):
        self.d = driver
        self.d.get(url + "/")

    def find(self, css):
        return self.d.find_element(By.CSS_SELECTOR, css)

    def wait(self, cond, what, timeout=60):
        try:
            return WebDriverWait(self.d, timeout, poll_frequency=0.05).until(lambda d: cond())
        except Exception:
            check(False, f"timed out waiting for {what}")
            return None

    def models_loaded(self):
        return self.wait(lambda: self.find("#model").get_attribute("data-loaded") == "1", "the model list")

    def set(self, id_, value):
        # Number inputs: set the value as a user would leave it (select all, type).
        self.d.execute_script("const e = document.getElementById(arguments[0]); e.value = arguments[1];"
                              "e.dispatchEvent(new Event('input', {bubbles: true}));", id_, str(value))

    def replies(self):
        return self.d.find_elements(By.CSS_SELECTOR, '[data-role="reply"]')

    def conversation(self):
        return self.d.execute_script("return window.bitsplitChat.conversation()")

    def send(self, text):
        n = len(self.replies())
        if "\n" in text:  # typed Enter would send: put multi-line text in as a paste would
            self.set("input", text)
        else:
            box = self.find("#input")
            box.clear()
            box.send_keys(text)
        self.find("#send").click()
        self.wait(lambda: len(self.replies()) == n + 1, "the reply to appear")
        return self.replies()[-1]

    def finished(self, reply, timeout=60):
        self.wait(lambda: reply.get_attribute("data-done") == "1", "the reply to finish", timeout)
        return self.conversation()[-1]

    def console_errors(self):
        return [e for e in self.d.get_log("browser") if e.get("level") == "SEVERE"]


def messages_of(conversation):
    return [{"role": m["role"], "content": m["content"]} for m in conversation]


with tempfile.TemporaryDirectory() as TMP:
    conv = os.path.join(TMP, BASE_ID)
    assert cli("convert", BASE, conv, "-t", "2").returncode == 0
    delta = os.path.join(TMP, "devil.delta.gguf")
    r = cli("delta", "--base", BASE, "--finetuned", os.path.join(MODELS, "bible-devil.gguf"), "-o", delta)
    assert r.returncode == 0, r.stderr
    template = os.path.join(TMP, "chatml.jinja")
    with open(template, "w") as f:
        f.write(CHATML)
    screenshot = os.environ.get("BITSPLIT_WEBUI_SCREENSHOT") or os.path.join(TMP, "webui.png")

    driver = browser()
    try:
        server = Server("-m", conv, "--chat-template", template, "--delta", f"devil={delta}")
        try:
            status, html, headers = server.http("GET", "/")
            check(status == 200 and headers.get("Content-Type", "").startswith("text/html"), f"GET /: {status} {headers}")
            csp = headers.get("Content-Security-Policy", "")
            check("default-src 'self'" in csp, f"GET / has a Content-Security-Policy: {csp!r}")
            check(not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', html), "the page loads nothing from elsewhere")

            page = Page(driver, server.url)
            page.models_loaded()
            options = [o.get_attribute("value") for o in Select(page.find("#model")).options]
            check(options == [BASE_ID, "devil"], f"the picker lists the base and its variant: {options}")
            page.set("temperature", 0)
            page.set("max-tokens", 24)

            # 1. A streamed reply equals the direct, non-streamed reply (greedy).
            first = page.send("In the beginning")
            got = page.finished(first)
            want = server.chat(BASE_ID, [{"role": "user", "content": "In the beginning"}], 24)
            check(want != "", "the base's reply is not empty (else the test proves nothing)")
            check(got["content"] == want and not got["error"], f"page reply == API reply: {got} vs {want!r}")
            check(first.get_attribute("data-model") == BASE_ID, "the reply names its model")
            shown = first.find_element(By.CSS_SELECTOR, '[data-role="text"]').text
            check(shown.split() == want.split(), f"the reply's text is shown: {shown!r}")
            spec = first.find_elements(By.CSS_SELECTOR, '[data-role="spec"]')
            check(len(spec) == 1 and spec[0].find_element(By.CSS_SELECTOR, '[data-role="tps"]').text != "",
                  "the reply has a speculation panel with tokens/s")
            setting = spec[0].find_element(By.CSS_SELECTOR, '[data-role="setting"]').text if spec else ""
            check(setting != "", f"the panel names the final setting: {setting!r}")

            # 2. Switch to the variant mid-conversation: its reply is the variant's, not the base's.
            Select(page.find("#model")).select_by_value("devil")
            second = page.send("And the serpent said")
            got = page.finished(second)
            history = messages_of(page.conversation()[:-1])
            want_devil = server.chat("devil", history, 24)
            want_base = server.chat(BASE_ID, history, 24)
            check(want_devil != want_base, "the variant's reply differs from the base's (else the test proves nothing)")
            check(got["content"] == want_devil and got["model"] == "devil", f"variant reply: {got} vs {want_devil!r}")
            check(second.get_attribute("data-model") == "devil" and first.get_attribute("data-model") == BASE_ID,
                  "each reply keeps the model that wrote it")
            check(len(driver.find_elements(By.CSS_SELECTOR, '[data-role="switch"]')) >= 1, "the switch is shown")
            bars = second.find_elements(By.CSS_SELECTOR, '[data-role="depth-chart"] .fill')
            check(len(bars) > 0, "the speculation panel has acceptance bars per depth")

            driver.execute_script("document.getElementById('messages').scrollTop = 1e9")
            driver.save_screenshot(screenshot)
            with open(screenshot, "rb") as f:
                check(f.read(8) == b"\x89PNG\r\n\x1a\n", f"the screenshot is a PNG: {screenshot}")

            # Text is text: markup in a message stays characters, a ``` block becomes <pre><code>.
            code_msg = "Run this:\n```html\n<b id=\"injected\">x</b><img src=x onerror=\"document.title='owned'\">\n```\nthanks"
            page.find("#clear").click()  # the fixture's context is 256 tokens
            coded = page.finished(page.send(code_msg))
            check(coded["content"] != "" and not coded["error"], f"a reply to the code: {coded}")
            user = page.d.find_elements(By.CSS_SELECTOR, '[data-role="user"]')[-1]
            blocks = user.find_elements(By.CSS_SELECTOR, "pre code")
            check(len(blocks) == 1 and blocks[0].text.startswith('<b id="injected">x</b><img'), "a fenced block is <pre><code>")
            check(not driver.find_elements(By.CSS_SELECTOR, "#injected, #messages img") and driver.title != "owned",
                  "markup in a message is shown as text, never run")
            check(page.conversation()[-2]["content"] == code_msg, "the message is sent as typed")

            # 3. Stop during a long reply: the page ends it and the server frees the slot. The
            # fixture model writes 200 tokens in well under a second, so the browser's network is
            # throttled to make the reply arrive slowly enough to be stopped part way.
            page.find("#clear").click()
            check(page.conversation() == [] and not page.replies(), "Clear empties the conversation")
            Select(page.find("#model")).select_by_value(BASE_ID)
            page.set("max-tokens", 200)
            driver.set_network_conditions(offline=False, latency=20, download_throughput=2048, upload_throughput=1 << 20)
            long = page.send("And God said")
            page.wait(lambda: page.conversation()[-1]["content"] != "", "the long reply to start", 30)
            page.find("#stop").click()
            got = page.finished(long, 30)
            driver.delete_network_conditions()
            check(got["stopped"] and long.get_attribute("data-stopped") == "1", f"the reply was stopped: {got}")
            full = server.chat(BASE_ID, [{"role": "user", "content": "And God said"}], 200)
            check(len(got["content"]) < len(full) and full.startswith(got["content"]),
                  f"the stopped reply is a part of the full one: {got['content']!r} vs {full[:60]!r}")
            deadline = time.time() + 20
            while time.time() < deadline and server.running() != 0:
                time.sleep(0.1)
            check(server.running() == 0, "the stopped reply's slot is free (vllm:num_requests_running 0)")
            check(page.find("#send").is_enabled() and not page.find("#stop").is_enabled(), "the page can send again")
            page.set("max-tokens", 24)
            again = page.finished(page.send("In the beginning"))
            want_again = server.chat(BASE_ID, messages_of(page.conversation()[:-1]), 24)
            check(again["content"] == want_again, f"after a stop the next reply is right: {again} vs {want_again!r}")

            errors = page.console_errors()
            check(not errors, f"no console errors: {errors}")
        finally:
            server.stop()

        # 4. With an API key: asked once, a wrong key fails cleanly and asks again, the right one works.
        keyed = Server("-m", conv, "--chat-template", template, "--api-key", "K-right")
        try:
            check(keyed.http("GET", "/")[0] == 200, "the page itself needs no key")
            page = Page(driver, keyed.url)
            dialog = page.find("#key-dialog")
            page.wait(lambda: dialog.is_displayed(), "the page to ask for the key", 20)
            page.find("#key-input").send_keys("K-wrong")
            page.find("#key-submit").click()
            err = page.find("#key-error")
            page.wait(lambda: dialog.is_displayed() and err.is_displayed() and err.text != "", "the wrong-key error", 20)
            check("not accept" in err.text, f"a wrong key gives a clean error: {err.text!r}")
            page.find("#key-input").send_keys("K-right")
            page.find("#key-submit").click()
            page.models_loaded()
            check(not dialog.is_displayed(), "the right key closes the form")
            page.set("temperature", 0)
            page.set("max-tokens", 24)
            got = page.finished(page.send("In the beginning"))
            want_keyed = keyed.chat(BASE_ID, [{"role": "user", "content": "In the beginning"}], 24, key="K-right")
            check(got["content"] == want_keyed and not got["error"], f"with the key: {got} vs {want_keyed!r}")
            stored = driver.execute_script("return sessionStorage.getItem('bitsplit.apiKey')")
            check(stored == "K-right", "the key is kept for the tab (sessionStorage)")
            check("K-" not in driver.current_url, "no key in the URL")
            # Kept for the tab: a reload does not ask again.
            driver.refresh()
            page.models_loaded()
            check(not page.find("#key-dialog").is_displayed(), "after a reload the tab's key is used, not asked for")
            logs = json.dumps(driver.get_log("browser"))
            check("K-right" not in logs and "K-wrong" not in logs, "no key in the console")
        finally:
            keyed.stop()

        # (--no-webui's 404 is checked by serve_openai_test.py, which runs without a browser.)
    finally:
        driver.quit()

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("all web page checks passed")
