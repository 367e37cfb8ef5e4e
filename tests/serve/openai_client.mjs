// The official `openai` npm client against a running `lowbit serve` (started by tests/serve/test_server_openai.cpp).
// Usage: node tests/serve/openai_client.mjs http://127.0.0.1:PORT/v1 [API_KEY]
// Exercises completions and chat completions, streamed and not, usage, stop, max_tokens, seeds, n choices,
// logit_bias and errors;
// exits non-zero on the first failed check (its message names it).
import OpenAI from "openai";
import assert from "node:assert/strict";

const baseURL = process.argv[2];
if (!baseURL) {
  console.error("usage: node openai_client.mjs http://127.0.0.1:PORT/v1 [API_KEY]");
  process.exit(2);
}
const client = new OpenAI({ baseURL, apiKey: process.argv[3] || "unused", maxRetries: 0, timeout: 60_000 });

async function collect(stream) {
  let text = "", finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text ?? c.delta?.content ?? "";
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish, usage, chunks };
}

function checkUsage(usage, completionTokens, what) {
  assert.ok(usage, `${what}: usage present`);
  assert.ok(usage.prompt_tokens > 0, `${what}: prompt_tokens > 0`);
  assert.equal(usage.completion_tokens, completionTokens, `${what}: completion_tokens`);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens, `${what}: total_tokens`);
}

async function expectStatus(promise, status, what) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `${what}: an APIError (got ${e})`);
    assert.equal(e.status, status, `${what}: status`);
    return e;
  }
  assert.fail(`${what}: expected HTTP ${status}, the request succeeded`);
}

const checks = [];
const check = (name, fn) => checks.push([name, fn]);

const models = await client.models.list();
assert.equal(models.data.length, 1, "one served model");
const model = models.data[0].id;
const prompt = "Once upon a time";

let greedy;
check("completion", async () => {
  const r = await client.completions.create({ model, prompt, max_tokens: 16, temperature: 0 });
  assert.equal(r.object, "text_completion");
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.model, model);
  assert.equal(r.choices.length, 1);
  assert.ok(r.choices[0].text.length > 0, "non-empty text");
  assert.equal(r.choices[0].finish_reason, "length");
  checkUsage(r.usage, 16, "completion");
  greedy = r.choices[0].text;
});

check("completion stream == non-stream", async () => {
  const s = await client.completions.create({
    model, prompt, max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  const got = await collect(s);
  assert.equal(got.text, greedy);
  assert.equal(got.finish, "length");
  checkUsage(got.usage, 16, "completion stream");
});

let chatText;
const messages = [{ role: "system", content: "You tell stories." }, { role: "user", content: "Tell me a story." }];
check("chat", async () => {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0 });
  assert.equal(r.object, "chat.completion");
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.ok(["length", "stop"].includes(r.choices[0].finish_reason));
  checkUsage(r.usage, r.usage.completion_tokens, "chat");
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 12);
  chatText = r.choices[0].message.content;
});

check("chat stream == non-stream", async () => {
  const s = await client.chat.completions.create({
    model, messages, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  const got = await collect(s);
  assert.equal(got.text, chatText);
  assert.ok(got.usage && got.usage.completion_tokens >= 1);
});

check("stop string", async () => {
  const words = greedy.trim().split(" ");
  assert.ok(words.length >= 3, `greedy text has words: ${JSON.stringify(greedy)}`);
  const stop = " " + words[2];
  const expected = greedy.slice(0, greedy.indexOf(stop));
  const r = await client.completions.create({ model, prompt, max_tokens: 16, temperature: 0, stop: [stop] });
  assert.equal(r.choices[0].text, expected);
  assert.equal(r.choices[0].finish_reason, "stop");
  const s = await collect(
    await client.completions.create({ model, prompt, max_tokens: 16, temperature: 0, stop, stream: true }));
  assert.equal(s.text, expected);
  assert.equal(s.finish, "stop");
});

check("max_tokens", async () => {
  const r = await client.completions.create({ model, prompt, max_tokens: 3, temperature: 0 });
  assert.equal(r.usage.completion_tokens, 3);
  assert.equal(r.choices[0].finish_reason, "length");
  assert.ok(greedy.startsWith(r.choices[0].text), "a prefix of the longer greedy text");
});

check("seed reproducibility", async () => {
  const ask = (seed) =>
    client.completions.create({ model, prompt, max_tokens: 24, temperature: 1.0, seed, ignore_eos: true });
  const a = await ask(1234), b = await ask(1234);
  assert.equal(a.choices[0].text, b.choices[0].text, "same seed, same text");
  const others = await Promise.all([1, 2, 3].map((s) => ask(s)));
  assert.ok(others.some((o) => o.choices[0].text !== a.choices[0].text), "other seeds give other texts");
});

check("n choices", async () => {
  const ask = (seed, n) =>
    client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 1.0, seed, n, ignore_eos: true });
  const r = await ask(77, 2);
  assert.equal(r.choices.length, 2);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  const one = await Promise.all([77, 78].map((seed) => ask(seed, 1)));
  for (const i of [0, 1])
    assert.equal(r.choices[i].message.content, one[i].choices[0].message.content, `choice ${i} = seed ${77 + i}`);
  assert.equal(r.usage.completion_tokens, 20);
  assert.equal(r.usage.prompt_tokens, one[0].usage.prompt_tokens);
  // Streamed: the client's chunks carry each choice's index.
  const texts = ["", ""];
  const s = await client.chat.completions.create({
    model, messages, max_tokens: 10, temperature: 1.0, seed: 77, n: 2, ignore_eos: true, stream: true,
  });
  for await (const chunk of s) for (const c of chunk.choices) texts[c.index] += c.delta?.content ?? "";
  assert.deepEqual(texts, r.choices.map((c) => c.message.content));
});

check("logit_bias", async () => {
  const r = await client.completions.create({
    model, prompt, max_tokens: 3, temperature: 0, logprobs: 0, ignore_eos: true, logit_bias: { "100": 100 },
  });
  const toks = r.choices[0].logprobs.tokens;
  assert.equal(toks.length, 3);
  assert.ok(toks.every((t) => t === toks[0]), `every token is the forced one: ${JSON.stringify(toks)}`);
});

check("logprobs", async () => {
  const r = await client.chat.completions.create({
    model, messages, max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 2,
  });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, r.usage.completion_tokens);
  for (const t of lp) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 2);
  }
});

check("errors", async () => {
  const e = await expectStatus(client.completions.create({ model, prompt, n: 17 }), 400, "n = 17");
  assert.match(e.message, /'n' must be in \[1, 16\]/);
  await expectStatus(client.completions.create({ model, prompt, max_tokens: -5 }), 400, "negative max_tokens");
  await expectStatus(client.completions.create({ model: "no-such-model", prompt }), 404, "unknown model");
  await expectStatus(
    client.chat.completions.create({ model, messages, response_format: { type: "json_object" } }), 400,
    "response_format json_object");
});

let failed = 0;
for (const [name, fn] of checks) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}
console.log(failed ? `${failed} of ${checks.length} checks failed` : `all ${checks.length} checks passed`);
process.exit(failed ? 1 : 0);
