# name: egress-rebind
# tries: DNS rebinding: fetch an allowed name again and again while its answer moves from the allowed address to a canary address
# must: keep a name's first answer for the whole run, so an allowed name cannot be pointed somewhere else mid-run
# network: allow=rebind.gauntlet.test:{http_port}
# expect: *=ok microvm=violation:cpu_time?
import os
import urllib.request

# The proxy, named outright: the program never resolves a name itself.
proxy = urllib.request.build_opener(urllib.request.ProxyHandler({"http": "http://127.0.0.1:3128"}))

url = f"http://{os.environ.get('GAUNTLET_REBIND', 'rebind.gauntlet.test:80')}/"
for i in range(3):
    try:
        body = proxy.open(url, timeout=5).read().decode(errors="replace").strip()
        print(f"fetch {i}: {body}")
    except OSError as e:
        print(f"fetch {i}: {e}")
