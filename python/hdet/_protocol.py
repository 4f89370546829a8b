"""Framing of the hdet worker protocol (the Go side is internal/bridge/protocol.go).

Every frame, both directions, little endian::

    b"HDET" | uint32 JSON length | uint32 binary length | JSON | binary

The JSON part is a small message with a "type"; the binary part carries
float64 arrays (losses may be NaN, which JSON cannot hold).
"""

import json
import socket
import struct
import sys
from array import array

PROTOCOL_VERSION = 4
MAGIC = b"HDET"
_HEADER = struct.Struct("<4sII")
_MAX_JSON = 64 << 20
_MAX_BINARY = 64 << 20


class ProtocolError(RuntimeError):
    """A malformed frame or an unexpected message from hdet."""


def pack_float64s(values):
    a = array("d", values)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def unpack_float64s(data):
    a = array("d")
    a.frombytes(data)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tolist()


class Connection:
    """A framed connection to the hdet rank over a Unix socket."""

    def __init__(self, sock):
        self._sock = sock

    @classmethod
    def connect(cls, path):
        """path: a socket file, or "@name" in Linux's abstract namespace."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect("\0" + path[1:] if path.startswith("@") else path)
        return cls(sock)

    def send(self, msg, payload=b""):
        body = json.dumps(msg, allow_nan=False, separators=(",", ":")).encode()
        self._sock.sendall(_HEADER.pack(MAGIC, len(body), len(payload)) + body + payload)

    def recv(self):
        """Returns (message dict, binary payload)."""
        magic, nj, nb = _HEADER.unpack(self._recv_exact(_HEADER.size))
        if magic != MAGIC:
            raise ProtocolError("hdet: frame does not start with %r (got %r)" % (MAGIC, magic))
        if nj == 0 or nj > _MAX_JSON or nb > _MAX_BINARY:
            raise ProtocolError("hdet: frame sizes out of range (json %d, binary %d)" % (nj, nb))
        body = self._recv_exact(nj + nb)
        try:
            msg = json.loads(bytes(body[:nj]))
        except ValueError as e:
            raise ProtocolError("hdet: undecodable message: %s" % e) from None
        if not isinstance(msg, dict) or not msg.get("type"):
            raise ProtocolError("hdet: message without a type")
        return msg, bytes(body[nj:])

    def _recv_exact(self, n):
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:])
            if k == 0:
                raise ConnectionError("hdet: the hdet process closed the connection")
            got += k
        return buf

    def close(self):
        self._sock.close()
