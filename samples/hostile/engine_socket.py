# name: engine-socket
# tries: talk to the container engine's socket (Docker, containerd) to start a privileged container
# must: not expose any engine socket inside the sandbox
# expect: *=ok
# escaped-if: "ApiVersion"
import socket

for path in ["/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock"]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(path)
        s.sendall(b"GET /version HTTP/1.0\r\nHost: docker\r\n\r\n")
        print(f"{path}: {s.recv(4096).decode(errors='replace')}")
    except OSError as e:
        print(f"{path}: {e.strerror or e}")
    finally:
        s.close()
