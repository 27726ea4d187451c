"""Run the vendor's Model Explorer server so that it answers only the front: `python backend_guard.py PORT ARGS...`.

Run by path (it imports nothing of this project). Every Flask app the server makes gets a
`before_request` check: the Host must be exactly `127.0.0.1:PORT` and the request must carry no
`Origin` and no `Sec-Fetch-*` header (the front's forwarded requests never do; every browser request
to a loopback address does), else 421/403. A page that rebinds a name to 127.0.0.1 or guesses this
private port gets nothing from it. The rest of the arguments go to `model_explorer.cmdline.main`.
"""
from __future__ import annotations

import sys


def _install(port: int) -> None:
    import flask

    host = f"127.0.0.1:{port}"
    original = flask.Flask.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)

        @self.before_request
        def only_the_front():
            headers = flask.request.headers
            if headers.getlist("Host") != [host]:
                return "wrong Host: this server answers only its front\n", 421, {"Content-Type": "text/plain"}
            if "Origin" in headers or any(k.lower().startswith("sec-fetch-") for k in headers.keys()):
                return "browsers talk to the front, not to this server\n", 403, {"Content-Type": "text/plain"}
            return None

    flask.Flask.__init__ = init


def main(argv: list[str]) -> int:
    port = int(argv[0])
    _install(port)
    from model_explorer.cmdline import main as vendor_main

    sys.argv = ["model-explorer", *argv[1:]]
    vendor_main()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
