# sandbench's file tool (write_file, read_file, list_files), run as one call
# in a session's own sandbox: as the sandbox's uid, under all its isolation,
# so that no privileged code ever resolves a path in the program's files.
# sandbench puts one line above this text: _SB = {...} (the operation, a
# nonce, the path as hex-encoded components relative to the working
# directory, and the operation's arguments; only hex, base64 and numbers).
#
# Paths are walked one component at a time from the working directory with
# O_NOFOLLOW and O_DIRECTORY, never crossing a mount: a symbolic link
# anywhere on the way, a component that is not a directory, or a file that
# is not a regular file is refused, and says which component it was.
#
# What comes out is one line per fact, each starting with the nonce, and one
# last line, OK or ERR: ASCII only (names as hex), parsed strictly by
# `session_files.rs`. Nothing here imports from outside the interpreter's
# own library (a program may leave json.py or binascii.py in the working
# directory): only built-in and frozen modules.
import os
import sys

sys.path[:] = [p for p in sys.path if p.startswith(sys.base_prefix + "/")]
import binascii  # noqa: E402
import errno  # noqa: E402
import _signal  # noqa: E402

# A write past the file size limit is an error to report, not a kill.
_signal.signal(_signal.SIGXFSZ, _signal.SIG_IGN)

_NONCE = _SB["nonce"]  # noqa: F821
_BUDGET = [_SB["budget"]]  # noqa: F821
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# This program's own file, when the tier put it in the working directory:
# not one of the session's files (not listed, removed at the end).
_ME = globals().get("__file__") or ""
_ME = os.fsencode(os.path.basename(_ME)) if _ME and os.path.dirname(os.path.abspath(_ME)) == os.getcwd() else None


class Refused(Exception):
    pass


def emit(*fields):
    line = (" ".join([_NONCE] + [str(f) for f in fields]) + "\n").encode("ascii")
    _BUDGET[0] -= len(line)
    view = memoryview(line)
    while view:
        view = view[os.write(1, view):]


def kind_of(mode):
    for test, k in (
        (0o100000, "f"),
        (0o040000, "d"),
        (0o120000, "l"),
        (0o010000, "p"),
        (0o140000, "s"),
        (0o020000, "c"),
        (0o060000, "b"),
    ):
        if mode & 0o170000 == test:
            return k
    return "?"


