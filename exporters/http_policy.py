"""Which requests a local server answers: its own Host and Origin by allowlist, never fetch metadata.

A DNS-rebinding page reaches a loopback server under its own name (`evil.example:PORT`), so the
Host header is the only thing that tells it apart; a cross-site page's websocket or fetch carries
its own Origin. `refusal` reads the headers of one request and says why it is refused (or None);
the explorer's Tornado server and the Model Explorer front both ask it before any handler runs.
`Sec-Fetch-Site` is never a reason to accept: a cross-site or same-site subresource is refused
on top of the allowlist (a navigation to the page is not). `security_headers` are the response
headers both servers send on every answer (what the page may load, who may frame it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
# What a page of the explorer may load: from its own server only (its websocket included: CSP 3 'self'
# matches ws: on the same host and port). BokehJS and Panel run inline scripts made per session (the
# document's JSON, the embed call) and compile CustomJS callbacks with `new Function`, so scripts need
# 'unsafe-inline' and 'unsafe-eval'; Panel's module shim runs blob: scripts it made itself. Names reach
# the page as text, never markup (docs/security.md): that, not this policy, is the defence against
# injection. The policy stops loads from other hosts, plugins, <base>, forms posting elsewhere, framing.
APP_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline' 'unsafe-eval' blob:; style-src 'self' 'unsafe-inline'; "
           "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
           "object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'")
MISDIRECTED = 421  # the Host names another server
FORBIDDEN = 403


@dataclass(frozen=True)
class HostPolicy:
    """The `host:port` values a server answers to, and the `http://host:port` origins it trusts."""

    hosts: frozenset[str]
    origins: frozenset[str]

    @classmethod
    def loopback(cls, port: int, extra: Iterable[str] = ()) -> "HostPolicy":
        """127.0.0.1, localhost and [::1] on `port`, plus `extra` names (`name` or `name:port`)."""
        hosts = {f"{name}:{port}" for name in LOOPBACK_NAMES}
        for name in extra:
            name = name.strip().lower()
            if not name:
                continue
            hosts.add(name if _has_port(name) else f"{name}:{port}")
        return cls(frozenset(h.lower() for h in hosts), frozenset(f"http://{h.lower()}" for h in hosts))


def security_headers(csp: str = APP_CSP) -> dict[str, str]:
    """The headers every answer of a local server carries: `csp`, no framing (CSP and the older
    X-Frame-Options), no MIME sniffing, no Referer sent to other sites, no cross-origin window handle."""
    return {
        "Content-Security-Policy": csp,
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cross-Origin-Opener-Policy": "same-origin",
    }


def _has_port(name: str) -> bool:
    tail = name.rsplit("]", 1)[-1] if name.startswith("[") else name
    return ":" in tail


def valid_host_name(name: str) -> bool:
    """True for a plain `name`, `name:port`, `[v6]` or `[v6]:port`: letters, digits, `.-_:[]` only."""
    return bool(name) and len(name) <= 255 and all(c.isascii() and (c.isalnum() or c in ".-_:[]") for c in name)


def refusal(policy: HostPolicy, header: Callable[[str], Sequence[str]]) -> tuple[int, str] | None:
    """Why a request with these headers is refused (status, reason), or None to let it through.

    `header(name)` returns every value of that header the request carried (an empty list if none).
    """
    hosts = header("Host")
    if len(hosts) != 1 or hosts[0].strip().lower() not in policy.hosts:
        return MISDIRECTED, "wrong Host: this server answers only its own loopback address and port"
    origins = header("Origin")
    upgrade = any(v.strip().lower() == "websocket" for v in header("Upgrade"))
    if len(origins) > 1 or (origins and origins[0].strip().lower() not in policy.origins):
        return FORBIDDEN, "foreign Origin: only this server's own pages may call it"
    if upgrade and not origins:
        return FORBIDDEN, "a websocket needs this server's Origin"
    site = [v.strip().lower() for v in header("Sec-Fetch-Site")]
    if any(s in ("cross-site", "same-site") for s in site) and not _navigation(header):
        return FORBIDDEN, "another site's page may only navigate here, not load from here"
    return None


def _navigation(header: Callable[[str], Sequence[str]]) -> bool:
    mode = [v.strip().lower() for v in header("Sec-Fetch-Mode")]
    dest = [v.strip().lower() for v in header("Sec-Fetch-Dest")]
    return mode == ["navigate"] and dest == ["document"]
