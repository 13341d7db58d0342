// Drives a nodeld role port with the official OpenAI Node client, exactly
// as an application would: node openai_client.mjs http://127.0.0.1:PORT/v1
// Prints one JSON object with what each call returned.
import OpenAI from "openai";

const baseURL = process.argv[2];
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 20000 });

const out = {};
const models = await client.models.list();
out.models = models.data.map((m) => m.id);

const chat = await client.chat.completions.create({
  model: out.models[0],
  messages: [{ role: "user", content: "hello from node" }],
});
out.chat = chat.choices[0].message.content;

const stream = await client.chat.completions.create({
  model: out.models[0],
  messages: [{ role: "user", content: "stream these words please" }],
  stream: true,
});
out.stream_chunks = 0;
out.stream_text = "";
for await (const chunk of stream) {
  out.stream_chunks++;
  out.stream_text += chunk.choices[0]?.delta?.content ?? "";
}

const completion = await client.completions.create({ model: out.models[0], prompt: "complete me" });
out.completion = completion.choices[0].text;

const emb = await client.embeddings.create({ model: out.models[0], input: ["a", "b"] });
out.embeddings = emb.data.length;
out.embedding_dims = emb.data[0].embedding.length;

console.log(JSON.stringify(out));
