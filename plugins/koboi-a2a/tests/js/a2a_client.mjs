// The JavaScript A2A SDK (@a2a-js/sdk, from the npm registry) as a client of a koboi
// agent: verify the card's signature against the served JWK set, send a message
// (blocking and streamed), read the task back, try to cancel it. Prints one JSON object.
//
// usage: node a2a_client.mjs BASE_URL API_KEY SDK_DIR
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [base, key, sdkDir] = process.argv.slice(2);
const load = (sub) => import(pathToFileURL(join(sdkDir, "dist", sub, "index.js")).href);
const sdk = await load("");
const { ClientFactory } = await load("client");

const out = {};
const card = await (await fetch(`${base}/.well-known/agent-card.json`)).json();
const jwks = await (await fetch(`${base}/.well-known/jwks.json`)).json();
const verify = sdk.verifyAgentCardSignature(async (kid) => jwks.keys.find((k) => k.kid === kid));
await verify(card);
out.verified = true;
const tampered = { ...card, description: card.description + " (changed)" };
try {
  await verify(tampered);
  out.tamperedVerified = true;
} catch (error) {
  out.tamperedVerified = false;
}

const auth = { serviceParameters: { Authorization: `Bearer ${key}` } };
const client = await new ClientFactory().createFromUrl(base);
const message = (text) => ({
  message: { messageId: crypto.randomUUID(), role: sdk.Role.ROLE_USER, parts: [{ content: { $case: "text", value: text } }] },
});

const sent = await client.sendMessage(message("What is 6 * 7?"), auth);
const task = sent.payload?.value ?? sent;
out.blocking = {
  id: task.id,
  state: task.status?.state,
  answer: task.artifacts?.[0]?.parts?.[0]?.content?.value ?? task.artifacts?.[0]?.parts?.[0]?.text,
};

const kinds = [];
let last;
for await (const event of client.sendMessageStream(message("What is 2 + 3?"), auth)) {
  kinds.push(event.payload?.$case);
  last = event;
}
out.streamed = { kinds, lastState: last?.payload?.value?.status?.state };

const got = await client.getTask({ id: task.id }, auth);
out.got = { id: got.id, state: got.status?.state };
try {
  await client.cancelTask({ id: task.id }, auth);
  out.cancelError = null;
} catch (error) {
  out.cancelError = String(error?.message ?? error);
}
try {
  await client.getTask({ id: task.id }, { serviceParameters: {} });
  out.noKey = "accepted";
} catch (error) {
  out.noKey = String(error?.message ?? error);
}
out.states = { completed: sdk.TaskState.TASK_STATE_COMPLETED };
console.log(JSON.stringify(out));
