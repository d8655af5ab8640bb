"""The Hub client's GET: the token follows a redirect only where it is safe (#42 item 7: an https -> http redirect
to the same host kept the Authorization header, sending the token in clear text)."""
import http.server
import threading

import pytest

from unit_helpers import load_module_util

HTTP = load_module_util("hub.transport")


@pytest.mark.parametrize("url, location, keeps", [
    ("https://huggingface.co/a", "https://huggingface.co/b", True),
    ("https://huggingface.co/a", "http://huggingface.co/b", False),            # downgrade: clear text
    ("https://huggingface.co/a", "https://cdn-lfs.huggingface.co/b", False),   # another host (the CDN)
    ("https://huggingface.co/a", "https://huggingface.co:8443/b", False),      # another port
    ("http://hub.local/a", "https://hub.local/b", True),                       # an upgrade on the default ports
    ("http://hub.local:8080/a", "http://hub.local:8080/b", True),
    ("http://hub.local:8080/a", "https://hub.local:8443/b", False),
    ("https://HuggingFace.co/a", "https://huggingface.co/b", True),
])
def test_the_token_follows_a_redirect_only_to_the_same_host_scheme_and_port(url, location, keeps):
    assert HTTP.keeps_authorization(url, location) is keeps


class Recorder(http.server.BaseHTTPRequestHandler):
    seen = []

    def do_GET(self):  # noqa: N802  pylint: disable=invalid-name
        Recorder.seen.append((self.headers.get("Host"), self.path, self.headers.get("Authorization")))
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", self.path.split("to=", 1)[1])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def test_a_real_redirect_to_another_host_loses_the_token_and_never_gets_it_back():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    Recorder.seen[:] = []
    try:
        # 127.0.0.1 -> localhost (another host name) -> back to 127.0.0.1: the token went with the first hop only
        back = "http://127.0.0.1:%d/file" % port
        via = "http://localhost:%d/redirect?to=%s" % (port, back)
        resp = HTTP.http_get("http://127.0.0.1:%d/redirect?to=%s" % (port, via), {"Authorization": "Bearer hf_t"}, 5)
        assert resp.read() == b"ok"
    finally:
        srv.shutdown()
        srv.server_close()
    assert [a for _h, _p, a in Recorder.seen] == ["Bearer hf_t", None, None]
