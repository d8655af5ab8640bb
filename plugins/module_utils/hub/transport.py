# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""HTTP GET for the Hub client, stdlib only: http.client with redirects (the Authorization header dropped when the
host changes, as the Hub's CDN redirects need, and on a scheme downgrade) and proxies from the environment."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from http.client import HTTPConnection, HTTPSConnection
from urllib.parse import urlsplit


class HTTPStatusError(Exception):
    def __init__(self, code):
        Exception.__init__(self, "HTTP %s" % code)
        self.code = code


def _proxy_for(scheme, host):
    """The proxy from HTTPS_PROXY/HTTP_PROXY (either case) unless NO_PROXY covers the host."""
    no_proxy = os.environ.get("NO_PROXY", os.environ.get("no_proxy", ""))
    for entry in (e.strip() for e in no_proxy.split(",") if e.strip()):
        if entry == "*" or host == entry.lstrip(".") or host.endswith("." + entry.lstrip(".")):
            return None
    name = "HTTPS_PROXY" if scheme == "https" else "HTTP_PROXY"
    return os.environ.get(name) or os.environ.get(name.lower()) or None


def keeps_authorization(url, location):
    """Whether a redirect from ``url`` to ``location`` may carry the Authorization header: only to the same host, on
    the same scheme and port or upgraded from http to https on the default ports. A downgrade (https -> http) would
    send the token in clear text; another host (the Hub's CDN) must not receive it."""
    a, b = urlsplit(url), urlsplit(location)
    if (a.hostname or "").lower() != (b.hostname or "").lower():
        return False
    default = {"http": 80, "https": 443}
    pa, pb = a.port or default.get(a.scheme), b.port or default.get(b.scheme)
    if a.scheme == b.scheme:
        return pa == pb
    return a.scheme == "http" and b.scheme == "https" and pa == 80 and pb == 443


def http_get(url, headers, timeout, max_redirects=5):
    """GET with http.client (stdlib): redirects followed (the Authorization header is dropped when the host, the
    port or the scheme changes, but for an upgrade to https: ``keeps_authorization``), proxies from the environment.
    Returns the open response (status 2xx); raises HTTPStatusError for any other final status."""
    headers = dict(headers)
    for dummy in range(max_redirects + 1):
        u = urlsplit(url)
        port = u.port or (443 if u.scheme == "https" else 80)
        proxy = _proxy_for(u.scheme, u.hostname)
        path = (u.path or "/") + ("?" + u.query if u.query else "")
        if proxy:
            p = urlsplit(proxy if "://" in proxy else "http://" + proxy)
            if u.scheme == "https":
                conn = HTTPSConnection(p.hostname, p.port or 3128, timeout=timeout)
                conn.set_tunnel(u.hostname, port)
            else:
                conn = HTTPConnection(p.hostname, p.port or 3128, timeout=timeout)
                path = url
        else:
            cls = HTTPSConnection if u.scheme == "https" else HTTPConnection
            conn = cls(u.hostname, port, timeout=timeout)
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        if resp.status in (301, 302, 303, 307, 308) and resp.getheader("Location"):
            location = resp.getheader("Location")
            resp.read()
            conn.close()
            nxt = location if "://" in location else "%s://%s%s" % (u.scheme, u.netloc, location)
            if not keeps_authorization(url, nxt):
                headers.pop("Authorization", None)     # and never put back on a later hop
            url = nxt
            continue
        if not 200 <= resp.status < 300:
            resp.read()
            conn.close()
            raise HTTPStatusError(resp.status)
        return resp
    raise HTTPStatusError(310)
