"""Stress how a background thread's results reach a served page: N callbacks from a thread while the server's
loop holds and releases the session's document ("combine") as fast as it can, counting how many ran.

`direct` adds each callback to the document from the thread (what `app.views.docsync.call_on_document` did
before: Bokeh's hold bookkeeping is not thread-safe, and a callback added just as the loop releases a hold is
never run); `loop` goes through `call_on_document`, which hands it to the loop first.

Run: `python tests/bench/stress_thread_delivery.py [--mode direct|loop|both] [--n 20000] [--switch-us 1]`
(a 1 us thread switch interval makes the race frequent enough to count; Python's default is 5 ms). Exit
status 1 if the `loop` mode lost any callback.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


def run_one(mode: str, n: int, switch_us: float) -> int:
    """Serve one page, deliver `n` callbacks from a thread in `mode`; returns how many ran."""
    import panel as pn
    from bokeh.client import pull_session

    from app.explorer import free_port
    from app.views.docsync import call_on_document

    docs, ran = [], []

    def page():
        doc = pn.state.curdoc
        docs.append(doc)
        text = pn.pane.HTML("0")

        def churn() -> None:  # the loop holds and releases the document, as Panel does around its changes
            for i in range(50):
                doc.hold("combine")
                text.object = str(i)
                doc.unhold()

        pn.state.add_periodic_callback(churn, period=1)
        return text

    port = free_port()
    server = pn.serve(page, port=port, threaded=True, show=False)
    deadline = time.monotonic() + 60
    while True:
        try:
            session = pull_session(url=f"http://127.0.0.1:{port}/")
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    while not docs:
        time.sleep(0.05)
    doc = docs[0]
    sys.setswitchinterval(switch_us / 1e6)

    def body() -> None:
        for i in range(n):
            if mode == "direct":
                doc.add_next_tick_callback(lambda i=i: ran.append(i))
            else:
                call_on_document(doc, lambda i=i: ran.append(i))
            if i % 10 == 0:
                time.sleep(0.001)

    worker = threading.Thread(target=body)
    worker.start()
    worker.join()
    sys.setswitchinterval(0.005)
    time.sleep(5)  # every callback still queued has run by now on an idle machine
    session.close()
    server.stop()
    return len(ran)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("direct", "loop", "both"), default="both")
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--switch-us", type=float, default=1.0)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(run_one(args.mode, args.n, args.switch_us))
        sys.stdout.flush()
        os._exit(0)  # the served threads are daemons; nothing else to wait for
    lost = {}
    for mode in (("direct", "loop") if args.mode == "both" else (args.mode,)):
        out = subprocess.run([sys.executable, __file__, "--child", "--mode", mode, "--n", str(args.n),
                              "--switch-us", str(args.switch_us)], capture_output=True, text=True, timeout=600)
        ran = int(out.stdout.strip().splitlines()[-1])
        lost[mode] = args.n - ran
        print(f"{mode}: {ran} of {args.n} callbacks ran, {lost[mode]} lost (switch interval {args.switch_us} us)")
    return 1 if lost.get("loop", 0) else 0


if __name__ == "__main__":
    sys.exit(main())
