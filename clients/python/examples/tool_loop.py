# An agent loop over function calling: the model asks for tools, the loop
# runs each call in a sandbox (Sandbox.call_tool) and hands the result back,
# until the model answers. The model here is scripted (no network), once in
# OpenAI's Chat Completions shape and once in Anthropic's Messages shape; put
# the real client's call where `model` is. SANDFLEET_URL, SANDFLEET_TOKEN.
# Prints one JSON line: each loop's answer and its tools' results.
import json

from sandfleet import Sandbox

sb = Sandbox()

PROGRAMS = [
    "print(sum(range(10)))",
    "import sys\nprint('bad input', file=sys.stderr)\nsys.exit(2)",
]


def stdout_of(text):
    """The stdout part of run_code's text result."""
    out = text.split("--- stdout", 1)[1].split("\n", 1)[1]
    return out.split("\n--- stderr", 1)[0].strip()


def openai_model(messages, tools):
    """Stands in for client.chat.completions.create(messages=..., tools=...)."""
    assert any(t["function"]["name"] == "run_code" for t in tools)
    turn = sum(1 for m in messages if m["role"] == "assistant")
    if turn < len(PROGRAMS):
        args = json.dumps({"language": "python", "code": PROGRAMS[turn]})
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_%d" % turn, "type": "function", "function": {"name": "run_code", "arguments": args}}]}
    first = next(m for m in messages if m["role"] == "tool")
    return {"role": "assistant", "content": "The sum is %s." % stdout_of(first["content"])}


def anthropic_model(messages, tools):
    """Stands in for client.messages.create(messages=..., tools=...)."""
    assert any(t["name"] == "run_code" for t in tools)
    turn = sum(1 for m in messages if m["role"] == "assistant")
    if turn < len(PROGRAMS):
        return {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_%d" % turn, "name": "run_code",
                                                  "input": {"language": "python", "code": PROGRAMS[turn]}}]}
    first = messages[2]["content"][0]["content"][0]["text"]
    return {"role": "assistant", "content": [{"type": "text", "text": "The sum is %s." % stdout_of(first)}]}


def openai_loop(prompt):
    tools = sb.tools("openai")
    messages = [{"role": "user", "content": prompt}]
    while True:
        reply = openai_model(messages, tools)
        messages.append(reply)
        if not reply.get("tool_calls"):
            return reply["content"], [m for m in messages if m["role"] == "tool"]
        for call in reply["tool_calls"]:
            messages.append(sb.call_tool(call).to_message())


def anthropic_loop(prompt):
    tools = sb.tools("anthropic")
    messages = [{"role": "user", "content": prompt}]
    while True:
        reply = anthropic_model(messages, tools)
        messages.append(reply)
        calls = [b for b in reply["content"] if b["type"] == "tool_use"]
        if not calls:
            return reply["content"][0]["text"], [b for m in messages if m["role"] == "user" and isinstance(m["content"], list)
                                                 for b in m["content"]]
        messages.append({"role": "user", "content": [sb.call_tool(c).to_message() for c in calls]})


answer_o, results_o = openai_loop("What is the sum of 0..9? Use run_code.")
answer_a, results_a = anthropic_loop("What is the sum of 0..9? Use run_code.")
print(json.dumps({
    "openai": {"answer": answer_o, "results": [r["content"] for r in results_o]},
    "anthropic": {"answer": answer_a, "errors": [r["is_error"] for r in results_a],
                  "results": ["\n".join(b["text"] for b in r["content"]) for r in results_a]},
}))
