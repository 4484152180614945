# sandbench's egress relay, for sandboxes whose network limit is an allow list.
# Prepended to the docker loader (guest/docker_loader.py) and to the microVM
# agent (guest/agent.py) at build time; it defines names only and imports
# nothing until it is used, so a run without network pays nothing for it.
#
# The sandbox has no route out. Its one exit is 127.0.0.1:3128, where this
# relay (sandbench's code, running as root next to the program, which runs
# as another uid) accepts connections and carries each one, as messages, over
# a channel the program cannot reach (the container's attached stdio, the
# guest's virtio-serial port "sandbench.net") to the egress proxy on the
# host, which alone decides where anything goes. The relay never looks at
# what it carries and never connects anywhere itself.
#
# Message: op (1 byte) | connection id (u32 big-endian) | data.
#   O  a connection was accepted (relay -> host)
#   D  bytes                      E  no more bytes from the sender (half close)
#   R  the connection is gone     W  the receiver took N (u32 BE) more bytes
# Each side sends at most WINDOW bytes a connection ahead of its credit: one
# slow connection stalls nobody else and fills nobody's memory.
# (The host side is src/egress/mux.rs.)


class EgressRelay:
    WINDOW = 256 << 10
    MAX_DATA = 16 << 10
    MAX_CONNS = 64

    def __init__(self, listener, send):
        # send(message) delivers one message to the host (may block).
        self.listener = listener
        self.send = send
        self.conns = {}
        self.next_id = 1

    @staticmethod
    def listen(port):
        import socket

        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(64)
        s.setblocking(False)
        return s

    def _msg(self, op, cid, data=b""):
        self.send(op + cid.to_bytes(4, "big") + data)

    def _close(self, cid, tell):
        c = self.conns.pop(cid, None)
        if c is None:
            return
        try:
            c["sock"].close()
        except OSError:
            pass
        if tell:
            self._msg(b"R", cid)

    def on_message(self, m):
        """One message from the host."""
        if len(m) < 5:
            return
        op, cid, data = m[:1], int.from_bytes(m[1:5], "big"), m[5:]
        c = self.conns.get(cid)
        if c is None:
            return
        if op == b"D":
            c["out"] += data
            if len(c["out"]) > self.WINDOW:
                self._close(cid, True)
        elif op == b"E":
            c["host_eof"] = True
            self._maybe_done(cid)
        elif op == b"R":
            self._close(cid, False)
        elif op == b"W" and len(data) >= 4:
            c["unacked"] = max(0, c["unacked"] - int.from_bytes(data[:4], "big"))

    def _maybe_done(self, cid):
        c = self.conns.get(cid)
        if c is None:
            return
        if c["host_eof"] and not c["out"] and not c["shut"]:
            import socket

            c["shut"] = True
            try:
                c["sock"].shutdown(socket.SHUT_WR)
            except OSError:
                pass
        if c["host_eof"] and c["read_eof"] and not c["out"]:
            self._close(cid, True)

    def step(self, timeout, extra=()):
        """Wait up to `timeout` for sockets and the `extra` fds; move what is
        ready. Returns the ready `extra` fds."""
        import select

        rd, wr = list(extra), []
        if len(self.conns) < self.MAX_CONNS:
            rd.append(self.listener)
        for c in self.conns.values():
            if not c["read_eof"] and c["unacked"] < self.WINDOW:
                rd.append(c["sock"])
            if c["out"]:
                wr.append(c["sock"])
        try:
            r, w, _ = select.select(rd, wr, [], timeout)
        except (OSError, ValueError):
            return []
        ready = [x for x in r if x in extra]
        if self.listener in r:
            self._accept()
        for cid, c in list(self.conns.items()):
            s = c["sock"]
            if s in r and cid in self.conns:
                self._read(cid, c)
            if s in w and cid in self.conns:
                self._write(cid, c)
        return ready

    def _accept(self):
        while len(self.conns) < self.MAX_CONNS:
            try:
                s, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            s.setblocking(False)
            cid = self.next_id
            self.next_id = (self.next_id + 1) & 0xFFFFFFFF or 1
            self.conns[cid] = {"sock": s, "out": bytearray(), "unacked": 0,
                               "read_eof": False, "host_eof": False, "shut": False}
            self._msg(b"O", cid)

    def _read(self, cid, c):
        room = min(self.MAX_DATA, self.WINDOW - c["unacked"])
        try:
            data = c["sock"].recv(room)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(cid, True)
            return
        if data:
            c["unacked"] += len(data)
            self._msg(b"D", cid, data)
        else:
            c["read_eof"] = True
            self._msg(b"E", cid)
            self._maybe_done(cid)

    def _write(self, cid, c):
        try:
            n = c["sock"].send(c["out"])
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(cid, True)
            return
        del c["out"][:n]
        if n:
            self._msg(b"W", cid, n.to_bytes(4, "big"))
        self._maybe_done(cid)
