# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The SGLang router (package sglang-router 0.3.2, the release that pairs with SGLang 0.5.9), standard library only.

Facts this code relies on, read in the 0.3.2 wheel (sglang_router/router_args.py, launch_router.py) and checked
against the real router here (tests/integration/test_router_live.py):
- ``--api-key K`` is the one key of 0.3.2: the router answers 401 to a request without ``Authorization: Bearer K``
  (also ``GET /workers``) and sends the same key to its workers, so it must be the workers' (SGLang's) key. It is
  taken only as an argument: the launcher (roles/sglang_router/files/gpuserve-sglang-router) reads it from a file
  and hands it to ``parse_router_args`` inside the process, so it never reaches ``/proc/<pid>/cmdline``;
- ``GET /workers`` lists ``{"workers": [{"id", "url", "is_healthy", "load", ...}]}``; ``POST /workers {"url"}``
  and ``DELETE /workers/<id>`` answer 202 and act in the background, so a change is confirmed by listing again;
- ``/health`` stays open; the Prometheus exporter listens on its own host/port.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
import time

from http.client import HTTPConnection, HTTPException, HTTPSConnection
from urllib.parse import quote, urlsplit

from .argv import ROUTER_OWN, is_loopback, is_port, name_problems, value_problems, word_problem

POLICIES = ("cache_aware", "round_robin", "power_of_two", "random")
ROUTER_RELEASE = "0.3.2"    # the router the role's lock installs (roles/sglang_router/files/locks)
_URL = re.compile(r"^https?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})/?$")


class RouterError(Exception):
    """The router did not do what was asked; the message says what it answered."""


def worker_url_problem(url):
    """Why ``url`` is not a worker address the router can take (http(s)://host:port), or None."""
    m = _URL.match(str(url or ""))
    if not m or not 0 < int(m.group(2)) < 65536:
        return "%r: expected http://<host>:<port> (or https://), e.g. http://10.0.0.21:30000" % (url,)
    return None


def normalize_url(url):
    return str(url).rstrip("/")


def pd_problems(prefill, decode, workers=None, prefix=""):
    """What is wrong with a prefill/decode set for the router's PD mode (sglang-router 0.3.2's
    ``--pd-disaggregation``), each naming its setting (``prefix`` + ``pd_prefill``/``pd_decode``), or [].
    ``prefill``: [{"url", "bootstrap_port"}] (the port SGLang's ``--disaggregation-bootstrap-port`` opens on that
    server; the router hands it to the decode side with each request); ``decode``: [url]. Neither set means no PD
    mode; one without the other routes nothing, and plain workers beside them are not routed in PD mode."""
    prefill, decode = prefill or [], decode or []
    if not prefill and not decode:
        return []
    problems = []
    if not isinstance(prefill, (list, tuple)) or not isinstance(decode, (list, tuple)):
        return ["%spd_prefill and %spd_decode: lists (of {url, bootstrap_port}, and of URLs)" % (prefix, prefix)]
    if not prefill or not decode:
        problems.append("%spd_prefill (%d) and %spd_decode (%d): PD mode needs at least one of each - a request is "
                        "prefilled on one server and decoded on another" % (prefix, len(prefill), prefix, len(decode)))
    for i, p in enumerate(prefill):
        url = p.get("url") if isinstance(p, dict) else None
        port = p.get("bootstrap_port") if isinstance(p, dict) else None
        bad = worker_url_problem(url) if url is not None else "a mapping {url, bootstrap_port}"
        if bad:
            problems.append("%spd_prefill[%d]: %s" % (prefix, i, bad))
        if not is_port(port):
            problems.append("%spd_prefill[%d].bootstrap_port=%r: a TCP port, 1-65535 (the prefill server's "
                            "disaggregation bootstrap port, 8998 by SGLang's default)" % (prefix, i, port))
    for i, url in enumerate(decode):
        bad = worker_url_problem(url)
        if bad:
            problems.append("%spd_decode[%d]: %s" % (prefix, i, bad))
    urls = [p.get("url") for p in prefill if isinstance(p, dict)] + list(decode)
    twice = sorted(set(normalize_url(u) for u in urls if [normalize_url(x) for x in urls].count(normalize_url(u)) > 1))
    if twice:
        problems.append("%spd_prefill/%spd_decode: %s named twice - a server is either prefill or decode"
                        % (prefix, prefix, ", ".join(twice)))
    if workers:
        problems.append("%sworkers (%s) beside %spd_prefill/%spd_decode: the router in PD mode routes only its "
                        "prefill and decode servers; give plain replicas a router of their own"
                        % (prefix, ", ".join(str(w) for w in workers), prefix, prefix))
    return problems


