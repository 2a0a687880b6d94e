"""What the `bitsplit serve` script tests share: a server process on a free loopback port, its
HTTP, and its stop. Used by serve_openai_test.py, serve_soak_test.py and serve_webui_test.py."""
import json
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request


class ServeProcess:
    """`BINARY serve --port 0 -t 2 ARGS...`, returned once it says `ready:` (at most 60 s); its
    log is kept in `log` up to then and drained afterwards."""

    def __init__(self, binary, *args):
        self.proc = subprocess.Popen([binary, "serve", "--port", "0", "-t", "2", *args], stderr=subprocess.PIPE,
                                     text=True)
        self.log = []
        self.port = None
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            if line.startswith("ready:"):
                break
        assert self.port and any(l.startswith("ready:") for l in self.log), "".join(self.log)
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()

    def http(self, method, path, body=None, headers=None, timeout=60):
        """(status, text, headers); `body` as bytes, text, or a JSON value to serialise."""
        if body is not None and not isinstance(body, (str, bytes)):
            body = json.dumps(body)
        data = body.encode() if isinstance(body, str) else body
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), dict(e.headers)

    def stop(self):
        """True when it stopped on SIGTERM within 30 s (else it is killed)."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
            return True
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return False
