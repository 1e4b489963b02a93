# The seed's usage example, unchanged but for the import: the class is
# sandfleet's, and the fleet runs the code (SANDFLEET_URL, SANDFLEET_TOKEN).
import json

from sandfleet import DockerSandbox, SandboxConfig

# Usage in the multi-agent system
sandbox = DockerSandbox()
result = sandbox.execute(
    "print('Hello from the sandbox!'); import os; print(os.getcwd())"
)

print(json.dumps(result))

# The seed's configuration fields, and its return shape for a failure.
strict = DockerSandbox(SandboxConfig(timeout=2, memory_limit="256m"))
print(json.dumps(strict.execute("import sys; print('bye'); sys.exit(3)")))
print(json.dumps(strict.execute("while True: pass")))
