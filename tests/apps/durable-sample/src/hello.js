// A hello sequence, as the Durable Functions end-to-end app has it: an HTTP starter, an orchestration, an activity.
const { app } = require('@azure/functions');
const df = require('durable-functions');

df.app.activity('sayHello', { handler: (city) => `Hello ${city}!` });

df.app.orchestration('helloCities', function* (context) {
  const outputs = [];
  for (const city of ['Tokyo', 'London', 'Seattle']) outputs.push(yield context.df.callActivity('sayHello', city));
  return outputs;
});

app.http('startOrchestration', {
  route: 'orchestrators/{orchestratorName}',
  methods: ['POST', 'GET'],
  extraInputs: [df.input.durableClient()],
  handler: async (request, context) => {
    const client = df.getClient(context);
    const instanceId = await client.startNew(request.params.orchestratorName);
    return client.createCheckStatusResponse(request, instanceId);
  },
});
