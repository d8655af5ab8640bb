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
