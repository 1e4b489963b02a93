// An agent loop over function calling, as examples/tool_loop.py in Python:
// the model asks for tools, the loop runs each call in a sandbox
// (Sandbox.callTool) and hands the result back, until the model answers. The
// model here is scripted (no network), once in OpenAI's Chat Completions
// shape and once in Anthropic's Messages shape; put the real client's call
// where `model` is. SANDFLEET_URL, SANDFLEET_TOKEN. Prints one JSON line:
// each loop's answer and its tools' results.
import { Sandbox } from "../dist/index.js";

const sb = new Sandbox();

const PROGRAMS = [
  "print(sum(range(10)))",
  "import sys\nprint('bad input', file=sys.stderr)\nsys.exit(2)",
];

// The stdout part of run_code's text result.
const stdoutOf = (text) => text.split("--- stdout")[1].split("\n").slice(1).join("\n").split("\n--- stderr")[0].trim();

// Stands in for client.chat.completions.create({ messages, tools }).
function openaiModel(messages, tools) {
  if (!tools.some((t) => t.function.name === "run_code")) throw new Error("no run_code tool");
  const turn = messages.filter((m) => m.role === "assistant").length;
  if (turn < PROGRAMS.length) {
    const args = JSON.stringify({ language: "python", code: PROGRAMS[turn] });
    return { role: "assistant", content: null, tool_calls: [{ id: `call_${turn}`, type: "function", function: { name: "run_code", arguments: args } }] };
  }
  const first = messages.find((m) => m.role === "tool");
  return { role: "assistant", content: `The sum is ${stdoutOf(first.content)}.` };
}

// Stands in for client.messages.create({ messages, tools }).
function anthropicModel(messages, tools) {
  if (!tools.some((t) => t.name === "run_code")) throw new Error("no run_code tool");
  const turn = messages.filter((m) => m.role === "assistant").length;
  if (turn < PROGRAMS.length) {
    return { role: "assistant", content: [{ type: "tool_use", id: `toolu_${turn}`, name: "run_code", input: { language: "python", code: PROGRAMS[turn] } }] };
  }
  const first = messages[2].content[0].content[0].text;
  return { role: "assistant", content: [{ type: "text", text: `The sum is ${stdoutOf(first)}.` }] };
}

async function openaiLoop(prompt) {
  const tools = await sb.tools("openai");
  const messages = [{ role: "user", content: prompt }];
  for (;;) {
    const reply = openaiModel(messages, tools);
    messages.push(reply);
    if (!reply.tool_calls?.length) return [reply.content, messages.filter((m) => m.role === "tool")];
    for (const call of reply.tool_calls) messages.push((await sb.callTool(call)).toMessage());
  }
}

async function anthropicLoop(prompt) {
  const tools = await sb.tools("anthropic");
  const messages = [{ role: "user", content: prompt }];
  for (;;) {
    const reply = anthropicModel(messages, tools);
    messages.push(reply);
    const calls = reply.content.filter((b) => b.type === "tool_use");
    if (!calls.length) {
      const results = messages.filter((m) => m.role === "user" && Array.isArray(m.content)).flatMap((m) => m.content);
      return [reply.content[0].text, results];
    }
    const blocks = [];
    for (const call of calls) blocks.push((await sb.callTool(call)).toMessage());
    messages.push({ role: "user", content: blocks });
  }
}

const [answerO, resultsO] = await openaiLoop("What is the sum of 0..9? Use run_code.");
const [answerA, resultsA] = await anthropicLoop("What is the sum of 0..9? Use run_code.");
console.log(JSON.stringify({
  openai: { answer: answerO, results: resultsO.map((r) => r.content) },
  anthropic: { answer: answerA, errors: resultsA.map((r) => r.is_error), results: resultsA.map((r) => r.content.map((b) => b.text).join("\n")) },
}));
