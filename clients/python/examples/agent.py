# An agent's tool calls over HTTP: write a file into a workspace, run a
# script on it that draws a PNG, fetch the PNG and the workspace's snapshot
# (SANDFLEET_URL, SANDFLEET_TOKEN). Prints one JSON line of what came back.
import io
import json
import os
import tarfile

from sandfleet import Sandbox

sb = Sandbox()
ws = "agent-" + os.urandom(4).hex()

step1 = sb.run("open('data.csv', 'w').write('x,y\\n1,2\\n3,4\\n')", workspace=ws)

# A 2x2 grey PNG written with zlib and struct only.
draw = """
import csv, struct, zlib
rows = list(csv.DictReader(open('data.csv')))
def chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))
raw = b''.join(b'\\x00' + bytes([128, 128]) for _ in range(2))
png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 2, 2, 8, 0, 0, 0, 0))
png += chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b'')
import os; os.makedirs('plots', exist_ok=True)
open('plots/plot.png', 'wb').write(png)
print(len(rows), 'rows')
"""
step2 = sb.run(draw, workspace=ws, outputs=["plots/*.png"])
listed = sb.artifacts(step2.id)
png = sb.artifact(step2.id, "plots/plot.png")
head = sb.workspace(ws)
with tarfile.open(fileobj=io.BytesIO(sb.snapshot(ws))) as tar:
    names = sorted(m.name for m in tar.getmembers() if m.isfile())

print(json.dumps({
    "steps": [step1.status, step2.status],
    "stdout": step2.stdout,
    "artifacts": [a["name"] for a in listed["artifacts"]],
    "png_signature": png[:8] == b"\x89PNG\r\n\x1a\n",
    "revision": head["revision"],
    "snapshot": names,
}))
