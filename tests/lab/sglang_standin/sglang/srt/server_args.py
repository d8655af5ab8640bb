"""The stand-in's ``sglang.srt.server_args``: ``ServerArgs.add_cli_args(parser)`` as SGLang 0.5.9 has it
(``python/sglang/srt/server_args.py``), for the flags the lab's launches use - the one parser both the stand-in's
launch_server and the sglang_server module's argument check (``prepare_server_args``'s ``argparse.ArgumentParser``
with ``ServerArgs.add_cli_args``) ask, as with the real package. Names, aliases, types and choices are 0.5.9's; argparse's
own ``allow_abbrev`` gives the prefixes (``--tp``) 0.5.9 accepts. It knows fewer flags than 0.5.9 (a flag the lab does
not use is refused here, never accepted where 0.5.9 would refuse it): stricter, not kinder.
"""
import argparse


class ServerArgs(object):
    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser):
        p = parser
        p.add_argument("--model-path", "--model", required=True)
        p.add_argument("--host", default="127.0.0.1")
        p.add_argument("--port", type=int, default=30000)
        p.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1)
        p.add_argument("--pp-size", "--pipeline-parallel-size", type=int, default=1)
        p.add_argument("--nnodes", type=int, default=1)
        p.add_argument("--node-rank", type=int, default=0)
        p.add_argument("--dist-init-addr")
        p.add_argument("--dist-timeout", type=int)
        p.add_argument("--mem-fraction-static", type=float)
        p.add_argument("--max-total-tokens", type=int)
        p.add_argument("--page-size", type=int)
        p.add_argument("--device", type=str)
        p.add_argument("--context-length", type=int)
        p.add_argument("--max-running-requests", type=int)
        p.add_argument("--speculative-algorithm", choices=["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"])
        p.add_argument("--speculative-num-steps", type=int)
        p.add_argument("--speculative-eagle-topk", type=int)
        p.add_argument("--speculative-num-draft-tokens", type=int)
        p.add_argument("--mamba-ssm-dtype", choices=["float32", "bfloat16", "float16"])
        p.add_argument("--kv-cache-dtype", default="auto",
                       choices=["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"])
        p.add_argument("--served-model-name")
        p.add_argument("--api-key")
        p.add_argument("--log-level", default="info")
        p.add_argument("--trust-remote-code", action="store_true")
        p.add_argument("--enable-torch-compile", action="store_true")
        p.add_argument("--disable-cuda-graph", action="store_true")
        p.add_argument("--cuda-graph-max-bs", type=int)
        p.add_argument("--chunked-prefill-size", type=int)
        p.add_argument("--attention-backend")
        p.add_argument("--skip-server-warmup", action="store_true")
        p.add_argument("--enable-metrics", action="store_true")
        p.add_argument("--config")
