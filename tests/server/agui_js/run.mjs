// The official AG-UI TypeScript client (@ag-ui/client) runs turns against a toolrelay
// server: `node run.mjs URL`. Every stream goes through the client's own pipeline,
// whose event verifier throws on any event out of protocol. Client tools are executed
// here, the way an AG-UI application does it: after a run, every tool call without a
// result is run and the agent is run again with the results. Prints one JSON line.
import { HttpAgent } from "@ag-ui/client";

const url = process.argv[2];
const SECRETS = { alice: 42, bob: 7 };
const secretTool = {
  name: "get_secret_number",
  description: "A person's secret number.",
  parameters: {
    type: "object",
    properties: { name: { type: "string" } },
    required: ["name"],
  },
};

async function turn(threadId, prompt, tools) {
  const agent = new HttpAgent({
    url,
    threadId,
    initialMessages: [{ id: `u-${threadId}`, role: "user", content: prompt }],
  });
  const runs = [];
  let clientCalls = 0;
  for (let round = 0; round < 12; round++) {
    const events = [];
    const subscriber = {
      onEvent({ event }) {
        events.push({
          type: event.type,
          name: event.name,
          result: event.result,
          outcome: event.outcome,
        });
      },
    };
    await agent.runAgent({ tools }, subscriber);
    runs.push(events);
    const answered = new Set(
      agent.messages.filter((m) => m.role === "tool").map((m) => m.toolCallId),
    );
    const pending = agent.messages
      .flatMap((m) => (m.role === "assistant" ? m.toolCalls ?? [] : []))
      .filter((call) => !answered.has(call.id));
    if (pending.length === 0) break;
    for (const call of pending) {
      const args = JSON.parse(call.function.arguments || "{}");
      clientCalls += 1;
      agent.addMessage({
        id: `r-${call.id}`,
        role: "tool",
        toolCallId: call.id,
        content: String(SECRETS[args.name]),
      });
    }
  }
  const texts = agent.messages.filter(
    (m) => m.role === "assistant" && typeof m.content === "string" && m.content,
  );
  return { threadId, runs, clientCalls, answer: texts.at(-1)?.content ?? null };
}

const out = { turns: [], error: null };
try {
  // Server tools only, two rounds (lookup_city, then get_weather).
  out.turns.push(await turn("js-multihop", "What's the weather where Alice lives?", []));
  // A client tool: the run hands the calls over, the client answers, the turn goes on.
  out.turns.push(await turn("js-client", "What are the secret numbers?", [secretTool]));
  // The round limit, with a client tool called every round.
  out.turns.push(await turn("js-loop", "loop", [secretTool]));
} catch (error) {
  out.error = String(error && error.stack ? error.stack : error);
}
console.log(JSON.stringify(out));
process.exit(out.error ? 1 : 0);
