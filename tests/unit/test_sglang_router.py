"""module_utils/server/router.py: the router's argv (never the key), the worker changes, and reconcile's wait for the
router's asynchronous /workers changes (against a client that applies them late, as 0.3.2's 202 answers do)."""
import pytest

from unit_helpers import load_module_util

R = load_module_util("server.router")


def test_router_argv_has_no_key_and_takes_extra_flags_in_snake_case():
    extra = {"health_check_interval_secs": 5, "disable_retries": True, "request_id_headers": ["x-a", "x-b"],
             "log_dir": None}
    argv = R.router_argv("0.0.0.0", 30080, "cache_aware", ["http://10.0.0.21:30000/", "http://10.0.0.22:30000"],
                         prometheus_port=29000, extra=extra)
    assert argv == ["--disable-retries", "--health-check-interval-secs", "5", "--request-id-headers", "x-a", "x-b",
                    "--host", "0.0.0.0", "--port", "30080", "--policy", "cache_aware",
                    "--worker-urls", "http://10.0.0.21:30000", "http://10.0.0.22:30000",
                    "--prometheus-host", "127.0.0.1", "--prometheus-port", "29000"]


# Security round 3 (#58 item 1): the router's parser (RouterArgs, a plain argparse parser) takes a prefix as the
# option it begins, and the last of a repeated option wins: an extra arg `hos: 0.0.0.0` after the role's --host bound
# the router on all addresses with no key.
@pytest.mark.parametrize("extra, needle", [
    ({"hos": "0.0.0.0"}, "sglang_router_extra_args.hos: sglang-router 0.3.2's parser takes --hos as --host"),
    ({"api_k": "x"}, "sglang_router_extra_args.api_k: sglang-router 0.3.2's parser takes --api-k as --api-key (any "
                     "unambiguous prefix of an option is that option): a secret never goes on the command line"),
    ({"worker_u": "http://evil:1"}, "takes --worker-u as --worker-urls"),
    ({"worker": "http://evil:1"}, "--worker is not an option of sglang-router 0.3.2 - its parser refuses it as "
                                  "ambiguous (--worker-"),
    ({"prometheus_h": "0.0.0.0"}, "takes --prometheus-h as --prometheus-host"),
    ({"redis_u": "redis://:pw@h"}, "takes --redis-u as --redis-url"),
    ({"health_check_interval": 5}, "--health-check-interval is not an option of sglang-router 0.3.2 - its parser "
                                   "would take it as --health-check-interval-secs"),
])
def test_an_extra_arg_the_router_would_take_as_its_own_or_a_secret_is_refused(extra, needle):
    problems = R.router_problems("127.0.0.1", 30080, "cache_aware", [], extra, prefix="sglang_router_")
    assert problems and needle in problems[0], problems
    with pytest.raises(R.RouterError):
        R.router_argv("127.0.0.1", 30080, "cache_aware", [], extra=extra)


@pytest.mark.parametrize("kw,needle", [
    ({"policy": "fastest"}, "policy='fastest': one of cache_aware"),
    ({"port": 70000}, "port=70000"),
    ({"workers": ["10.0.0.21:30000"]}, "expected http://<host>:<port>"),
    ({"extra": {"api_key": "x"}}, "extra 'api_key'"),
    ({"extra": {"worker_urls": ["http://a:1"]}}, "extra 'worker_urls'"),
    ({"extra": {"--raw": 1}}, "extra '--raw'"),
])
def test_bad_router_args_are_named(kw, needle):
    a = {"host": "127.0.0.1", "port": 30080, "policy": "cache_aware", "workers": []}
    a.update(kw)
    with pytest.raises(R.RouterError, match=needle.replace("(", r"\(").replace("[", r"\[")):
        R.router_argv(**a)


