# A client that behaves like OpenSLP's libslp (2.0) as seen from the wire,
# for tests/mslp_hardening_tap.rs: it asks over UDP and moves to TCP only
# when a UDP reply is longer than its 1,400-octet MTU (net.slp.MTU); it
# ignores the OVERFLOW flag. Also SAs registering many services, a reflection
# probe, an SLPv1 request and TCP abuse. Prints one JSON object.
import json, socket, struct, sys, time

MDA = (sys.argv[1], 427)
MTU = 1400


def hdr(function, body, xid, flags=0):
    lang = b"en"
    length = 14 + len(lang) + len(body)
    return struct.pack("!BB", 2, function) + length.to_bytes(3, "big") + struct.pack(
        "!H", flags) + (0).to_bytes(3, "big") + struct.pack("!HH", xid, len(lang)) + lang + body


def s16(b):
    return struct.pack("!H", len(b)) + b


def srv_reg(url, stype, xid):
    entry = b"\0" + struct.pack("!H", 600) + s16(url) + b"\0"
    body = entry + s16(stype) + s16(b"DEFAULT") + s16(b"") + b"\0"
    return hdr(3, body, xid, 0x4000)


def srv_rqst(stype, xid):
    return hdr(1, s16(b"") + s16(stype) + s16(b"DEFAULT") + s16(b"") + s16(b""), xid)


def srv_type_rqst(xid):
    # naming authority 0xffff: all
    return hdr(9, s16(b"") + struct.pack("!H", 0xFFFF) + s16(b"DEFAULT"), xid)


def udp_ask(msg, xid):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(3)
    for _ in range(3):
        u.sendto(msg, MDA)
        try:
            while True:
                d, _ = u.recvfrom(65535)
                if struct.unpack("!H", d[10:12])[0] == xid:
                    return d
        except socket.timeout:
            continue
    raise SystemExit("no UDP reply")


def tcp_ask(msg):
    t = socket.create_connection(MDA, timeout=5)
    t.sendall(msg)
    buf = b""
    while len(buf) < 5 or len(buf) < int.from_bytes(buf[2:5], "big"):
        c = t.recv(65536)
        if not c:
            break
        buf += c
    t.close()
    return buf


def libslp_ask(msg, xid):
    """libslp: UDP; a reply longer than the MTU is asked again over TCP."""
    d = udp_ask(msg, xid)
    if int.from_bytes(d[2:5], "big") > MTU:
        return tcp_ask(msg), True
    return d, False


def body(d):
    return d[14 + struct.unpack("!H", d[12:14])[0]:]


def urls(d):
    b = body(d)
    n = struct.unpack("!H", b[2:4])[0]
    out, i = [], 4
    for _ in range(n):
        ul = struct.unpack("!H", b[i + 3:i + 5])[0]
        out.append(b[i + 5:i + 5 + ul].decode())
        i += 5 + ul
        auths = b[i]
        i += 1
        for _ in range(auths):
            i += struct.unpack("!H", b[i + 2:i + 4])[0]
    return out


def types(d):
    b = body(d)
    n = struct.unpack("!H", b[2:4])[0]
    return [t for t in b[4:4 + n].decode().split(",") if t]


def main():
    out = {}
    xid = 100
    n = int(sys.argv[2])
    # SAs: n printers and three types.
    for i in range(n):
        xid += 1
        url = f"service:printer://10.0.0.10/queue-number-{i:04}".encode()
        r = udp_ask(srv_reg(url, b"service:printer", xid), xid)
        assert struct.unpack("!H", body(r)[:2])[0] == 0, r
    for t in (b"service:scanner", b"service:fax"):
        xid += 1
        r = udp_ask(srv_reg(t + b"://10.0.0.10/x", t, xid), xid)
        assert struct.unpack("!H", body(r)[:2])[0] == 0, r
    # findsrvs and findsrvtypes as libslp does them.
    xid += 1
    d, moved = libslp_ask(srv_rqst(b"service:printer", xid), xid)
    out["findsrvs"] = len(urls(d))
    out["findsrvs_tcp"] = moved
    xid += 1
    d, moved = libslp_ask(srv_type_rqst(xid), xid)
    out["findsrvtypes"] = sorted(types(d))
    # Reflection probe: one source, many small requests; what came back.
    req_len, got, replies = 0, 0, 0
    for _ in range(int(sys.argv[3])):
        xid += 1
        q = srv_rqst(b"service:printer", xid)
        req_len = len(q)
        got += len(udp_ask(q, xid))
        replies += 1
    out["probe_request_len"] = req_len
    out["probe_replies"] = replies
    out["probe_reply_bytes"] = got
    # SLPv1 SrvRqst (RFC 2165): version 1, length 27, "en", UTF-8, XID 0x1234.
    v1 = bytes([1, 1, 0, 27, 0, 0]) + b"en" + bytes([0, 0x6A, 0x12, 0x34, 0, 0, 0, 11]) + b"service:x//"
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(3)
    u.sendto(v1, MDA)
    d, _ = u.recvfrom(65535)
    out["v1_reply"] = list(d)
    # TCP: frames announcing 0 and 5 octets, half a message then FIN.
    for head in (bytes([2, 1, 0, 0, 0]), bytes([2, 1, 0, 0, 5])):
        t = socket.create_connection(MDA, timeout=5)
        t.sendall(head + bytes(11))
        try:
            t.recv(10)
        except OSError:
            pass
        t.close()
    t = socket.create_connection(MDA, timeout=5)
    q = srv_rqst(b"service:printer", 7)
    t.sendall(q[: len(q) // 2])
    t.shutdown(socket.SHUT_WR)
    try:
        t.recv(10)
    except OSError:
        pass
    t.close()
    # A frame of 60,000 octets announced, then one octet a second: how
    # long the MDA keeps the connection.
    t = socket.create_connection(MDA, timeout=30)
    t.sendall(bytes([2, 1, 0, 0xEA, 0x60]) + bytes(11))
    start = time.monotonic()
    try:
        for _ in range(40):
            time.sleep(1)
            t.sendall(b"\0")
    except OSError:
        pass
    out["trickle_held_s"] = round(time.monotonic() - start, 1)
    t.close()
    # Connections beyond the limit: opened at once, the refused ones fail.
    held, refused = [], 0
    for _ in range(int(sys.argv[4])):
        try:
            held.append(socket.create_connection(MDA, timeout=2))
        except OSError:
            refused += 1
    out["conns_refused_seen"] = refused
    for c in held:
        c.close()
    print(json.dumps(out))


main()
