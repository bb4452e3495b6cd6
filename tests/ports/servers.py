"""Servers a session runs for the ports tests, standard library only.

servers.py echo PORT   -> every byte sent comes back (a raw TCP echo)
servers.py ws PORT     -> a WebSocket echo (RFC 6455 framing, by hand),
                          plus plain HTTP: GET /hello answers its Host header
"""
import base64
import hashlib
import socket
import struct
import sys
import threading

MAGIC = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def serve(port, handle):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def echo(conn):
    with conn:
        while True:
            data = conn.recv(65536)
            if not data:
                return
            conn.sendall(data)


def read_exact(conn, n):
    data = b""
    while len(data) < n:
        more = conn.recv(n - len(data))
        if not more:
            raise EOFError
        data += more
    return data


def frame(opcode, payload):
    head = bytes([0x80 | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([n])
    elif n < 65536:
        head += bytes([126]) + struct.pack(">H", n)
    else:
        head += bytes([127]) + struct.pack(">Q", n)
    return head + payload


def websocket(conn):
    with conn:
        request = b""
        while b"\r\n\r\n" not in request:
            more = conn.recv(4096)
            if not more:
                return
            request += more
        head = request.split(b"\r\n\r\n", 1)[0].decode("latin-1")
        lines = head.split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("upgrade", "").lower() != "websocket":
            body = ("host=" + headers.get("host", "") + ";token=" +
                    headers.get("e2b-traffic-access-token", "-")).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                         b"Content-Length: " + str(len(body)).encode() +
                         b"\r\nConnection: close\r\n\r\n" + body)
            return
        accept = base64.b64encode(
            hashlib.sha1(headers["sec-websocket-key"].encode() + MAGIC).digest())
        conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                     b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n")
        while True:
            try:
                b0, b1 = read_exact(conn, 2)
            except EOFError:
                return
            opcode = b0 & 0x0F
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", read_exact(conn, 2))[0]
            elif n == 127:
                n = struct.unpack(">Q", read_exact(conn, 8))[0]
            mask = read_exact(conn, 4) if b1 & 0x80 else b"\0\0\0\0"
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(read_exact(conn, n)))
            if opcode == 8:
                conn.sendall(frame(8, payload[:2]))
                return
            if opcode == 9:
                conn.sendall(frame(10, payload))
            elif opcode in (1, 2):
                conn.sendall(frame(opcode, payload))


kind, port = sys.argv[1], int(sys.argv[2])
serve(port, {"echo": echo, "ws": websocket}[kind])