class LateRouter(object):
    """A router whose /workers changes show up a few listings later (0.3.2 queues them: 202)."""

    def __init__(self, urls, lag=2, never=()):
        self.list = [{"id": "id-%d" % i, "url": u, "is_healthy": True, "load": 0} for i, u in enumerate(urls)]
        self.pending, self.lag, self.never, self.calls = [], lag, set(never), []

    def workers(self):
        for p in list(self.pending):
            p[0] -= 1
            if p[0] <= 0:
                self.pending.remove(p)
                p[1]()
        return [dict(w) for w in self.list]

    def add(self, url):
        self.calls.append(("add", url))
        if url not in self.never:
            self.pending.append([self.lag, lambda: self.list.append({"id": "new-" + url, "url": url,
                                                                    "is_healthy": True, "load": 0})])

    def remove(self, worker_id, url):
        self.calls.append(("remove", url))
        self.pending.append([self.lag, lambda: self.list.__setitem__(
            slice(None), [w for w in self.list if w["id"] != worker_id])])


def test_reconcile_waits_for_the_routers_late_changes_and_check_mode_calls_nothing():
    r = LateRouter(["http://a:1", "http://b:1"])
    dry = R.reconcile(r, ["http://a:1", "http://c:1/"], check_mode=True, sleep=lambda s: None)
    assert dry["changed"] is True and dry["added"] == ["http://c:1"] and dry["removed"] == ["http://b:1"]
    assert r.calls == []
    done = R.reconcile(r, ["http://a:1", "http://c:1/"], sleep=lambda s: None)
    assert sorted(w["url"] for w in done["workers"]) == ["http://a:1", "http://c:1"]
    assert r.calls == [("remove", "http://b:1"), ("add", "http://c:1")]
    same = R.reconcile(r, ["http://c:1", "http://a:1"], sleep=lambda s: None)
    assert same["changed"] is False and r.calls == [("remove", "http://b:1"), ("add", "http://c:1")]


def test_a_worker_the_router_never_lists_is_named_after_the_timeout():
    r = LateRouter(["http://a:1"], never=["http://down:1"])
    now = [0.0]

    def clock():
        now[0] += 1.0
        return now[0]
    with pytest.raises(R.RouterError, match=r"missing \['http://down:1'\]"):
        R.reconcile(r, ["http://a:1", "http://down:1"], timeout=5, sleep=lambda s: None, clock=clock)


def test_router_problems_name_the_roles_variables_and_the_public_bind_rule():
    """The role's preflight (filter sglang_router_problems) and the argument builder share these checks."""
    p = R.router_problems("0.0.0.0", "30080", "cache_aware", ["127.0.0.1:30001", "http://10.0.0.2:30000"],
                          {"api_key": "x"}, prefix="sglang_router_", keyed=False)
    assert p == ["sglang_router_workers: 127.0.0.1:30001 - expected http://<host>:<port>, e.g. http://10.0.0.21:30000",
                 "sglang_router_extra_args: extra 'api_key' is not a router flag in snake_case the role leaves to you "
                 "(not host, port, policy, worker_urls, api_key, prometheus_host, prometheus_port, pd_disaggregation, "
                 "prefill, decode)",
                 "sglang_router_host=0.0.0.0 without sglang_router_api_key: anyone on the network could use the GPUs; "
                 "set sglang_router_api_key (the key of the replicas) or bind 127.0.0.1"]
    assert R.router_problems("127.0.0.1", 30080, "round_robin", [], keyed=False) == []
    assert R.router_problems("0.0.0.0", 30080, "round_robin", [], keyed=False, public_ok=True) == []
    assert R.router_problems("0.0.0.0", "80a", "round_robin", "http://a:1")[:1] == ["port=80a: a TCP port, 1-65535"]


