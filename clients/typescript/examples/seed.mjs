// The seed's TypeScript DockerSandbox, unchanged in use: only the import is
// sandfleet's, and the fleet runs the code (SANDFLEET_URL, SANDFLEET_TOKEN).
import { DockerSandbox, Sandbox } from "../dist/index.js";

const sandbox = new DockerSandbox();
const result = await sandbox.execute("print('Hello from the sandbox!'); import os; print(os.getcwd())");
console.log(JSON.stringify(result));
console.log(JSON.stringify(await sandbox.execute("import sys; print('bye'); sys.exit(3)")));

// The fuller client: files and stdin.
const sb = new Sandbox();
const r = await sb.run("import sys, helper; print(helper.X, sys.stdin.read())", { files: { "helper.py": "X = 41 + 1" }, stdin: "from stdin" });
console.log(JSON.stringify({ status: r.status, stdout: r.stdout }));
