# name: socket-families
# tries: open a socket of every address family the kernel knows (vsock, packet, every netlink protocol, bluetooth, can, xdp, alg, tipc, rds, ...) and of socketpair, and bind a vsock port where one opens
# must: refuse every family the sandbox does not need: unix, inet, inet6 and netlink's route protocol at most
# expect: *=ok bwrap=escaped nsjail=escaped srt=escaped
# escaped-if: "OPENED"
# A "no network" sandbox still shares the host kernel's socket families:
# AF_VSOCK in particular has one port space for the whole host, so a program
# that binds a vsock port takes it from the host (issue 21, item 4). The
# process tier, the containers' loader filter and the microVM agent's filter
# allow unix, inet, inet6 (the sandbox's own loopback) and netlink route
# only, and answer EAFNOSUPPORT for the rest. Each opened socket of another
# family is printed as OPENED (a breach); the allowed ones as "allowed".
# Peers, measured here: bwrap, nsjail and srt let vsock and netlink sockets
# through (declared: the gauntlet shows them ESCAPED); firejail's default
# --protocol filter refuses them.
import errno
import socket

FAMILIES = {
    3: "ax25", 4: "ipx", 5: "appletalk", 6: "netrom", 7: "bridge", 8: "atmpvc", 9: "x25",
    11: "rose", 12: "decnet", 13: "netbeui", 14: "security", 15: "key", 17: "packet", 18: "ash",
    19: "econet", 20: "atmsvc", 21: "rds", 22: "sna", 23: "irda", 24: "pppox", 25: "wanpipe",
    26: "llc", 27: "ib", 28: "mpls", 29: "can", 30: "tipc", 31: "bluetooth", 32: "iucv",
    33: "rxrpc", 34: "isdn", 35: "phonet", 36: "ieee802154", 37: "caif", 38: "alg", 39: "nfc",
    40: "vsock", 41: "kcm", 42: "qipcrtr", 43: "smc", 44: "xdp", 45: "mctp",
}
NETLINK = {
    0: "route", 2: "usersock", 4: "sock_diag", 5: "nflog", 6: "xfrm", 7: "selinux", 8: "iscsi",
    9: "audit", 10: "fib_lookup", 11: "connector", 12: "netfilter", 13: "ip6_fw", 14: "dnrtmsg",
    15: "kobject_uevent", 16: "generic", 18: "scsitransport", 19: "ecryptfs", 20: "rdma",
    21: "crypto", 22: "smc",
}
TYPES = [socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW, socket.SOCK_SEQPACKET]
# Protocols some families need to open at all (0 is tried for every family).
PROTOCOLS = {29: [1, 2], 31: [0, 1, 3], 17: [0x0300], 5: [0], 38: [0], 21: [0], 30: [0]}


def try_open(fam, typ, proto):
    try:
        s = socket.socket(fam, typ, proto)
    except OSError as e:
        return None, errno.errorcode.get(e.errno, str(e.errno))
    return s, None


opened = []
refusals = {}
for fam, name in sorted(FAMILIES.items()):
    for typ in TYPES:
        for proto in PROTOCOLS.get(fam, [0]):
            s, why = try_open(fam, typ, proto)
            if s is None:
                refusals.setdefault(why, []).append(name)
                continue
            what = f"{name}/{typ}/{proto}"
            if fam == 40:
                try:
                    s.bind((socket.VMADDR_CID_ANY, 0x5B0B))
                    what += f" and bound vsock port {s.getsockname()[1]}"
                except OSError as e:
                    what += f" (bind: {e.strerror})"
            s.close()
            opened.append(what)
for proto, name in sorted(NETLINK.items()):
    s, why = try_open(socket.AF_NETLINK, socket.SOCK_RAW, proto)
    if s is None:
        refusals.setdefault(why, []).append(f"netlink-{name}")
    elif proto == 0:
        s.close()
        print("allowed: netlink route")
    else:
        s.close()
        opened.append(f"netlink {name}")
for fam, name in [(socket.AF_INET, "inet"), (socket.AF_INET6, "inet6"), (socket.AF_UNIX, "unix")]:
    s, why = try_open(fam, socket.SOCK_STREAM, 0)
    print(f"allowed: {name}" if s else f"refused: {name} ({why})")
    if s:
        s.close()
for fam, name in [(socket.AF_UNIX, "unix"), (30, "tipc"), (40, "vsock"), (16, "netlink")]:
    for typ in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET):
        try:
            a, b = socket.socketpair(fam, typ)
        except OSError:
            continue
        a.close()
        b.close()
        if fam == socket.AF_UNIX:
            print("allowed: socketpair unix")
        else:
            opened.append(f"socketpair {name}/{typ}")
        break
for what in opened:
    print("OPENED", what)
for why, names in sorted(refusals.items()):
    print(f"refused with {why}: {len(names)} tries ({', '.join(sorted(set(names))[:12])}...)")
print(f"{len(opened)} sockets of families the sandbox does not need opened")