def router_problems(host, port, policy, workers, extra=None, prefix="", keyed=True, public_ok=False,
                    prometheus_host=None):
    """What is wrong with the router's settings, each naming its setting (``prefix`` + its name, e.g. the role's
    ``sglang_router_``), or []. ``keyed``/``public_ok``: a bind beyond loopback needs a key unless allowed. Every
    word that reaches the command line (the bind addresses, the extra args) is checked as the server's are: none
    may begin with ``-`` or hold a control character (``sglang_argv.word_problem``)."""
    problems = []
    for name, value in (("host", host), ("prometheus_host", prometheus_host)):
        problem = word_problem(prefix + name, value) if value is not None else None
        if problem is None and value is not None and not re.match(r"^[A-Za-z0-9.:\[\]-]+$", str(value)):
            problem = ("%s%s=%r: an IP address or host name (letters, digits, '.', ':', '-')" % (prefix, name, value))
        if problem:
            problems.append(problem)
    if policy not in POLICIES:
        problems.append("%spolicy=%r: one of %s" % (prefix, policy, ", ".join(POLICIES)))
    if not is_port(port):
        problems.append("%sport=%s: a TCP port, 1-65535" % (prefix, port))
    if not isinstance(workers, (list, tuple)):
        problems.append("%sworkers=%r: a list of http://<host>:<port>" % (prefix, workers))
    else:
        bad = [str(u) for u in workers if worker_url_problem(u)]
        if bad:
            problems.append("%sworkers: %s - expected http://<host>:<port>, e.g. http://10.0.0.21:30000"
                            % (prefix, ", ".join(bad)))
    if not isinstance(extra or {}, dict):
        problems.append("%sextra_args=%r: a mapping of router flags in snake_case" % (prefix, extra))
    else:
        named = []
        for key in sorted(extra or {}, key=str):
            if key in ROUTER_OWN or not re.match(r"^[a-z][a-z0-9_]*$", str(key)):
                problems.append("%sextra_args: extra %r is not a router flag in snake_case the role leaves to you "
                                "(not %s)" % (prefix, key, ", ".join(ROUTER_OWN)))
            else:
                named.append(key)
        # each name an option of the router's parser exactly: it takes a prefix (hos) as the option it begins (--host)
        problems.extend(name_problems(named, "router", ROUTER_RELEASE, "%sextra_args." % prefix))
        problems.extend(value_problems(extra or {}, prefix="%sextra_args." % prefix))
    if not keyed and not public_ok and not is_loopback(host):
        problems.append("%shost=%s without %sapi_key: anyone on the network could use the GPUs; set %sapi_key (the "
                        "key of the replicas) or bind 127.0.0.1" % (prefix, host, prefix, prefix))
    return problems


def router_argv(host, port, policy, workers, prometheus_host=None, prometheus_port=None, extra=None, prefill=None,
                decode=None):
    """The router's command-line arguments (for ``parse_router_args``), without the key: a list of strings, the extra
    args first, the role's own flags after them (the launcher appends the workers' file and the key last).
    ``extra``: other router flags in snake_case (``health_check_interval_secs: 5`` -> ``--health-check-interval-secs
    5``; ``true`` -> the bare flag, ``false``/None -> left out; a list -> the flag then each item). ``prefill`` and
    ``decode`` (``pd_problems``): PD mode - ``--pd-disaggregation``, ``--prefill URL BOOTSTRAP_PORT`` for each
    prefill server and ``--decode URL`` for each decode server, among the role's own flags."""
    problems = router_problems(host, port, policy, workers, extra, prometheus_host=prometheus_host)
    problems += pd_problems(prefill, decode, workers)
    if problems:
        raise RouterError("; ".join(problems))
    argv = []
    for key in sorted(extra or {}):
        value = extra[key]
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, (list, tuple)):
            argv += [flag] + [str(v) for v in value]
        else:
            argv += [flag, str(value)]
    # the role's own flags after the extra args: argparse keeps the last of a repeated option
    argv += ["--host", str(host), "--port", str(int(port)), "--policy", policy]
    if workers:
        argv += ["--worker-urls"] + [normalize_url(u) for u in workers]
    if prefill or decode:
        argv.append("--pd-disaggregation")
        for p in prefill:
            argv += ["--prefill", normalize_url(p["url"]), str(int(p["bootstrap_port"]))]
        for url in decode:
            argv += ["--decode", normalize_url(url)]
    if prometheus_port:
        argv += ["--prometheus-host", str(prometheus_host or "127.0.0.1"), "--prometheus-port", str(int(prometheus_port))]
    return argv


