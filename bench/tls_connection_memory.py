#!/usr/bin/env python3
"""What TLS connections cost a limiterd node: opens N connections of one kind to its data port,
keeps them open, and prints the growth of the node's RSS (from its admin port's /metrics).

  bench/tls_connection_memory.py HOST:PORT ADMIN_HOST:PORT N KIND [--ca CA --cert C --key K]

KIND: silent  - TCP connections that send nothing
      byte    - connections that send the first byte of a ClientHello, then stall
      hello   - connections that send a whole ClientHello, then stall
      idle    - established TLS connections (with --cert/--key for mutual TLS), then idle
"""
import argparse
import re
import socket
import ssl
import time
import urllib.request


def rss(admin):
    body = urllib.request.urlopen(f'http://{admin}/metrics').read().decode()
    return int(float(re.search(r'\nprocess_resident_memory_bytes (\S+)', body).group(1)))


def client_hello():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('address')
    ap.add_argument('admin')
    ap.add_argument('n', type=int)
    ap.add_argument('kind', choices=['silent', 'byte', 'hello', 'idle'])
    ap.add_argument('--ca')
    ap.add_argument('--cert')
    ap.add_argument('--key')
    a = ap.parse_args()
    host, port = a.address.rsplit(':', 1)
    first = {'silent': b'', 'byte': client_hello()[:1], 'hello': client_hello()}.get(a.kind)
    ctx = None
    if a.kind == 'idle':
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.load_verify_locations(a.ca)
        if a.cert:
            ctx.load_cert_chain(a.cert, a.key)
    before = rss(a.admin)
    held = []
    for _ in range(a.n):
        s = socket.create_connection((host, int(port)))
        if ctx:
            s = ctx.wrap_socket(s)
        elif first:
            s.sendall(first)
        held.append(s)
    time.sleep(2)
    grew = rss(a.admin) - before
    print(f'{a.n} {a.kind} connections: +{grew / 2**20:.1f} MiB ({grew / a.n:.0f} B each)')


if __name__ == '__main__':
    main()