@pytest.mark.parametrize("kw,needle", [
    # #42 item 1: the same smuggling as the server's, and the exporter's bind never checked
    ({"extra": {"health_check_interval_secs": [10, "--host", "0.0.0.0"]}},
     "sglang_router_extra_args.health_check_interval_secs='--host'"),
    ({"extra": {"log_dir": "--api-key=x"}}, "sglang_router_extra_args.log_dir='--api-key=x'"),
    ({"extra": {"log_dir": "/var/log/r\n--host"}}, "control character"),
    ({"prometheus_host": "--host"}, "sglang_router_prometheus_host='--host'"),
    ({"prometheus_host": "0.0.0.0 --host"}, "sglang_router_prometheus_host='0.0.0.0 --host': an IP address"),
    ({"host": "-h"}, "sglang_router_host='-h'"),
])
def test_a_router_value_that_would_be_a_flag_is_named_by_the_preflight_and_refused_by_argv(kw, needle):
    a = {"host": "127.0.0.1", "port": 30080, "policy": "cache_aware", "workers": []}
    a.update(kw)
    problems = R.router_problems(a["host"], a["port"], a["policy"], a["workers"], a.get("extra"),
                                 prefix="sglang_router_", prometheus_host=a.get("prometheus_host"))
    assert any(needle in p for p in problems), problems
    with pytest.raises(R.RouterError, match=needle.replace("sglang_router_", "").replace("(", r"\(")
                       .replace("[", r"\[").replace("+", r"\+")):
        R.router_argv(a["host"], a["port"], a["policy"], a["workers"], prometheus_host=a.get("prometheus_host"),
                      prometheus_port=29000 if a.get("prometheus_host") else None, extra=a.get("extra"))


# ---- PD mode (#59 item 3): the prefill and decode servers behind one router

PREFILL = [{"url": "http://10.0.3.100:30000", "bootstrap_port": 8998}]
DECODE = ["http://10.0.3.101:30000"]


def test_pd_mode_puts_each_prefill_with_its_bootstrap_port_and_each_decode_among_the_roles_own_flags():
    argv = R.router_argv("127.0.0.1", 30080, "round_robin", [], extra={"health_check_interval_secs": 5},
                         prefill=PREFILL + [{"url": "http://10.0.3.102:30000/", "bootstrap_port": "8999"}],
                         decode=DECODE)
    assert argv == ["--health-check-interval-secs", "5", "--host", "127.0.0.1", "--port", "30080", "--policy",
                    "round_robin", "--pd-disaggregation", "--prefill", "http://10.0.3.100:30000", "8998", "--prefill",
                    "http://10.0.3.102:30000", "8999", "--decode", "http://10.0.3.101:30000"]
    assert "--pd-disaggregation" not in R.router_argv("127.0.0.1", 30080, "round_robin", DECODE)


def test_pd_problems_name_each_setting_and_the_fix():
    assert R.pd_problems(None, None) == [] and R.pd_problems(PREFILL, DECODE, prefix="sglang_router_") == []
    one = R.pd_problems(PREFILL, [], prefix="sglang_router_")
    assert one == ["sglang_router_pd_prefill (1) and sglang_router_pd_decode (0): PD mode needs at least one of each - "
                   "a request is prefilled on one server and decoded on another"]
    bad = R.pd_problems([{"url": "10.0.3.100:30000", "bootstrap_port": 70000}, "http://x:1"], ["ftp://y"])
    assert any(p.startswith("pd_prefill[0]: '10.0.3.100:30000': expected http://<host>:<port>") for p in bad), bad
    assert any(p.startswith("pd_prefill[0].bootstrap_port=70000: a TCP port") for p in bad), bad
    assert any(p.startswith("pd_prefill[1]: a mapping {url, bootstrap_port}") for p in bad), bad
    assert any(p.startswith("pd_decode[0]: 'ftp://y'") for p in bad), bad
    twice = R.pd_problems(PREFILL, ["http://10.0.3.100:30000/"])
    assert twice == ["pd_prefill/pd_decode: http://10.0.3.100:30000 named twice - a server is either prefill or decode"]
    mixed = R.pd_problems(PREFILL, DECODE, ["http://10.0.3.104:30000"], "sglang_router_")
    assert mixed and "give plain replicas a router of their own" in mixed[0]