class RouterClient(object):
    """The router's HTTP API (stdlib http.client), with the key as a bearer token."""

    def __init__(self, url, api_key=None, timeout=10):
        u = urlsplit(url)
        self.scheme, self.host, self.port = u.scheme or "http", u.hostname, u.port or (443 if u.scheme == "https" else 80)
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def request(self, method, path, body=None):
        """(status, parsed JSON or text) of one request; RouterError when the router cannot be reached."""
        cls = HTTPSConnection if self.scheme == "https" else HTTPConnection
        conn = cls(self.host, self.port, timeout=self.timeout)
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = "Bearer %s" % self.api_key
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read().decode("utf-8", "replace")
        except (HTTPException, OSError) as e:
            raise RouterError("the router at %s cannot be reached (%s %s: %s)" % (self.url, method, path, e))
        finally:
            conn.close()
        try:
            return resp.status, json.loads(raw) if raw else None
        except ValueError:
            return resp.status, raw

    def workers(self):
        """The router's workers: [{id, url, is_healthy, load}]."""
        status, doc = self.request("GET", "/workers")
        if status == 401:
            raise RouterError("the router at %s answered 401 to GET /workers: the API key is not the router's" % self.url)
        if status != 200 or not isinstance(doc, dict):
            raise RouterError("the router at %s answered %s to GET /workers: %s" % (self.url, status, doc))
        return [{"id": w.get("id"), "url": normalize_url(w.get("url", "")), "is_healthy": w.get("is_healthy"),
                 "load": w.get("load")} for w in doc.get("workers", [])]

    def add(self, url):
        status, doc = self.request("POST", "/workers", {"url": normalize_url(url)})
        if status not in (200, 201, 202):
            raise RouterError("the router refused to add worker %s: %s %s" % (url, status, doc))

    def remove(self, worker_id, url):
        status, doc = self.request("DELETE", "/workers/%s" % quote(str(worker_id), safe=""))
        if status not in (200, 202, 204):
            raise RouterError("the router refused to remove worker %s (%s): %s %s" % (url, worker_id, status, doc))


def worker_changes(current, wanted):
    """(urls to add, [(id, url)] to remove) to make the router's list ``current`` the set ``wanted``."""
    want = [normalize_url(u) for u in wanted]
    have = dict((w["url"], w["id"]) for w in current)
    add = [u for u in want if u not in have]
    remove = [(have[u], u) for u in sorted(have) if u not in want]
    return add, remove


def reconcile(client, wanted, check_mode=False, timeout=60, sleep=time.sleep, clock=time.time):
    """Make the router's workers exactly ``wanted`` through its API, no restart: add what is missing, remove what
    is not wanted, then list until the router shows exactly that set (its changes are asynchronous) or ``timeout``
    seconds pass (RouterError naming what is still different). Returns {changed, added, removed, workers}."""
    current = client.workers()
    add, remove = worker_changes(current, wanted)
    result = {"changed": bool(add or remove), "added": add, "removed": [u for _i, u in remove], "workers": current}
    if check_mode or not result["changed"]:
        return result
    for worker_id, url in remove:
        client.remove(worker_id, url)
    for url in add:
        client.add(url)
    end = clock() + timeout
    want = set(normalize_url(u) for u in wanted)
    while True:
        current = client.workers()
        if set(w["url"] for w in current) == want:
            result["workers"] = current
            return result
        if clock() >= end:
            have = set(w["url"] for w in current)
            raise RouterError("after %ss the router lists %s, not %s (missing %s, extra %s): a worker it cannot reach "
                              "is not added - check that it is up and answers with the router's key"
                              % (timeout, sorted(have), sorted(want), sorted(want - have), sorted(have - want)))
        sleep(0.5)
