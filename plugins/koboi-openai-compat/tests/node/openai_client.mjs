// The official OpenAI JS client (npm "openai", pinned in .ci/package.json) against koboi
// serve: one completion as JSON, one streamed with a usage chunk, and a wrong key.
// Usage: node openai_client.mjs  (KOBOI_BASE_URL, KOBOI_KEY, KOBOI_NODE_MODULES set)
// Prints one JSON object with what it saw; the Python test checks it.
import { createRequire } from "node:module";

const require = createRequire(process.env.KOBOI_NODE_MODULES + "/");
const OpenAI = require("openai").default ?? require("openai");

const client = new OpenAI({
  baseURL: process.env.KOBOI_BASE_URL,
  apiKey: process.env.KOBOI_KEY,
  maxRetries: 0,
});
const messages = [{ role: "user", content: "What is 6 * 7?" }];

const models = await client.models.list();
const completion = await client.chat.completions.create({ model: "served", messages });

const stream = await client.chat.completions.create({
  model: "served",
  messages,
  stream: true,
  stream_options: { include_usage: true },
});
let text = "";
let finish = null;
let usage = null;
let chunks = 0;
for await (const chunk of stream) {
  chunks += 1;
  if (chunk.usage) usage = chunk.usage;
  for (const choice of chunk.choices) {
    text += choice.delta?.content ?? "";
    if (choice.finish_reason) finish = choice.finish_reason;
  }
}

const denied = await client.chat.completions.create({
  model: "served",
  messages: [{ role: "user", content: "log from-node" }],
});

let wrongKey = null;
try {
  await new OpenAI({ baseURL: process.env.KOBOI_BASE_URL, apiKey: "nope", maxRetries: 0 })
    .chat.completions.create({ model: "served", messages });
} catch (error) {
  wrongKey = { status: error.status, type: error.type, code: error.code };
}

let unknownModel = null;
try {
  await client.chat.completions.create({ model: "gpt-4o", messages });
} catch (error) {
  unknownModel = { status: error.status, code: error.code, param: error.param };
}

console.log(
  JSON.stringify({
    models: models.data.map((m) => m.id),
    content: completion.choices[0].message.content,
    session: completion.koboi?.session_id ?? null,
    usage: completion.usage,
    streamed: { text, finish, usage, chunks },
    denied: denied.choices[0].message.content,
    wrongKey,
    unknownModel,
  }),
);
