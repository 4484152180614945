# name: egress-allowed
# tries: fetch a page from the one host its network limit allows, through the egress proxy at 127.0.0.1:3128
# must: get the page where the tier has egress (and run, with no network, where it has none)
# network: allow=allowed.gauntlet.test:{http_port}
# expect: *=ok
import os
import urllib.request

# The proxy, named outright: the program never resolves a name itself.
proxy = urllib.request.build_opener(urllib.request.ProxyHandler({"http": "http://127.0.0.1:3128"}))

url = f"http://{os.environ.get('GAUNTLET_HTTP', 'allowed.gauntlet.test:80')}/"
try:
    print(proxy.open(url, timeout=5).read().decode(errors="replace").strip())
except OSError as e:
    print(f"no network here: {e}")
