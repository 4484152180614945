# name: egress-raw
# tries: open raw and packet sockets (AF_PACKET, raw IPv4 and IPv6) to send packets past any proxy
# must: refuse raw and packet sockets (no CAP_NET_RAW anywhere in the sandbox)
# network: allow=allowed.gauntlet.test:{http_port}
# escaped-if: "RAW-OPEN"
# expect: *=ok
import socket

kinds = [
    ("AF_PACKET raw", getattr(socket, "AF_PACKET", 17), socket.SOCK_RAW, 0x0300),
    ("AF_PACKET dgram", getattr(socket, "AF_PACKET", 17), socket.SOCK_DGRAM, 0x0300),
    ("IPv4 raw", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW),
    ("IPv4 raw ICMP", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
    ("IPv6 raw", socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW),
]
for name, family, kind, proto in kinds:
    try:
        s = socket.socket(family, kind, proto)
    except OSError as e:
        print(f"{name}: refused ({e})")
        continue
    # Opened: that alone is the breach; nothing is sent.
    print(f"RAW-OPEN {name}")
    s.close()
