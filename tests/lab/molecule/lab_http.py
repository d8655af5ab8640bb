"""What the lab's verifier tests send to SGLang inside a CT (shared by the deploy and multinode scenarios)."""

KEY = "lab-api-key-7b2e4f"        # inventory/lab/group_vars/sglang_containers.yml
# run inside the CT as `python3 -c PROBE <path> [<key>]`: the HTTP status of GET http://127.0.0.1:30000<path>
PROBE = ("import sys, urllib.request, urllib.error\n"
         "h = {'Authorization': 'Bearer ' + sys.argv[2]} if len(sys.argv) > 2 else {}\n"
         "try:\n"
         "    print(urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:30000' + sys.argv[1], headers=h),"
         " timeout=10).status)\n"
         "except urllib.error.HTTPError as e:\n"
         "    print(e.code)\n")
# run inside the router's CT as `python3 -c ROUTER <path> [<key>]`: "<status> <body>" of GET
# http://127.0.0.1:30080<path> (the router's port), or the status alone when it is an error
ROUTER = ("import json, sys, urllib.request, urllib.error\n"
          "h = {'Authorization': 'Bearer ' + sys.argv[2]} if len(sys.argv) > 2 else {}\n"
          "try:\n"
          "    r = urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:30080' + sys.argv[1], headers=h), timeout=10)\n"
          "    print(r.status, r.read().decode())\n"
          "except urllib.error.HTTPError as e:\n"
          "    print(e.code)\n")
# run inside the router's CT as `python3 -c ROUTER_SEND <key> <n>`: n requests, one after the other, to the router's
# /generate with distinct prompts (different from their first character: no shared prefix for cache_aware to follow);
# prints how many were answered 200
ROUTER_SEND = ("import hashlib, json, sys, urllib.request\nok = 0\nfor i in range(int(sys.argv[2])):\n"
               "    text = hashlib.sha256(str(i).encode()).hexdigest() + ' tell me something'\n"
               "    body = json.dumps({'text': text, 'sampling_params': {'max_new_tokens': 4}})\n"
               "    r = urllib.request.Request('http://127.0.0.1:30080/generate', data=body.encode(), headers={"
               "'Authorization': 'Bearer ' + sys.argv[1], 'Content-Type': 'application/json'})\n"
               "    ok += urllib.request.urlopen(r, timeout=30).status == 200\nprint(ok)\n")
