# A server for the ports tests, standard library only, on 127.0.0.1:PORT:
# a WebSocket upgrade echoes frames back; GET .../sse sends one event and
# holds the stream open; any other request is answered with its request
# line and headers, as JSON.
import base64, hashlib, json, socket, sys, threading, time

GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11'


def echo(c, f):
    while True:
        h = f.read(2)
        if len(h) < 2:
            return
        op, n = h[0] & 15, h[1] & 127
        if n == 126:
            n = int.from_bytes(f.read(2), 'big')
        elif n == 127:
            n = int.from_bytes(f.read(8), 'big')
        mask = f.read(4) if h[1] & 128 else b'\0\0\0\0'
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(f.read(n)))
        if op == 8:
            c.sendall(b'\x88\x00')
            return
        head = bytes([0x80 | op])
        head += bytes([len(data)]) if len(data) < 126 else bytes([126]) + len(data).to_bytes(2, 'big')
        c.sendall(head + data)


def handle(c):
    f = c.makefile('rb')
    line = f.readline().decode().strip()
    headers = {}
    while True:
        l = f.readline().decode()
        if l in ('\r\n', '\n', ''):
            break
        k, v = l.split(':', 1)
        headers[k.strip().lower()] = v.strip()
    if headers.get('upgrade', '').lower() == 'websocket':
        key = headers['sec-websocket-key'] + GUID
        acc = base64.b64encode(hashlib.sha1(key.encode()).digest()).decode()
        c.sendall(('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n'
                   'Sec-WebSocket-Accept: %s\r\n\r\n' % acc).encode())
        echo(c, f)
    elif line.split()[1].endswith('/sse'):
        c.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\ndata: first\n\n')
        time.sleep(120)
    else:
        body = json.dumps({'port': int(sys.argv[1]), 'line': line, 'headers': headers}).encode()
        c.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nSet-Cookie: planted=1; Path=/\r\n'
                  b'Content-Length: %d\r\nConnection: close\r\n\r\n' % len(body) + body)
    c.close()


s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', int(sys.argv[1])))
s.listen(16)
while True:
    conn, _ = s.accept()
    threading.Thread(target=handle, args=(conn,), daemon=True).start()