def lkind(dirfd, name):
    try:
        return kind_of(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return None


def refuse(why, at):
    raise Refused(why, at)


def open_dir(base, name, at, dev, create):
    try:
        fd = os.open(name, _DIR, dir_fd=base)
    except FileNotFoundError:
        if not create:
            refuse("not_found", at)
        try:
            os.mkdir(name, 0o755, dir_fd=base)
        except FileExistsError:
            pass
        except OSError as e:
            space(e, at)
            raise
        return open_dir(base, name, at, dev, False)
    except OSError as e:
        k = lkind(base, name)
        if k == "l":
            refuse("symlink", at)
        if k is not None and k != "d":
            refuse("not_dir", at)
        if e.errno == errno.EACCES:
            refuse("permission", at)
        raise
    # O_NOFOLLOW is not enough everywhere (gVisor 20221219 follows a link
    # opened with O_DIRECTORY): what was opened must be the name's own inode.
    st = os.fstat(fd)
    try:
        lst = os.stat(name, dir_fd=base, follow_symlinks=False)
    except OSError:
        lst = None
    if lst is None or kind_of(lst.st_mode) != "d" or (lst.st_dev, lst.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        refuse("symlink" if lst is not None and kind_of(lst.st_mode) == "l" else "not_dir", at)
    if st.st_dev != dev:
        os.close(fd)
        refuse("mount", at)
    return fd


def space(e, at):
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        refuse("no_space", at)
    if e.errno == errno.EFBIG:
        refuse("file_size", at)
    if e.errno == errno.EACCES or e.errno == errno.EPERM:
        refuse("permission", at)


def walk(names, create):
    """The directory holding the last of `names` (all of them when
    `names` is a directory to open), and its device."""
    fd = os.open(".", _DIR)
    dev = os.fstat(fd).st_dev
    for i, name in enumerate(names):
        nfd = open_dir(fd, name, i, dev, create)
        os.close(fd)
        fd = nfd
    return fd, dev


def names():
    return [binascii.unhexlify(h) for h in _SB["parts"]]  # noqa: F821


def op_write():
    parts = names()
    last = len(parts) - 1
    d, _ = walk(parts[:-1], True)
    name = parts[-1]
    try:
        st = os.stat(name, dir_fd=d, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    mode = _SB["mode"]  # noqa: F821
    if st is not None:
        k = kind_of(st.st_mode)
        if k == "l":
            refuse("symlink", last)
        if k == "d":
            refuse("is_dir", last)
        if k != "f":
            refuse("not_regular:" + k, last)
        if mode is None:
            mode = st.st_mode & 0o777
    if mode is None:
        mode = 0o644
    data = binascii.a2b_base64(_SB["data"])  # noqa: F821
    tmp = b".sandbench-write-" + _NONCE.encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=d)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=d, dst_dir_fd=d)
    except OSError as e:
        try:
            os.unlink(tmp, dir_fd=d)
        except OSError:
            pass
        space(e, last)
        raise
    emit("OK", "write", len(data), "%o" % mode)


def op_read():
    parts = names()
    last = len(parts) - 1
    d, dev = walk(parts[:-1], False)
    name = parts[-1]
    k = lkind(d, name)
    if k is None:
        refuse("not_found", last)
    if k == "l":
        refuse("symlink", last)
    if k == "d":
        refuse("is_dir", last)
    if k != "f":
        refuse("not_regular:" + k, last)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=d)
    except OSError as e:
        space(e, last)
        raise
    st = os.fstat(fd)
    if kind_of(st.st_mode) != "f":
        refuse("not_regular:" + kind_of(st.st_mode), last)
    lst = os.stat(name, dir_fd=d, follow_symlinks=False)
    if (lst.st_dev, lst.st_ino) != (st.st_dev, st.st_ino):
        refuse("symlink" if kind_of(lst.st_mode) == "l" else "not_regular:?", last)
    if st.st_dev != dev:
        refuse("mount", last)
    size = st.st_size
    off = min(_SB["offset"], size)  # noqa: F821
    want = min(_SB["length"], size - off)  # noqa: F821
    os.lseek(fd, off, 0)
    chunks = []
    got = 0
    while got < want:
        b = os.read(fd, min(want - got, 1 << 20))
        if not b:
            break
        chunks.append(b)
        got += len(b)
    data = b"".join(chunks)
    b64 = binascii.b2a_base64(data, newline=False).decode("ascii") or "-"
    emit("OK", "read", size, off, len(data), b64)


def op_list():
    parts = names()
    root, dev = walk(parts, False)
    depth = _SB["depth"]  # noqa: F821
    most = _SB["max_entries"]  # noqa: F821
    count = 0
    cut = False
    stack = [(root, b"", 1)]
    while stack and not cut:
        fd, prefix, level = stack.pop()
        try:
            entries = sorted(os.fsencode(n) for n in os.listdir(fd))
        except OSError:
            entries = []
        subdirs = []
        for n in entries:
            if not prefix and not parts and n == _ME:
                continue
            if count >= most or _BUDGET[0] < 2048:
                cut = True
                break
            try:
                st = os.stat(n, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            k = kind_of(st.st_mode)
            rel = prefix + n
            target = "-"
            if k == "l":
                try:
                    target = binascii.hexlify(os.fsencode(os.readlink(n, dir_fd=fd))[:4096]).decode()
                except OSError:
                    pass
            other = st.st_dev != dev
            emit("E", k, st.st_size, "%o" % (st.st_mode & 0o7777), int(st.st_mtime), binascii.hexlify(rel).decode(), target, "x" if other else "-")
            count += 1
            if k == "d" and level < depth and not other:
                subdirs.append((n, rel))
        for n, rel in reversed(subdirs):
            try:
                sub = os.open(n, _DIR, dir_fd=fd)
            except OSError:
                continue
            stack.append((sub, rel + b"/", level + 1))
        os.close(fd)
    emit("OK", "list", count, "cut" if cut else "all")


try:
    {"write": op_write, "read": op_read, "list": op_list}[_SB["op"]]()  # noqa: F821
except Refused as r:
    emit("ERR", r.args[0], r.args[1])
except OSError as e:
    emit("ERR", "os:" + errno.errorcode.get(e.errno, str(e.errno)), -1)
finally:
    # This program's own file, when the tier left it in the working
    # directory, is not one of the session's files.
    try:
        if _ME:
            fd = os.open(_ME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                head = os.read(fd, 64)
            finally:
                os.close(fd)
            if head.startswith(b"_SB = {'op': "):
                os.unlink(_ME)
    except OSError:
        pass
